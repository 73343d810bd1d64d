"""Where a page of the event log stops, on the fake and on the DynamoDB store (GET /events' `next`).

A page filtered by type or campaign reads events it does not answer with. Its `next` must be past them: a
poller that asks `type=bounced` every minute would otherwise read the same events again on every poll, and
pay for them, up to the read budget, for as long as no bounce comes; and one with no `after` yet would be
told there is nothing to go on from (`next: null`) and start from the log's beginning each time."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.stores.event_log import EventLog, position_at, sort_key
from chalicelib.webhooks.events import WebhookEvent
from tests.contract.conftest import real_container
from tests.fakes.event_log import FakeEventLog

BASE_MS = 1_790_000_000_000


def _log(side: str, request: pytest.FixtureRequest) -> Any:
    if side == "fake":
        return FakeEventLog()
    log: EventLog = real_container(request).event_log
    return log


def _event(user: str, kind: str, n: int) -> WebhookEvent:
    data = {"id": f"evt_{n:032x}", "type": kind, "timestamp": "x", "campaignId": "c", "recipient": f"r{n}@x.org"}
    return WebhookEvent(user, kind, data, BASE_MS + n)


def test_a_filtered_page_that_finds_nothing_goes_on_from_the_last_event_it_read(
    side: str, request: pytest.FixtureRequest, uid: str
) -> None:
    log, user = _log(side, request), f"u{uid}"
    events = [_event(user, "sent", n) for n in range(12)]
    log.keep((e, e.at_ms) for e in events)
    last = sort_key(events[-1], events[-1].at_ms)

    for start in (None, sort_key(events[2], events[2].at_ms), position_at(BASE_MS)):
        page = log.page(user, type="bounced", after=start, limit=5)
        assert (page.events, page.next) == ([], last), start
        page = log.page(user, campaign="other", after=start, limit=5)
        assert (page.events, page.next) == ([], last), start


def test_a_filtered_page_ends_at_its_last_match_and_the_next_goes_on_past_the_rest(
    side: str, request: pytest.FixtureRequest, uid: str
) -> None:
    log, user = _log(side, request), f"u{uid}"
    kinds = ["sent", "bounced", "sent", "sent", "bounced", "sent", "sent"]
    events = [_event(user, kind, n) for n, kind in enumerate(kinds)]
    log.keep((e, e.at_ms) for e in events)

    first = log.page(user, type="bounced", limit=1)
    assert [e["id"] for e in first.events] == [events[1].id]
    assert first.next == sort_key(events[1], events[1].at_ms)
    second = log.page(user, type="bounced", after=first.next, limit=5)
    assert [e["id"] for e in second.events] == [events[4].id]
    assert second.next == sort_key(events[-1], events[-1].at_ms)


def test_newest_first_pages_back_through_every_shard_in_order_each_event_once_then_stops(
    side: str, request: pytest.FixtureRequest, uid: str
) -> None:
    log, user = _log(side, request), f"n{uid}"
    events = [_event(user, "bounced" if n % 5 == 0 else "sent", n) for n in range(60)]  # ids over every shard
    log.keep((e, e.at_ms) for e in events)
    seen: list[str] = []
    after = None
    for _ in range(20):
        page = log.page(user, after=after, limit=7, newest_first=True)
        seen += [e["id"] for e in page.events]
        if page.next is None:
            break
        after = page.next
    assert seen == [e.data["id"] for e in reversed(events)]  # newest first, each once, none lost
    bounced = log.page(user, type="bounced", limit=100, newest_first=True)
    assert [e["id"] for e in bounced.events] == [e.data["id"] for e in reversed(events) if e.type == "bounced"]
    assert bounced.next is None
    before = log.page(user, after=position_at(BASE_MS + 10), limit=100, newest_first=True)
    assert [e["id"] for e in before.events] == [e.data["id"] for e in reversed(events[:10])]
