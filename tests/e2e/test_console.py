"""The console over HTTP on the local stack, as a browser meets it: `/` leads to it, signing in with the
tenant's API key makes a session cookie (HttpOnly, SameSite=Strict, scoped to the console, Secure over
HTTPS), the campaigns page shows the tenant's own campaigns with their text as text, under a strict
Content-Security-Policy; a forged or ended session, a form from another site and a sign-out without its
CSRF token are refused."""

from __future__ import annotations

import http.client
import re
import time
import urllib.parse
from html.parser import HTMLParser
from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.core.contract import Sender
from chalicelib.stores.campaign_sender import SenderSnapshot

pytestmark = pytest.mark.e2e

HOSTILE = '<img src=x onerror=alert(1)><script>alert("subject")</script>'
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class Parsed(HTMLParser):
    """A page as a browser's parser reads it (the standard library's, not the template engine's): the tags it
    makes, and the text of each campaign's subject."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.subjects: list[str] = []
        self._in_subject = False
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "h2" and ("class", "subject") in attrs:
            self._in_subject, self.subjects = True, [*self.subjects, ""]

    def handle_endtag(self, tag: str) -> None:
        self._in_subject = self._in_subject and tag != "h2"

    def handle_data(self, data: str) -> None:
        if self._in_subject:
            self.subjects[-1] += data


class Browser:
    """Requests as a browser sends them: its cookie jar of one cookie, Origin on its forms."""

    def __init__(self, api_url: str) -> None:
        parsed = urllib.parse.urlsplit(api_url)
        self.host, self.port, self.origin = parsed.hostname or "", parsed.port or 80, api_url.rstrip("/")
        self.cookie: str | None = None

    def ask(self, method: str, path: str, form: dict[str, str] | None = None, headers: dict[str, str] | None = None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        sent = dict(headers or {})
        if self.cookie:
            sent["Cookie"] = f"moonsend_session={self.cookie}"
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form).encode()
            sent = {**FORM, "Origin": self.origin, **sent}
        try:
            conn.request(method, path, body=body, headers=sent)
            r = conn.getresponse()
            answer = r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8")
        finally:
            conn.close()
        found = re.match(r"moonsend_session=([^;]*)", answer[1].get("set-cookie", ""))
        if found is not None:
            self.cookie = found.group(1) or None
        return answer


@pytest.fixture(scope="module")
def tenants(stack: Any) -> dict[str, Any]:
    c = wiring.container()
    uid = f"{time.time_ns() % 10**9:09d}"
    made: dict[str, Any] = {}
    for name in ("a", "b"):
        user = f"console-{name}-{uid}"
        c.tenants.accept(user, "free", Sender(f"news@{user}.example", "News", None, None, None, 1.0), c.ses.account_of)
        snapshot = SenderSnapshot("paid", f"news@{user}.example", "News", "us-east-1", 10.0, 1, "123456789012")
        for campaign, subject in ((f"{name}-plain", f"Spring news of {name}"), (f"{name}-evil", HOSTILE)):
            c.campaign_senders.fix(user, campaign, snapshot, subject)
            c.stats.add_counts(user, campaign, {"queued": 40, "sent": 10})
        made[name] = {"user": user, "key": c.reports.issue_key(user)}
    return made


def signed_in(stack: Any, key: str) -> Browser:
    browser = Browser(stack.api_url)
    status, headers, _ = browser.ask("POST", "/console/sign-in", {"key": key})
    assert (status, headers["location"]) == (303, "/console") and browser.cookie
    return browser


def test_the_stage_root_leads_to_the_console_and_the_console_to_its_sign_in(stack):
    browser = Browser(stack.api_url)
    assert browser.ask("GET", "/")[:2] == (303, {**browser.ask("GET", "/")[1], "location": "/console"})
    status, headers, _ = browser.ask("GET", "/console")
    assert (status, headers["location"]) == (303, "/console/sign-in")
    status, headers, page = browser.ask("GET", "/console/sign-in")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in headers["content-security-policy"] and "script" not in page.lower()
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert (headers["x-content-type-options"], headers["cache-control"]) == ("nosniff", "no-store")
    status, headers, css = browser.ask("GET", "/console/static/console.css")
    assert status == 200 and headers["content-type"].startswith("text/css") and "prefers-color-scheme" in css


def test_a_key_signs_in_with_a_cookie_the_page_cannot_read_nor_another_site_send(stack, tenants):
    browser = Browser(stack.api_url)
    status, headers, _ = browser.ask("POST", "/console/sign-in", {"key": tenants["a"]["key"]})
    cookie = headers["set-cookie"]
    assert status == 303 and "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    assert "Secure" not in cookie  # plain HTTP on loopback; over HTTPS:
    https = Browser(stack.api_url)
    over_https = {"X-Forwarded-Proto": "https", "Origin": f"https://{https.host}:{https.port}"}
    _status, headers, _ = https.ask("POST", "/console/sign-in", {"key": tenants["a"]["key"]}, over_https)
    assert "; Secure" in headers["set-cookie"]


def test_a_wrong_key_or_a_form_from_another_site_signs_nobody_in(stack, tenants):
    browser = Browser(stack.api_url)
    status, headers, page = browser.ask("POST", "/console/sign-in", {"key": "msk_not-a-key"})
    assert status == 401 and "set-cookie" not in headers and "does not sign in" in page
    status, headers, _ = browser.ask(
        "POST", "/console/sign-in", {"key": tenants["a"]["key"]}, {"Origin": "https://evil.example"}
    )
    assert status == 403 and "set-cookie" not in headers


def test_the_campaigns_page_shows_the_tenants_own_campaigns_their_subjects_as_text(stack, tenants):
    browser = signed_in(stack, tenants["a"]["key"])
    status, headers, page = browser.ask("GET", "/console")
    assert status == 200 and "script-src" not in headers["content-security-policy"]
    assert "Spring news of a" in page and "a-evil" in page
    parsed = Parsed(page)
    assert HOSTILE in parsed.subjects  # shown as the text it is
    assert not parsed.tags & {"img", "script"}  # never made markup
    assert "b-plain" not in page and tenants["b"]["user"] not in page  # another tenant's: never
    assert tenants["a"]["user"] in page and 'aria-label="Sent of a-plain"' in page
    status, _headers, page = browser.ask("GET", "/console?state=done")
    assert status == 200 and "No campaign is done" in page
    status, _headers, page = browser.ask("GET", "/console?state=nonsense")
    assert status == 400 and "state" in page


def test_a_forged_cookie_finds_no_session_and_sign_out_needs_its_form_token(stack, tenants):
    browser = signed_in(stack, tenants["a"]["key"])
    real = browser.cookie
    browser.cookie = real[:-2] + ("AA" if not real.endswith("AA") else "BB")
    assert browser.ask("GET", "/console")[:2][0] == 303
    browser.cookie = real
    status, _headers, page = browser.ask("POST", "/console/sign-out", {"csrf": "not-the-token"})
    assert status == 403 and browser.ask("GET", "/console")[0] == 200  # still signed in
    _status, _headers, page = browser.ask("GET", "/console")
    token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    status, headers, _ = browser.ask("POST", "/console/sign-out", {"csrf": token})
    assert (status, headers["location"]) == (303, "/console/sign-in") and "Max-Age=0" in headers["set-cookie"]
    browser.cookie = real  # the ended session's cookie, kept by someone
    assert browser.ask("GET", "/console")[0] == 303


def test_a_static_name_that_leaves_the_folder_or_is_not_an_asset_is_a_404_page(stack):
    browser = Browser(stack.api_url)
    for name in ("..%2Fpages.py", "pages.py", ".hidden.css", "nope.css", "%2e%2e%2f%2e%2e%2fapp.py"):
        status, headers, _ = browser.ask("GET", f"/console/static/{name}")
        assert (status, headers["content-type"]) == (404, "text/html; charset=utf-8"), name
