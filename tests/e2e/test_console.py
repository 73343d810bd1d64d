"""The console over HTTP on the local stack, as a browser meets it: `/` leads to it, signing in with the
tenant's API key makes a session cookie (HttpOnly, SameSite=Strict, scoped to the console, Secure over
HTTPS), the campaigns page shows the tenant's own campaigns with their text as text, under a strict
Content-Security-Policy; a forged or ended session, a form from another site and a sign-out without its
CSRF token are refused."""

from __future__ import annotations

import gzip
import http.client
import re
import time
import urllib.parse
from html.parser import HTMLParser
from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.api.console_http import MAX_FORM_FIELDS
from chalicelib.api.principal import Role
from chalicelib.console.guard import WINDOW_S, WRONG_KEYS
from chalicelib.core.contract import Sender
from chalicelib.stores.ports.campaigns import SenderSnapshot

pytestmark = pytest.mark.e2e

HOSTILE = '<img src=x onerror=alert(1)><script>alert("subject")</script>'
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class Parsed(HTMLParser):
    """A page as a browser's parser reads it (the standard library's, not the template engine's): the tags it
    makes, and the text of each campaign's subject."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.scripts: list[str | None] = []  # each script element's src (None: inline)
        self.subjects: list[str] = []
        self._in_subject = False
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "script":
            self.scripts.append(dict(attrs).get("src"))
        if tag in ("h1", "h2") and ("class", "subject") in attrs:
            self._in_subject, self.subjects = True, [*self.subjects, ""]

    def handle_endtag(self, tag: str) -> None:
        self._in_subject = self._in_subject and tag not in ("h1", "h2")

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_subject:
            self.subjects[-1] += data


class Browser:
    """Requests as a browser sends them: its cookie jar of one cookie, Origin on its forms."""

    def __init__(self, api_url: str) -> None:
        parsed = urllib.parse.urlsplit(api_url)
        self.host, self.port, self.origin = parsed.hostname or "", parsed.port or 80, api_url.rstrip("/")
        self.cookie: str | None = None

    def ask(
        self,
        method: str,
        path: str,
        form: dict[str, str] | list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ):
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
        made[name] = {"user": user, "key": c.api_keys.replace_all(user)}
    user = made["a"]["user"]
    c.ledger.record_queued(user, "a-plain", [f"r{i:02d}@example.org" for i in range(40)])
    c.ledger.record_rejected(user, "a-plain", [("evil@example.org", HOSTILE)])
    now = time.time()
    c.timeline.add(user, "a-plain", now, {"delivered": 8, "bounced": 1}, {int(now) - 61: 6, int(now): 4})
    return made


def _own_script_only(page: str) -> bool:
    """The page's one script is the stage's own file, named by its content's hash; none is inline."""
    scripts = Parsed(page).scripts
    return (
        len(scripts) == 1 and re.fullmatch(r"/console/static/console\.js\?v=[0-9a-f]{12}", scripts[0] or "") is not None
    )


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
    policy = headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self';" in policy and "unsafe" not in policy
    assert "frame-ancestors 'none'" in policy
    assert _own_script_only(page)
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
    assert status == 200 and "unsafe" not in headers["content-security-policy"]
    assert "Spring news of a" in page and "a-evil" in page
    parsed = Parsed(page)
    assert HOSTILE in parsed.subjects  # shown as the text it is
    assert "img" not in parsed.tags and _own_script_only(page)  # never made markup
    assert "b-plain" not in page and tenants["b"]["user"] not in page  # another tenant's: never
    assert tenants["a"]["user"] in page and 'aria-label="Done of Spring news of a"' in page
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


