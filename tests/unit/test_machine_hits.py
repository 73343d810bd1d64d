"""People's opens and clicks, not machines' (chalicelib.ingest.machines): each kind of evidence drives its own
test, through the classifier and through the tracking routes' recording, and a machine's is marked in webhooks.

The User-Agents are the ones their makers and the peers who filter them document: Apple Mail Privacy
Protection's bare `Mozilla/5.0` (ua-parser/uap-core#509; Mailgun's bot-detection example), Gmail's image
proxy and its prefetch (SparkPost's "Gmail prefetching images"), Yahoo's proxy, a headless Chrome of a
scanner (gophish#2446).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer

from chalicelib.ingest.machines import (
    ANOTHER_LINK_S,
    CLICK_SOON_S,
    OPEN_SOON_S,
    Hit,
    machine_evidence,
)
from chalicelib.ingest.tracking import Tracking
from chalicelib.stores.ports.ledger import HitContext
from chalicelib.stores.recorder import Recorder
from chalicelib.webhooks.events import ledger_events
from tests.fakes.ledger import FakeLedger
from tests.fakes.parts import links
from tests.fakes.stats import FakeStats

CHROME = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
IPHONE_MAIL = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile"
GMAIL_PROXY = "Mozilla/5.0 (Windows NT 5.1; rv:11.0) Gecko Firefox/11.0 (via ggpht.com GoogleImageProxy)"
YAHOO_PROXY = "YahooMailProxy; https://help.yahoo.com/kb/yahoo-mail-proxy-SLN28749.html"
GMAIL_PREFETCH = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/42.0.2311.135 Safari/537.36 Edge/12.246 Mozilla/5.0"
)
SENT_AT = 1_790_000_000_000  # 2026-09-21, before any test runs
LONG_AFTER = SENT_AT + 3_600_000  # an hour after the send


def hit(agent: str | None = CHROME, *, at: int = LONG_AFTER, method: str = "GET", link: str | None = None, **more):
    headers = {k.replace("_", "-"): v for k, v in more.items()}
    if agent is not None:
        headers["user-agent"] = agent
    return Hit(method, headers, at, link)


SENT = HitContext(sent_at=SENT_AT)


# --- the request's own evidence -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_hit", "said"),
    [
        (hit(method="HEAD", link="https://shop.example/a"), "a HEAD request"),
        (hit(sec_purpose="prefetch;prerender"), "a prefetch (sec-purpose"),
        (hit(purpose="prefetch"), "a prefetch (purpose"),
        (hit(None), "no User-Agent"),
        (hit("   "), "no User-Agent"),
        (hit("Mozilla/5.0"), "Apple Mail Privacy Protection"),
        (hit(GMAIL_PREFETCH), "Gmail's prefetch"),
        (
            hit("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 HeadlessChrome/96.0.4664.45"),
            "a machine's User-Agent",
        ),
        (hit("python-requests/2.31.0"), "a machine's User-Agent"),
        (hit("Barracuda Sentinel (EE)"), "a machine's User-Agent"),
        (hit("Mozilla/5.0 (compatible; bingbot/2.0)"), "a machine's User-Agent"),
    ],
)
def test_a_request_a_person_would_not_make_is_a_machines_whenever_it_comes(request_hit, said):
    evidence = machine_evidence(request_hit, SENT)
    assert evidence is not None and evidence.startswith(said), evidence
    assert machine_evidence(request_hit, None) == evidence  # the request alone says it


CUBOT_PHONE = "Mozilla/5.0 (Linux; Android 10; CUBOT_X30) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile"
ANDROID_APP = "okhttp/4.12.0"  # Android's stock HTTP library: a mail app may fetch a person's images with it


@pytest.mark.parametrize("agent", [CHROME, IPHONE_MAIL, GMAIL_PROXY, YAHOO_PROXY, CUBOT_PHONE, ANDROID_APP])
def test_browsers_mail_clients_and_the_proxies_that_fetch_on_opening_are_people(agent):
    """Gmail's and Yahoo's proxies fetch images when the reader opens the email: a person's open. "bot" inside a
    word (a CUBOT phone) is no bot."""
    assert machine_evidence(hit(agent), SENT) is None
    assert machine_evidence(hit(agent, link="https://shop.example/a"), SENT) is None


def test_what_a_request_sent_is_shown_short_and_in_ascii_whatever_it_was():
    """An event's evidence stays within the event log's size bound (MAX_EVENT_BYTES) whatever the request sent."""
    evidence = machine_evidence(hit("\U0001f600" * 500 + " Googlebot/2.1"), None)
    assert evidence is not None and evidence.isascii() and len(evidence) < 130


# --- its time, against the send and the delivery ------------------------------------------------------------


def test_an_open_sooner_after_the_send_than_a_person_reads_is_a_machines():
    soon = SENT_AT + int(OPEN_SOON_S * 1000) - 1
    assert (
        machine_evidence(hit(at=soon), SENT)
        == f"{OPEN_SOON_S - 0.001:.1f} s after it was sent: sooner than a person reads"
    )
    assert machine_evidence(hit(at=SENT_AT + int(OPEN_SOON_S * 1000)), SENT) is None


def test_a_click_has_a_wider_window_than_an_open():
    """A scanner's click can come tens of seconds after the send is recorded; an open that late is a person's."""
    at = SENT_AT + int(OPEN_SOON_S * 1000) + 5000
    assert machine_evidence(hit(at=at), SENT) is None
    assert machine_evidence(hit(at=at, link="https://shop.example/a"), SENT) is not None
    late = SENT_AT + int(CLICK_SOON_S * 1000)
    assert machine_evidence(hit(at=late, link="https://shop.example/a"), SENT) is None


def test_a_hit_soon_after_the_delivery_ses_reported_is_a_machines_however_long_ago_the_send():
    delivered = SENT_AT + 600_000  # delivered ten minutes after the send (a greylisting server)
    context = HitContext(sent_at=SENT_AT, delivered_at=delivered)
    assert "after it was delivered" in (machine_evidence(hit(at=delivered + 2000), context) or "")
    assert machine_evidence(hit(at=delivered + 60_000), context) is None


def test_without_a_recorded_send_only_the_request_speaks():
    assert machine_evidence(hit(at=SENT_AT + 1), HitContext()) is None


# --- every link at once ----------------------------------------------------------------------------------


def test_another_link_of_the_same_email_within_seconds_of_the_first_click_is_a_machines():
    first = LONG_AFTER
    context = HitContext(sent_at=SENT_AT, first_click_at=first, first_click="https://shop.example/a")
    soon = first + int(ANOTHER_LINK_S * 1000) - 1
    assert "another link" in (machine_evidence(hit(at=soon, link="https://shop.example/b"), context) or "")
    # The same link again (a double click), or another link later (a person reading on): a person's.
    assert machine_evidence(hit(at=soon, link="https://shop.example/a"), context) is None
    later = first + int(ANOTHER_LINK_S * 1000)
    assert machine_evidence(hit(at=later, link="https://shop.example/b"), context) is None


def test_a_link_kept_shortened_by_the_ledger_is_still_the_same_link():
    long_link = "https://shop.example/" + "a" * 1500
    context = HitContext(sent_at=SENT_AT, first_click_at=LONG_AFTER, first_click=long_link[:1000])
    assert machine_evidence(hit(at=LONG_AFTER + 500, link=long_link), context) is None  # a double click


# --- recorded apart, through the tracking routes ----------------------------------------------------------


def _token(url: str) -> str:
    return url.rsplit("/", 1)[1]


@pytest.fixture
def tracked() -> tuple[Tracking, FakeLedger, FakeStats]:
    ledger, stats = FakeLedger(), FakeStats()
    ledger.record_queued("acme", "c1", ["ann@example.org"])
    ledger.rows[("acme#c1", "ann@example.org")].update(state="sent", sent_at=SENT_AT)
    return Tracking(links(), Recorder(ledger, stats), ledger), ledger, stats


def test_apples_proxy_then_the_person_each_counted_once_and_apart(tracked):
    tracking, ledger, stats = tracked
    token = _token(links().open_url("acme", "c1", "ann@example.org"))
    assert tracking.opened(token, hit("Mozilla/5.0", at=SENT_AT + 120_000))  # MPP fetches as the mail arrives
    assert tracking.opened(token, hit("Mozilla/5.0", at=SENT_AT + 130_000))  # and again: counted once
    assert (stats.total("machine_opened"), stats.total("opened")) == (1, 0)
    row = ledger.rows[("acme#c1", "ann@example.org")]
    assert row["machine_evidence"].startswith("Apple Mail Privacy Protection")
    assert tracking.opened(token, hit(IPHONE_MAIL, at=LONG_AFTER))  # the person, later, with images shown
    assert (stats.total("machine_opened"), stats.total("opened")) == (1, 1)


def test_a_scanner_following_every_link_is_counted_apart_and_still_redirected(tracked):
    tracking, _ledger, stats = tracked
    urls = ["https://shop.example/a", "https://shop.example/b", "https://shop.example/c"]
    tokens = [_token(links().click_url("acme", "c1", "ann@example.org", u)) for u in urls]
    # An hour after the send, with a browser's User-Agent: only its speed over every link gives it away. The
    # ledger keeps the first click's time as it records it (now), so the hits are timed now too.
    at = int(time.time() * 1000)
    first = tracking.clicked(tokens[0], hit(CHROME, at=at))  # as the route builds it: no link
    rest = [tracking.clicked(t, hit(CHROME, at=at + 300 * (i + 1))) for i, t in enumerate(tokens[1:])]
    assert [r.location for r in (first, *rest)] == urls  # every redirect answered
    # Its first link looked like a person's (documented: only the links after it are marked).
    assert (stats.total("clicked"), stats.total("machine_clicked")) == (1, 1)


def test_a_click_is_judged_as_a_click_of_its_own_link_though_the_route_cannot_say_which(tracked):
    """The route builds its hit from the request alone (no link): Tracking adds the token's link, so a click is
    timed by the click's window and a second link is seen as another."""
    tracking, ledger, stats = tracked
    now = int(time.time() * 1000)
    ledger.rows[("acme#c1", "ann@example.org")]["sent_at"] = now - 20_000  # 20 s ago: an open's window is past
    url = "https://shop.example/a"
    tracking.clicked(_token(links().click_url("acme", "c1", "ann@example.org", url)), hit(CHROME, at=now))
    assert (stats.total("clicked"), stats.total("machine_clicked")) == (0, 1)  # a click's window is not
    row = ledger.rows[("acme#c1", "ann@example.org")]
    assert row["first_click"] == url and row["machine_evidence"].startswith("20.0 s after it was sent")


