"""The console's settings page over HTTP on the local stack: the tenant's standing as GET /tenant answers it,
with its text as text; its own pause set and lifted from the page by a sender (and refused to a viewer),
each as the API's pause is."""

from __future__ import annotations

import html

import pytest

from chalicelib import wiring
from chalicelib.api.principal import Role
from chalicelib.core.contract import Sender
from tests.e2e.console_forms import csrf as _csrf
from tests.e2e.console_forms import person as _person
from tests.e2e.test_console import Browser

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=alert(1)>"


def test_the_settings_page_shows_the_tenants_standing_as_the_api_gives_it(stack, uid):
    c = wiring.container()
    user = f"settings-{uid}"
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", HOSTILE, None, None, None, 1.0), c.ses.account_of)
    browser = Browser(stack.api_url)
    assert browser.ask("POST", "/console/sign-in", {"key": c.api_keys.replace_all(user)})[0] == 303
    status, _headers, page = browser.ask("GET", "/console/settings")
    shown = html.unescape(page)
    standing = c.tenant_view.get_for(user)
    assert status == 200 and standing["plan"] == "free" and ">free<" in page
    assert f"{HOSTILE} <news@{user}.example>" in shown and "<img src=x" not in page  # text, never markup
    assert f"of {standing['dailyCap']['limit']} emails" in shown
    assert "None: your email goes out." in page


def test_a_sender_pauses_and_resumes_the_tenant_from_the_page_and_a_viewer_cannot(stack, uid):
    c = wiring.container()
    user = f"settings-p-{uid}"
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "News", None, None, None, 1.0), c.ses.account_of)
    sender = _person(stack, user, f"sam-{uid}@example.org", Role.SENDER)
    token = _csrf(sender.ask("GET", "/console/settings")[2])
    status, headers, _ = sender.ask("POST", "/console/settings/pause", {"csrf": token, "reason": HOSTILE})
    assert status == 303
    page = html.unescape(sender.ask("GET", headers["location"])[2])
    assert "Paused: none of your email goes out" in page and HOSTILE in page and "Lift your own pause" in page
    assert [p["by"] for p in c.tenant_view.get_for(user)["pauses"]] == ["tenant"]
    viewer = _person(stack, user, f"vic-{uid}@example.org", Role.VIEWER)
    page = viewer.ask("GET", "/console/settings")[2]
    assert "/console/settings/resume" not in page and "/console/settings/pause" not in page
    status, _headers, page = viewer.ask("POST", "/console/settings/resume", {"csrf": _csrf(page)})
    assert status == 403 and "you are signed in as a viewer" in html.unescape(page)
    assert c.tenant_view.get_for(user)["paused"]
    too_long = {"csrf": token, "reason": "x" * 201}
    status, headers, _ = sender.ask("POST", "/console/settings/resume", {"csrf": token})
    assert status == 303 and not c.tenant_view.get_for(user)["paused"]
    status, _headers, page = sender.ask("POST", "/console/settings/pause", too_long)
    assert status == 400 and "at most 200 characters" in page and not c.tenant_view.get_for(user)["paused"]
