"""The console's events page over HTTP on the local stack: the tenant's own events as `GET /events` answers
them, newest or oldest first, filtered by type and campaign, a page at a time; a recipient's and a reason's text shown
as text; another tenant's events never; a filter it cannot take a 400 page."""

from __future__ import annotations

import html
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from chalicelib import wiring
from tests.e2e.test_console import Browser

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=alert(1)>@example.org"


@dataclass(frozen=True)
class _Event:
    user_id: str
    type: str
    id: str
    data: dict[str, Any] = field(default_factory=dict)


def _keep(user: str, events: list[tuple[str, str, str, dict[str, str]]]) -> None:
    now = int(time.time() * 1000)
    kept = []
    for n, (kind, campaign, who, more) in enumerate(events):
        eid = f"evt_{uuid.uuid4().hex}"
        data = {
            "id": eid,
            "type": kind,
            "campaignId": campaign,
            "recipient": who,
            "timestamp": "2026-11-29T05:00:00.000Z",
        }
        kept.append((_Event(user, kind, eid, {**data, **more}), now - 60_000 + n))
    wiring.container().event_log.keep(kept)


def _signed_in(stack: Any, user: str) -> Browser:
    browser = Browser(stack.api_url)
    assert browser.ask("POST", "/console/sign-in", {"key": wiring.container().api_keys.replace_all(user)})[0] == 303
    return browser


def _tenant(user: str) -> None:
    from chalicelib.core.contract import Sender

    c = wiring.container()
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "News", None, None, None, 1.0), c.ses.account_of)


def test_the_events_page_shows_the_tenants_own_events_as_text_filtered_and_paged(stack, uid):
    mine, other = f"events-{uid}", f"events-o-{uid}"
    _tenant(mine)
    _tenant(other)
    bounce = ("bounced", "autumn", HOSTILE, {"reason": "<script>alert(2)</script> mailbox full"})
    _keep(mine, [("sent", "spring", f"r{i:02d}@example.org", {}) for i in range(55)] + [bounce])  # the newest
    _keep(other, [("sent", "theirs", "secret@other.example", {})])
    browser = _signed_in(stack, mine)
    status, _headers, page = browser.ask("GET", "/console/events")  # newest first
    assert status == 200 and "r54@example.org" in page and "secret@other.example" not in page
    assert "r00@example.org" not in page and page.index("mailbox full") < page.index("r54@example.org")
    assert len(re.findall(r"<tr>", page)) == 51  # the header and a page of 50
    older = re.search(r'href="([^"]*after=[^"]*)">Older events', page)
    assert older is not None
    rest = browser.ask("GET", html.unescape(older.group(1)))[2]
    assert "r00@example.org" in rest and "r54@example.org" not in rest and "Older events" not in rest

    status, _headers, page = browser.ask("GET", "/console/events?order=oldest")
    assert status == 200 and "r00@example.org" in page and "r54@example.org" not in page
    later = re.search(r'href="([^"]*after=[^"]*)">Later events', page)
    assert later is not None
    rest = browser.ask("GET", html.unescape(later.group(1)))[2]
    assert "r54@example.org" in rest and "r00@example.org" not in rest

    status, _headers, page = browser.ask("GET", "/console/events?type=bounced")
    assert status == 200 and "r00@example.org" not in page
    assert HOSTILE in html.unescape(page) and "<img src=x" not in page and "<script>alert(2)" not in page
    assert "mailbox full" in page
    page = browser.ask("GET", "/console/events?campaign=autumn")[2]
    assert "r00@example.org" not in page and "mailbox full" in page

    newest_since = "order=newest&since=2026-11-26T03:00:00Z"
    for bad in (
        "type=nope",
        "campaign=%20%20x%20y",
        "since=yesterday",
        "after=not-a-cursor",
        "order=random",
        newest_since,
    ):
        status, _headers, page = browser.ask("GET", f"/console/events?{bad}")
        assert status == 400, bad
    assert Browser(stack.api_url).ask("GET", "/console/events")[1]["location"] == "/console/sign-in"
