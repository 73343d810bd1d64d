"""The console's suppressions page over HTTP on the local stack: an admin pastes addresses (commas and lines,
past the console's usual form size), finds them by reason and by an address or its start, lifts one it
added; a complaint shows why it stays and the server refuses to lift it whatever is posted; one bad address
in a paste adds none and is named; a viewer reads the list and is refused every change; the reason and the
detail are text."""

from __future__ import annotations

import html
import re
import urllib.parse

import pytest

from chalicelib import wiring
from chalicelib.api.principal import Role
from tests.e2e.console_forms import csrf as _csrf
from tests.e2e.console_forms import signed_in_with_key as _admin
from tests.e2e.console_forms import tenant_with_key
from tests.e2e.test_console import Browser

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=alert(1)>"


def _tenant(uid: str, name: str) -> tuple[str, str]:
    return tenant_with_key(f"supp-{name}-{uid}")


def _listed(page: str) -> list[str]:
    return re.findall(r'<td class="address">([^<]+?)(?: <span|</td>)', page)


def test_an_admin_adds_finds_and_lifts_and_a_complaint_stays_with_why(stack, uid):
    user, key = _tenant(uid, "admin")
    c = wiring.container()
    c.suppressions.add(user, f"angry-{uid}@example.org", "complaint", HOSTILE)
    admin = _admin(stack, key)
    page = admin.ask("GET", "/console/suppressions")[2]
    assert _listed(page) == [f"angry-{uid}@example.org"] and HOSTILE in html.unescape(page) and "<img" not in page
    assert "marked this tenant&#39;s email as spam" in page and "/console/suppressions/lift" not in page

    pasted = f"old-1-{uid}@example.org, old-2-{uid}@example.org\nOther-{uid}@Example.org\n\n"
    form = {"csrf": _csrf(page), "addresses": pasted, "reason": f"left the company {HOSTILE}"}
    status, headers, _ = admin.ask("POST", "/console/suppressions", form)
    assert status == 303
    page = admin.ask("GET", headers["location"])[2]
    assert "Added 3 to the list" in page and len(_listed(page)) == 4
    assert f"left the company {HOSTILE}" in html.unescape(page) and "<img" not in page

    page = admin.ask("GET", "/console/suppressions?reason=manual&prefix=OLD-")[2]
    assert _listed(page) == [f"old-1-{uid}@example.org", f"old-2-{uid}@example.org"]
    page = admin.ask("GET", f"/console/suppressions?prefix={urllib.parse.quote(f'old-2-{uid}@example.org')}")[2]
    assert _listed(page) == [f"old-2-{uid}@example.org"] and '<span class="role">exact</span>' in page

    lift = {"csrf": _csrf(page), "address": f"old-2-{uid}@example.org"}
    status, headers, _ = admin.ask("POST", "/console/suppressions/lift", lift)
    assert status == 303 and "your campaigns may mail it again" in admin.ask("GET", headers["location"])[2]
    assert c.suppressions.entry(user, f"old-2-{uid}@example.org") is None
    status, _headers, page = admin.ask(
        "POST", "/console/suppressions/lift", {**lift, "address": f"angry-{uid}@example.org"}
    )
    assert status == 409 and "stays suppressed" in page and c.suppressions.entry(user, f"angry-{uid}@example.org")
    status, _headers, page = admin.ask("POST", "/console/suppressions/lift", lift)
    assert status == 404 and "not on this tenant" in page


def test_one_bad_address_in_a_paste_adds_none_and_is_named_by_its_place(stack, uid):
    user, key = _tenant(uid, "bad")
    admin = _admin(stack, key)
    token = _csrf(admin.ask("GET", "/console/suppressions")[2])
    pasted = f"fine-{uid}@example.org\n{HOSTILE}\nalso-fine-{uid}@example.org"
    status, _headers, page = admin.ask("POST", "/console/suppressions", {"csrf": token, "addresses": pasted})
    assert status == 400 and "nothing was added" in page and "address 2:" in page
    assert HOSTILE in html.unescape(page) and "<img" not in page and html.escape(pasted) in page  # kept to fix
    assert wiring.container().suppression_api.list_for(user, {})["suppressions"] == []


def test_a_paste_of_300_long_addresses_past_the_usual_form_size_is_taken(stack, uid):
    _user, key = _tenant(uid, "many")
    admin = _admin(stack, key)
    token = _csrf(admin.ask("GET", "/console/suppressions")[2])
    many = [f"{'x' * 45}.{i:03d}-{uid}@example.org" for i in range(300)]  # about 24 KB posted
    status, headers, _ = admin.ask("POST", "/console/suppressions", {"csrf": token, "addresses": "\n".join(many)})
    assert status == 303 and "Added 300 to the list" in admin.ask("GET", headers["location"])[2]
    page = admin.ask("GET", "/console/suppressions")[2]
    assert len(_listed(page)) == 50 and "More</a>" in page


def test_a_viewer_reads_the_list_and_every_change_is_refused_by_the_server(stack, uid):
    user, _key = _tenant(uid, "viewer")
    c = wiring.container()
    c.suppression_api.add_for(user, {"addresses": [f"kept-{uid}@example.org"]})
    c.people.invite(user, f"vic-{uid}@example.org", Role.VIEWER, "operator")
    viewer = Browser(stack.api_url)
    link = f"/console/link/{c.sign_in_links.mint(f'vic-{uid}@example.org')}"
    assert viewer.ask("POST", link, {"tenant": user})[0] == 303
    page = viewer.ask("GET", "/console/suppressions")[2]
    assert _listed(page) == [f"kept-{uid}@example.org"] and "Add addresses" not in page and "/lift" not in page
    token = _csrf(page)
    status, _headers, page = viewer.ask(
        "POST", "/console/suppressions/lift", {"csrf": token, "address": f"kept-{uid}@example.org"}
    )
    assert status == 403 and "you are signed in as a viewer" in html.unescape(page)
    status, _headers, _page = viewer.ask("POST", "/console/suppressions", {"csrf": token, "addresses": "a@example.org"})
    assert status == 403 and len(c.suppression_api.list_for(user, {})["suppressions"]) == 1
