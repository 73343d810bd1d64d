"""The console's webhooks page over HTTP on the local stack, against a real receiver on loopback: an admin adds
an endpoint (its secret on the answer's page only, and the receiver verifies a test with it by Standard
Webhooks' own library), sees the test's request and answer, replays a disabled endpoint and follows its job,
removes one; a viewer reads the list and is refused every change; the URL and the reason are text."""

from __future__ import annotations

import html
import re

import pytest
from standardwebhooks.webhooks import Webhook

from chalicelib import wiring
from chalicelib.api.principal import Role
from infra.webhook_receiver import WebhookReceiver
from tests.conftest import eventually
from tests.e2e.console_forms import csrf as _csrf
from tests.e2e.console_forms import person as _person
from tests.e2e.console_forms import signed_in_with_key as _admin
from tests.e2e.console_forms import tenant_with_key
from tests.e2e.test_console import Browser
from tests.e2e.test_webhook_bounds import _park_many

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=alert(1)>"


def _tenant(uid: str, name: str) -> tuple[str, str]:
    return tenant_with_key(f"hooks-{name}-{uid}")


def _add(browser: Browser, url: str, types: tuple[str, ...], per_request: str = "1") -> tuple[int, str]:
    token = _csrf(browser.ask("GET", "/console/webhooks")[2])
    fields = [("csrf", token), ("url", url), ("maxEventsPerRequest", per_request)]
    status, _headers, page = browser.ask("POST", "/console/webhooks", fields + [("eventTypes", t) for t in types])
    return status, page


def test_an_admin_adds_an_endpoint_its_secret_shown_once_and_a_test_shows_the_request_and_the_answer(stack, uid):
    user, key = _tenant(uid, "add")
    admin = _admin(stack, key)
    assert "No endpoints yet" in admin.ask("GET", "/console/webhooks")[2]
    receiver = WebhookReceiver()
    try:
        status, page = _add(admin, receiver.url, ("bounced", "complained"), "5")
        assert status == 201
        secret = re.search(r'id="secret" value="(whsec_[^"]+)"', page)
        assert secret is not None and "shown\n    this once" in page
        (listed,) = wiring.container().webhook_registration.list(user)["endpoints"]
        assert (listed["url"], listed["eventTypes"], listed["maxEventsPerRequest"]) == (
            receiver.url,
            ["bounced", "complained"],
            5,
        )
        page = admin.ask("GET", "/console/webhooks")[2]
        assert receiver.url in page and secret.group(1) not in page  # the list never shows it again

        path = f"/console/webhooks/{listed['id']}/test"
        status, _headers, page = admin.ask("POST", path, {"csrf": _csrf(page)})
        assert status == 200 and "It answered <strong>200</strong>" in page
        ((headers, body),) = receiver.requests
        assert Webhook(secret.group(1)).verify(body, headers)["type"] == "moonsend.test"  # the library's check
        shown = html.unescape(page)
        assert headers["webhook-id"] in shown and headers["webhook-signature"] in shown and body in shown

        status, _headers, page = admin.ask("POST", path, {"csrf": _csrf(page)})
        assert status == 429 and "every 10 s" in page and len(receiver.requests) == 1
    finally:
        receiver.close()


def test_a_refused_endpoint_is_said_on_the_page_and_nothing_is_added(stack, uid):
    user, key = _tenant(uid, "bad")
    admin = _admin(stack, key)
    status, page = _add(admin, "https://10.0.0.7/hooks", ("sent",))
    assert status == 400 and "not a public address" in page and 'value="https://10.0.0.7/hooks"' in page
    status, page = _add(admin, "https://hooks.example.com/x", ())
    assert status == 400 and "eventTypes" in page
    status, page = _add(admin, "https://hooks.example.com/x", ("sent",), "many")
    assert status == 400 and "maxEventsPerRequest" in page
    assert wiring.container().webhook_registration.list(user)["endpoints"] == []


