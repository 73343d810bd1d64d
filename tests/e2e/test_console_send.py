"""Sending from the console over HTTP on the local stack: the send page (its policy lets its script reach
S3), an upload made and read, the compose form's preview, test and review, and the send landing on the
campaign's page, which follows the campaign while its recipients are published; a viewer is refused every
change; a test goes only to the person signed in."""

from __future__ import annotations

import html
import json
import re
import uuid

import pytest
import requests

from chalicelib import wiring
from chalicelib.api.principal import Role
from chalicelib.core.contract import Sender
from tests.conftest import eventually, read_sends
from tests.e2e.console_forms import csrf, person

pytestmark = pytest.mark.e2e


def _tenant(stack, uid: str) -> str:
    c = wiring.container()
    user, key = f"csend-{uid}", f"AKIAS{uid}".upper()
    stack.ses.configure(key, max_send_rate=200)
    address = f"news@{uid}.example"
    stack.client("sesv2", access_key=key, secret_key=f"s-{uid}").create_email_identity(EmailIdentity=address)
    c.tenants.accept(user, "paid", Sender(address, "News", "us-east-1", key, f"s-{uid}", 200.0), c.ses.account_of)
    return user


def _uploaded(stack, browser, page: str, content: bytes) -> str:
    status, headers, made = browser.ask(
        "POST", "/console/uploads", {"csrf": csrf(page), "filename": "people.csv", "format": "csv"}
    )
    assert status == 201 and headers["content-type"].startswith("application/json"), made
    made = json.loads(made)
    form = made["form"]
    assert requests.post(form["url"], data=form["fields"], files={"file": ("p.csv", content)}, timeout=30).ok
    status, headers, _ = browser.ask("POST", f"{made['page']}/read", {"csrf": csrf(page)})
    assert status == 303 and headers["location"].endswith(made["page"])
    assert eventually(lambda: "Refused rows" in browser.ask("GET", made["page"])[2], timeout=60)
    return made["page"]


def test_a_sender_uploads_writes_with_a_preview_tests_reviews_and_sends_from_the_console(stack, uid):
    user = _tenant(stack, uid)
    me = f"me@{uid}.example"
    browser = person(stack, user, me, Role.SENDER)
    status, headers, send_page = browser.ask("GET", "/console/send")
    assert status == 200 and "Upload recipients" in send_page
    origin = re.match(r"https?://[^/]+", stack.endpoint).group(0)
    assert f"connect-src 'self' {origin}" in headers["content-security-policy"]
    rows = "".join(f"r{i}@example.org,<i>N{i}</i>\r\n" for i in range(30))
    here = _uploaded(stack, browser, send_page, f"email,name\r\n{rows}nope,x\r\n".encode())
    page = browser.ask("GET", here)[2]
    assert "<dd>30</dd>" in page and "line 32: email: not an email address" in page
    composed = {
        "csrf": csrf(page),
        "request": re.search(r'name="request" value="([^"]+)"', page).group(1),
        "subject": "Hi {{ name }}",
        "body": "<p>Dear {{ name }}</p>",
        "from": f"news@{uid}.example",
        "at": "",
        "tz": "0",
        "row": "2",
    }
    status, _, shown = browser.ask("POST", f"{here}/compose", {**composed, "do": "preview"})
    assert status == 200 and "Hi <i>N1</i>" in html.unescape(shown.split("Subject: </span>")[1][:80])
    srcdoc = re.search(r'<iframe [^>]*sandbox srcdoc="([^"]*)"', shown).group(1)
    assert html.unescape(srcdoc) == "<p>Dear &lt;i&gt;N1&lt;/i&gt;</p>"  # the recipient's text escaped, as sent
    status, _, tested = browser.ask("POST", f"{here}/compose", {**composed, "do": "test"})
    assert status == 200 and f"A test is on its way to {me} (test-" in tested
    test_id = re.search(r"\((test-[^)]+)\)", tested).group(1)
    assert eventually(lambda: [s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user] == [me])
    status, _, review = browser.ask("POST", f"{here}/compose", {**composed, "do": "review"})
    assert status == 200 and "Send to 30 recipients" in review
    status, headers, _ = browser.ask("POST", f"{here}/send", composed)
    assert status == 303 and "/console/campaigns/c" in headers["location"]
    again = browser.ask("POST", f"{here}/send", composed)  # a second click, a reload: the same campaign
    assert again[0] == 303 and again[1]["location"] == headers["location"]
    campaign = headers["location"].rsplit("/", 1)[1]
    watching = browser.ask("GET", f"/console/campaigns/{campaign}")[2]
    assert "data-refresh" in watching  # the page follows it
    state_done = 'class="state state-done"'
    assert eventually(lambda: state_done in browser.ask("GET", f"/console/campaigns/{campaign}")[2], timeout=90)
    assert eventually(lambda: len([s for s in read_sends(stack.config.outbox) if s["userId"] == user]) == 31)
    sent = [s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user]
    assert sorted(sent) == sorted([me, *(f"r{i}@example.org" for i in range(30))])
    stats = wiring.container().stats  # the drainers' counters are flushed a second or so after their sends
    assert eventually(lambda: (stats.get(user, campaign) or {"sent": 0})["sent"] == 30)  # without the test
    assert eventually(lambda: (stats.get(user, test_id) or {"sent": 0})["sent"] == 1)  # a campaign of its own


def test_a_viewer_sees_the_uploads_and_is_refused_every_change(stack, uid):
    user = _tenant(stack, uid)
    viewer = person(stack, user, f"v@{uid}.example", Role.VIEWER)
    page = viewer.ask("GET", "/console/send")[2]
    assert "Only a tenant's senders and admins upload" in page
    status, _, answer = viewer.ask("POST", "/console/uploads", {"csrf": csrf(page), "filename": "x.csv"})
    assert status == 403 and "signed in as a viewer" in answer
    forged = viewer.ask("POST", "/console/uploads", {"csrf": "forged", "filename": "x.csv"})
    assert forged[0] == 403


def test_a_test_needs_a_person_signed_in_and_goes_to_no_other_address(stack, uid):
    user = _tenant(stack, uid)
    sends = wiring.container().campaign_sends
    given = {"subject": "Hi", "body": "<p>Hi</p>", "to": "stranger@example.org"}
    with pytest.raises(Exception, match="one of the tenant's people"):
        sends.test(user, given, str(uuid.uuid4()))
