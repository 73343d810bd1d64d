"""The tenants' event log in memory: what webhook_events kept, in the order of its keys."""

from __future__ import annotations

from collections.abc import Iterable

from chalicelib.stores.event_log import sort_key
from chalicelib.stores.ports.events import EventPage
from chalicelib.webhooks.events import WebhookEvent


class FakeEventLog:
    def __init__(self, *, broken: bool = False, broken_for: set[str] | None = None) -> None:
        self.kept: dict[tuple[str, str], WebhookEvent] = {}
        self.broken = broken
        self.broken_for = set(broken_for or ())  # tenants whose writes fail (their partition throttled)

    def keep(self, events: Iterable[tuple[WebhookEvent, int]]) -> int:
        events = list(events)
        if self.broken or any(e.user_id in self.broken_for for e, _at in events):
            raise ConnectionError("the event log's table did not answer")
        n = 0
        for event, at_ms in events:
            self.kept[(event.user_id, sort_key(event, at_ms))] = event
            n += 1
        return n

    def page(
        self,
        user_id: str,
        *,
        after: str | None = None,
        type: str | None = None,
        campaign: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> EventPage:
        def past(k: str) -> bool:
            return after is None or (k < after if newest_first else k > after)

        keys = sorted((k for u, k in self.kept if u == user_id and past(k)), reverse=newest_first)
        out = []
        position = after
        for key in keys:
            event = self.kept[(user_id, key)]
            position = key
            if (type is None or event.type == type) and (campaign is None or event.data["campaignId"] == campaign):
                out.append(event.data)
                if len(out) >= limit:
                    return EventPage(out, position)
        return EventPage(out, None if newest_first else position)