def test_a_disabled_endpoint_is_replayed_from_the_page_which_follows_its_job_then_removed(stack, uid):
    user, key = _tenant(uid, "replay")
    admin = _admin(stack, key)
    receiver = WebhookReceiver()
    try:
        c = wiring.container()
        added = c.webhook_registration.add(user, {"url": receiver.url, "eventTypes": ["sent"]})
        receiver.secret = added["secret"]
        assert c.webhook_endpoints.disable(user, added["id"], f"HTTP 503 {HOSTILE}", 1_764_460_800.0)
        ids = _park_many(user, added["id"], 30)
        page = admin.ask("GET", "/console/webhooks")[2]
        shown = html.unescape(page)
        assert "disabled" in page and "It holds 30 requests" in shown and HOSTILE in shown and "<img" not in page
        assert '<time datetime="2025-11-30T00:00:00.000Z">2025-11-30 00:00 UTC</time>' in page  # when it stopped

        status, headers, _ = admin.ask("POST", f"/console/webhooks/{added['id']}/replay", {"csrf": _csrf(page)})
        assert status == 303
        page = html.unescape(admin.ask("GET", headers["location"])[2])
        assert "Enabled again. Its 30 held requests go out again" in page
        assert eventually(lambda: len(receiver.accepted) == 30, 120) and sorted(receiver.accepted) == ids
        listed = lambda: admin.ask("GET", "/console/webhooks?part=list")[2]  # noqa: E731 (what the script asks)
        assert eventually(lambda: "<strong>done</strong>, 30 done" in listed())

        page = admin.ask("GET", "/console/webhooks")[2]
        status, headers, _ = admin.ask("POST", f"/console/webhooks/{added['id']}/remove", {"csrf": _csrf(page)})
        assert status == 303 and "Removed: no more requests go to it" in admin.ask("GET", headers["location"])[2]
        assert c.webhook_registration.list(user)["endpoints"] == []
        status, _headers, page = admin.ask("POST", f"/console/webhooks/{added['id']}/remove", {"csrf": _csrf(page)})
        assert status == 404 and "no such webhook endpoint" in page
    finally:
        receiver.close()


def test_a_viewer_reads_the_endpoints_and_every_change_is_refused_by_the_server(stack, uid):
    user, _key = _tenant(uid, "viewer")
    c = wiring.container()
    added = c.webhook_registration.add(user, {"url": "http://127.0.0.1:9/moonsend"})
    viewer = _person(stack, user, f"vic-{uid}@example.org", Role.VIEWER)
    page = viewer.ask("GET", "/console/webhooks")[2]
    assert "http://127.0.0.1:9/moonsend" in page and "/test" not in page and "Add an endpoint" not in page
    token = _csrf(page)
    for verb in ("test", "replay", "remove"):
        status, _headers, refused = viewer.ask("POST", f"/console/webhooks/{added['id']}/{verb}", {"csrf": token})
        assert status == 403 and "you are signed in as a viewer" in html.unescape(refused), verb
    status, _page = _add(viewer, "http://127.0.0.1:9/other", ("sent",))
    assert status == 403 and len(c.webhook_registration.list(user)["endpoints"]) == 1


def test_a_form_from_elsewhere_or_without_the_token_changes_nothing(stack, uid):
    user, key = _tenant(uid, "csrf")
    c = wiring.container()
    added = c.webhook_registration.add(user, {"url": "http://127.0.0.1:9/moonsend"})
    admin = _admin(stack, key)
    token = _csrf(admin.ask("GET", "/console/webhooks")[2])
    path = f"/console/webhooks/{added['id']}/remove"
    assert admin.ask("POST", path, {"csrf": "forged"})[0] == 403
    assert admin.ask("POST", path, {"csrf": token}, {"Origin": "https://evil.example"})[0] == 403
    assert len(c.webhook_registration.list(user)["endpoints"]) == 1