def test_a_head_request_is_answered_and_counted_as_a_machines_click(tracked):
    tracking, _ledger, stats = tracked
    url = "https://shop.example/a"
    r = tracking.clicked(_token(links().click_url("acme", "c1", "ann@example.org", url)), hit(method="HEAD", link=url))
    assert (r.status, r.location) == (302, url)
    assert (stats.total("clicked"), stats.total("machine_clicked")) == (0, 1)


def test_when_the_context_cannot_be_read_the_request_still_decides(tracked):
    tracking, ledger, stats = tracked

    def unreadable(*_a: Any) -> HitContext:
        raise RuntimeError("throttled")

    ledger.hit_context = unreadable  # type: ignore[method-assign]
    token = _token(links().open_url("acme", "c1", "ann@example.org"))
    tracking.opened(token, hit("Mozilla/5.0"))
    tracking.opened(token, hit(CHROME, at=SENT_AT + 1000))  # too soon, but nobody can tell now: a person's
    assert (stats.total("machine_opened"), stats.total("opened")) == (1, 1)


# --- marked in webhooks ------------------------------------------------------------------------------------

_ser = TypeSerializer().serialize


def _stream(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return {
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"pk": _ser(new["pk"]), "rcpt": _ser(new["rcpt"])},
            "OldImage": {k: _ser(v) for k, v in old.items()},
            "NewImage": {k: _ser(v) for k, v in new.items()},
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
    }


def test_a_machines_open_is_an_opened_event_marked_with_its_evidence_and_a_persons_is_marked_too():
    sent = {"pk": "acme#c1", "rcpt": "ann@example.org", "email": "ann@example.org", "state": "sent", "message_id": "m"}
    by_machine = {
        **sent,
        "machine_opened_at": SENT_AT + 5000,
        "machine_evidence": "Apple Mail Privacy Protection's proxy",
        "feedback": "machine_opened: pixel",
    }
    (machine,) = ledger_events(_stream(sent, by_machine))
    assert machine.type == "opened" and machine.data["type"] == "opened"
    assert machine.data["machine"] is True and machine.data["evidence"] == "Apple Mail Privacy Protection's proxy"
    by_person = {**by_machine, "opened_at": LONG_AFTER, "feedback": "opened: pixel"}
    (person,) = ledger_events(_stream(by_machine, by_person))
    assert (person.type, person.data["machine"], "evidence" in person.data) == ("opened", False, False)
    assert person.id != machine.id
    (bounce,) = ledger_events(_stream(by_person, {**by_person, "bounced_at": LONG_AFTER, "feedback": "bounced: x"}))
    assert "machine" not in bounce.data  # only opens and clicks say whose they are