def _csrf(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def test_a_campaigns_page_shows_progress_rates_chart_and_recipients_their_text_as_text(stack, tenants):
    browser = signed_in(stack, tenants["a"]["key"])
    status, headers, page = browser.ask("GET", "/console/campaigns/a-plain")
    assert status == 200 and headers["cache-control"] == "no-store" and _own_script_only(page)
    assert "Spring news of a" in page and "10 of 41 done" not in page  # progress from the counters: 10 of 40
    assert "10 of 40 done" in page and 'data-refresh="/console/campaigns/a-plain?part=live"' in page
    assert "<svg" in page and 'class="ceiling"' in page and "Busiest second: 10 sent" in page
    assert page.count('<td class="address">') == 41  # the page's 50 hold all 41
    parsed = Parsed(page)
    assert HOSTILE in "".join(parsed.text) and "img" not in parsed.tags and "evil@example.org" in page

    status, _headers, page = browser.ask("GET", "/console/campaigns/a-plain?address=R1")  # a prefix, any case
    found = re.findall(r'<td class="address">([^<]+)</td>', page)
    assert status == 200 and found == [f"r1{i}@example.org" for i in range(10)]
    _status, _headers, page = browser.ask("GET", "/console/campaigns/a-plain?address=r07%40example.org")
    assert re.findall(r'<td class="address">([^<]+)</td>', page) == ["r07@example.org"]
    _status, _headers, page = browser.ask("GET", "/console/campaigns/a-plain?state=failed")
    assert "No recipient matches" in page
    status, _headers, page = browser.ask("GET", "/console/campaigns/a-plain?state=bogus")
    assert status == 400 and "state" in page


def test_another_tenants_campaign_or_none_is_a_404_page_and_no_session_goes_to_sign_in(stack, tenants):
    browser = signed_in(stack, tenants["a"]["key"])
    for path in ("/console/campaigns/b-plain", "/console/campaigns/nope", "/console/campaigns/b-plain/cancel"):
        status, headers, page = browser.ask("GET", path)
        assert (status, headers["content-type"]) == (404, "text/html; charset=utf-8") and "Spring news of b" not in page
    token = _csrf(browser.ask("GET", "/console")[2])
    status, _headers, _page = browser.ask("POST", "/console/campaigns/b-plain/pause", {"csrf": token})
    assert (
        status == 404 and wiring.container().campaign_control.state(tenants["b"]["user"], "b-plain", fresh=True) is None
    )
    nobody = Browser(stack.api_url)
    status, headers, _page = nobody.ask("GET", "/console/campaigns/a-plain")
    assert (status, headers["location"]) == (303, "/console/sign-in")
    status, headers, _page = nobody.ask("POST", "/console/campaigns/a-plain/pause", {"csrf": token})
    assert (status, headers["location"]) == (303, "/console/sign-in")


def test_a_sender_pauses_resumes_and_cancels_after_a_confirmation_each_said_on_the_page(stack, uid):
    c = wiring.container()
    user = f"console-act-{uid}"
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "News", None, None, None, 1.0), c.ses.account_of)
    c.campaign_senders.fix(user, "act", SenderSnapshot("paid", f"n@{user}.x", "N", "us-east-1", 1.0, 1, "1"), "Acts")
    c.stats.add_counts(user, "act", {"queued": 30, "sent": 5})
    browser = signed_in(stack, c.api_keys.replace_all(user))
    page = browser.ask("GET", "/console/campaigns/act")[2]
    assert 'action="/console/campaigns/act/pause"' in page and "/resume" not in page

    status, headers, _ = browser.ask("POST", "/console/campaigns/act/pause", {"csrf": _csrf(page)})
    assert status == 303 and headers["location"].startswith("/console/campaigns/act?done=paused&sig=")
    page = browser.ask("GET", headers["location"])[2]
    assert "Paused: its unsent email is held" in page and c.campaign_control.state(user, "act", fresh=True) == "paused"
    for spoofed in ("done=cancelled", "done=paused&sig=0", f"done=cancelled&{headers['location'].split('&')[1]}"):
        assert "Cancelled:" not in browser.ask("GET", f"/console/campaigns/act?{spoofed}")[2]  # a link cannot say it
        assert "Paused:" not in browser.ask("GET", f"/console/campaigns/act?{spoofed}")[2]
    status, headers, _ = browser.ask("POST", "/console/campaigns/act/resume", {"csrf": _csrf(page)})
    assert status == 303 and c.campaign_control.state(user, "act", fresh=True) is None

    status, _headers, page = browser.ask("GET", "/console/campaigns/act/cancel")
    assert status == 200 and "Its 25 recipients not sent yet will be recorded cancelled" in page
    assert c.campaign_control.state(user, "act", fresh=True) is None  # a confirmation page changes nothing
    status, headers, _ = browser.ask("POST", "/console/campaigns/act/cancel", {"csrf": _csrf(page)})
    assert status == 303 and headers["location"].startswith("/console/campaigns/act?done=cancelled&sig=")
    assert "Cancelled: nothing more goes out" in browser.ask("GET", headers["location"])[2]
    assert c.campaign_control.state(user, "act", fresh=True) == "cancelled"
    status, _headers, page = browser.ask("POST", "/console/campaigns/act/pause", {"csrf": _csrf(page)})
    assert status == 409 and "Not done" in page  # a cancelled campaign stays cancelled, and the page says so
    status, _headers, page = browser.ask("GET", "/console/campaigns/act?part=live")
    assert status == 200 and page.startswith('<div id="live">')  # cancelled: nothing left to refresh
    status, _headers, page = browser.ask("GET", "/console/campaigns/act?part=recipients&state=failed")
    assert status == 200 and page.startswith('<div id="recipient-rows" data-refresh="/console/campaigns/act?')
    assert "state=failed" in page.split(">")[0] and "No recipient matches" in page


