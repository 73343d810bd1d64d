"""API keys and sessions on the console's people page, over HTTP on the local stack: an admin makes a key (shown
on the answer's page only, its label as text), finds it working on the API, revokes it and finds it refused
at its next request, with the console sessions it began over; a tenant holds at most 10 keys; a key a tenant
row held from before is listed and revoked too; an admin sees who is signed in, from which browser and
address, and ends a person's session, which holds at their next page; a viewer sees neither and is refused."""

from __future__ import annotations

import html
import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.api.principal import Role
from chalicelib.control.api_keys import MAX_KEYS, key_hash, new_key
from tests.e2e.console_forms import csrf as _csrf
from tests.e2e.console_forms import signed_in_with_key as _signed_in_with
from tests.e2e.console_forms import tenant_with_key
from tests.e2e.test_console import Browser

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=alert(1)>"
FIREFOX = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0"


def _tenant(uid: str, name: str) -> tuple[str, str]:
    return tenant_with_key(f"keys-{name}-{uid}")


def _api(stack: Any, key: str) -> int:
    request = urllib.request.Request(f"{stack.api_url}/tenant", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_an_admin_makes_a_key_shown_once_uses_it_and_revokes_it_refused_at_once(stack, uid):
    user, key = _tenant(uid, "make")
    admin = _signed_in_with(stack, key)
    page = admin.ask("GET", "/console/people")[2]
    status, _headers, made = admin.ask("POST", "/console/people/keys", {"csrf": _csrf(page), "label": f"CI {HOSTILE}"})
    assert status == 201 and "shown this once" in made
    found = re.search(r'id="new-key" value="(msk_[^"]+)"', made)
    assert found is not None and "<img" not in made and f"CI {HOSTILE}" in html.unescape(made)
    new = found.group(1)
    assert _api(stack, new) == 200 and _api(stack, key) == 200  # beside the other, not instead of it

    page = admin.ask("GET", "/console/people")[2]
    shown = html.unescape(page)
    assert new not in page and new[:20] in page and f"CI {HOSTILE}" in shown and "<img" not in page
    (listed,) = [k for k in wiring.container().api_keys.listed(user) if k["label"] == f"CI {HOSTILE}"]
    assert listed["createdBy"] == "api-key" and listed["shown"] == new[: len(listed["shown"]) - 1] + "…"

    by_new = _signed_in_with(stack, new)
    assert by_new.ask("GET", "/console/people")[0] == 200
    status, headers, _ = admin.ask("POST", "/console/people/keys/revoke", {"csrf": _csrf(page), "key": listed["id"]})
    assert status == 303 and "is revoked" in admin.ask("GET", headers["location"])[2]
    assert _api(stack, new) == 404 and _api(stack, key) == 200  # refused at once; the other goes on
    status, headers, _ = by_new.ask("GET", "/console/people")
    assert status == 303 and headers["location"].endswith("/console/sign-in")  # its session is over
    status, _headers, again = admin.ask(
        "POST", "/console/people/keys/revoke", {"csrf": _csrf(page), "key": listed["id"]}
    )
    assert status == 404 and "no such key" in again


def test_a_tenant_holds_at_most_ten_keys_and_the_operators_key_replaces_them_all(stack, uid):
    user, key = _tenant(uid, "ten")
    c = wiring.container()
    made = [c.api_keys.make(user, "api-key", f"job {i}").key for i in range(MAX_KEYS - 1)]
    admin = _signed_in_with(stack, key)
    page = admin.ask("GET", "/console/people")[2]
    assert "Make a key" not in page and "at most 10 keys" in page
    status, _headers, page = admin.ask("POST", "/console/people/keys", {"csrf": _csrf(page), "label": "one more"})
    assert status == 400 and "at most 10 keys" in page
    newest = c.api_keys.replace_all(user)
    assert [_api(stack, k) for k in (key, *made[:2], newest)] == [404, 404, 404, 200]
    assert len(c.api_keys.listed(user)) == 1


def test_a_key_the_tenant_row_held_from_before_works_is_listed_and_is_revoked(stack, uid):
    user, _key = _tenant(uid, "legacy")
    c = wiring.container()
    old = new_key(user)
    c.tenants.set_api_key_hash(user, key_hash(old))
    assert _api(stack, old) == 200
    admin = _signed_in_with(stack, old)
    page = admin.ask("GET", "/console/people")[2]
    assert "before keys were listed" in page
    status, _headers, _ = admin.ask("POST", "/console/people/keys/revoke", {"csrf": _csrf(page), "key": "key_first"})
    assert status == 303 and _api(stack, old) == 404
    assert admin.ask("GET", "/console/people")[0] == 303  # this session was the key's: over


def test_an_admin_sees_who_is_signed_in_from_where_and_ends_a_session_at_its_next_page(stack, uid):
    user, key = _tenant(uid, "sessions")
    c = wiring.container()
    c.people.invite(user, f"pat-{uid}@example.org", Role.SENDER, "operator")
    pat = Browser(stack.api_url)
    link = f"/console/link/{c.sign_in_links.mint(f'pat-{uid}@example.org')}"
    assert pat.ask("POST", link, {"tenant": user}, {"User-Agent": FIREFOX})[0] == 303
    admin = _signed_in_with(stack, key)
    page = admin.ask("GET", "/console/people")[2]
    assert "Firefox on Windows</span>, from 127.0.0.1" in page and f"pat-{uid}@example.org" in page
    assert page.count('<span class="role">this session</span>') == 1
    (listed,) = [s for s in c.sessions.of_tenant(user) if s.person == f"pat-{uid}@example.org"]
    assert json.dumps(listed.listed_id) and listed.listed_id in page

    form = {"csrf": _csrf(page), "session": listed.listed_id}
    status, headers, _ = admin.ask("POST", "/console/people/sessions/end", form)
    assert status == 303 and "The session is over" in admin.ask("GET", headers["location"])[2]
    assert pat.ask("GET", "/console")[0] == 303  # to the sign-in page
    assert admin.ask("POST", "/console/people/sessions/end", form)[0] == 404


def test_a_viewer_sees_no_keys_or_sessions_and_is_refused_each_change(stack, uid):
    user, _key = _tenant(uid, "viewer")
    c = wiring.container()
    c.people.invite(user, f"vic-{uid}@example.org", Role.VIEWER, "operator")
    viewer = Browser(stack.api_url)
    assert (
        viewer.ask("POST", f"/console/link/{c.sign_in_links.mint(f'vic-{uid}@example.org')}", {"tenant": user})[0]
        == 303
    )
    page = viewer.ask("GET", "/console/people")[2]
    assert 'id="keys-h"' not in page and 'id="sessions-h"' not in page and "Make a key" not in page
    token = _csrf(page)
    for path, form in (
        ("keys", {"label": "x"}),
        ("keys/revoke", {"key": "key_first"}),
        ("sessions/end", {"session": "0" * 16}),
    ):
        status, _headers, refused = viewer.ask("POST", f"/console/people/{path}", {"csrf": token, **form})
        assert status == 403 and "you are signed in as a viewer" in html.unescape(refused), path
    assert len(c.api_keys.listed(user)) == 1