def test_a_viewer_reads_a_campaign_but_the_server_refuses_every_action_to_it(stack, tenants):
    c = wiring.container()
    user = tenants["a"]["user"]
    c.people.invite(user, "viewer@example.org", Role.VIEWER, "operator")
    minted, _session = c.sessions.start(user, "viewer@example.org", Role.VIEWER)
    viewer = Browser(stack.api_url)
    viewer.cookie = minted
    status, _headers, page = viewer.ask("GET", "/console/campaigns/a-plain")
    assert status == 200 and "You can read this campaign" in page and "/pause" not in page
    token = _csrf(page)  # the sign-out form's: a viewer's token is valid, its role is not enough
    for action in ("pause", "resume", "cancel", "retry-failed"):
        status, _headers, page = viewer.ask("POST", f"/console/campaigns/a-plain/{action}", {"csrf": token})
        assert status == 403 and "you are signed in as a viewer" in page, action
    assert viewer.ask("GET", "/console/campaigns/a-plain/cancel")[0] == 403
    assert c.campaign_control.state(user, "a-plain", fresh=True) is None


def test_an_action_without_the_sessions_token_or_from_another_site_is_refused(stack, tenants):
    browser = signed_in(stack, tenants["a"]["key"])
    token = _csrf(browser.ask("GET", "/console")[2])
    for form, headers in (({}, {}), ({"csrf": "forged"}, {}), ({"csrf": token}, {"Origin": "https://evil.example"})):
        status, _headers, _page = browser.ask("POST", "/console/campaigns/a-plain/pause", form, headers)
        assert status == 403
    assert wiring.container().campaign_control.state(tenants["a"]["user"], "a-plain", fresh=True) is None


def test_an_asset_named_by_its_hash_is_kept_a_year_and_by_another_name_five_minutes(stack, tenants):
    browser = signed_in(stack, tenants["a"]["key"])
    page = browser.ask("GET", "/console")[2]
    script = Parsed(page).scripts[0]
    status, headers, body = browser.ask("GET", script)
    assert status == 200 and headers["content-type"] == "text/javascript; charset=utf-8" and "localTimes" in body
    assert headers["cache-control"] == "public, max-age=31536000, immutable"
    assert browser.ask("GET", "/console/static/console.js?v=0")[1]["cache-control"] == "public, max-age=300"


def test_a_page_is_gzipped_for_a_browser_that_accepts_it_as_api_gateway_does(stack, tenants):
    browser = signed_in(stack, tenants["a"]["key"])
    conn = http.client.HTTPConnection(browser.host, browser.port, timeout=30)
    try:
        cookie = f"moonsend_session={browser.cookie}"
        conn.request("GET", "/console/campaigns/a-plain", headers={"Cookie": cookie, "Accept-Encoding": "gzip"})
        answer = conn.getresponse()
        body = answer.read()
    finally:
        conn.close()
    assert answer.status == 200 and answer.getheader("Content-Encoding") == "gzip"
    page = gzip.decompress(body).decode("utf-8")
    assert "Spring news of a" in page and len(body) < len(page.encode()) / 3


def test_an_address_that_sent_ten_wrong_keys_is_refused_even_the_right_one_others_are_not(stack, tenants):
    """From 127.0.0.9 (loopback: the local gateway hands the function the client's address, as API Gateway
    does), so that the other tests' address is not held up; it is checked to be open at the end."""

    def sign_in(key: str, source: str) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection(
            "127.0.0.1", Browser(stack.api_url).port, timeout=30, source_address=(source, 0)
        )
        body = urllib.parse.urlencode({"key": key})
        try:
            conn.request("POST", "/console/sign-in", body=body, headers=FORM)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            conn.close()

    for i in range(WRONG_KEYS):
        assert sign_in(f"msk_wrong-{i}", "127.0.0.9")[0] == 401
    status, headers, page = sign_in(tenants["a"]["key"], "127.0.0.9")
    assert status == 429 and 0 < int(headers["retry-after"]) <= WINDOW_S and "set-cookie" not in headers
    assert "Too many wrong keys from your address" in page
    assert sign_in(tenants["a"]["key"], "127.0.0.1")[0] == 303  # another address signs in


def test_hostile_forms_and_queries_are_refused_pages_never_a_500(stack, tenants):
    """The review's cases: a form of more fields than any console form (with and without a session), a
    retry count no int() takes, a parameter no UTF-8 carries."""
    browser = signed_in(stack, tenants["a"]["key"])
    token = _csrf(browser.ask("GET", "/console")[2])
    crowded = {"csrf": token, **{f"x{i}": "1" for i in range(MAX_FORM_FIELDS)}}
    assert browser.ask("POST", "/console/campaigns/a-plain/pause", crowded)[0] == 403
    nobody = Browser(stack.api_url)
    assert nobody.ask("POST", "/console/campaigns/a-plain/retry-failed", crowded)[0] == 303  # to the sign-in
    assert nobody.ask("POST", "/console/sign-in", {"key": "x", **crowded})[0] in (401, 403)
    for query in ("done=retried&n=%C2%B2", "done=retried&n=" + "9" * 5000, "state=%ED%B3%BF", "address=%FF%FE"):
        assert browser.ask("GET", f"/console/campaigns/a-plain?{query}")[0] in (200, 400), query
