"""webhook_events: a batch of the ledger's changes made into deliveries for the endpoints that want them.

For each tenant with events in the batch, its endpoints are read once; each endpoint gets its subscribed
events, in the order the stream gave them, in requests of its size. A delivery for an enabled endpoint
goes on the delivery queue; one for a disabled endpoint is parked for replay at once (no request is made
to an endpoint that was disabled).

A record that is not of the ledger's shape is logged and skipped: one strange record must not stop the
stream behind it. A queue or table that fails raises, and Lambda gives the batch again (the same events
make deliveries with the same ids).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core import log
from chalicelib.stores.webhooks import ParkedDeliveries, WebhookEndpoints
from chalicelib.webhooks.deliveries import Delivery, deliveries
from chalicelib.webhooks.delivery_queue import DeliveryQueue
from chalicelib.webhooks.events import WebhookEvent, ledger_events


@dataclass(frozen=True)
class FanoutResult:
    events: int  # events the records made
    queued: int  # deliveries put on the queue
    parked: int  # deliveries for disabled endpoints, parked
    skipped: int  # records not of the ledger's shape


class WebhookFanout:
    def __init__(
        self,
        endpoints: WebhookEndpoints,
        queue: DeliveryQueue,
        parked: ParkedDeliveries,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._endpoints = endpoints
        self._queue = queue
        self._parked = parked
        self._clock = clock

    def handle(self, records: list[dict[str, Any]]) -> FanoutResult:
        by_user, skipped = self._events(records)
        now = self._clock()
        to_queue: list[Delivery] = []
        to_park: list[Delivery] = []
        for user_id, events in by_user.items():
            for endpoint in self._endpoints.list(user_id):
                made = list(deliveries(endpoint, events, int(now * 1000)))
                (to_queue if endpoint.enabled else to_park).extend(made)
        self._queue.put(to_queue)
        for d in to_park:
            self._parked.park(d.user_id, d.endpoint_id, d.webhook_id, d.to_message(), now)
        result = FanoutResult(sum(len(e) for e in by_user.values()), len(to_queue), len(to_park), skipped)
        if to_queue or to_park or skipped:
            log.info("webhook deliveries made", **vars(result))
        return result

    def _events(self, records: list[dict[str, Any]]) -> tuple[dict[str, list[WebhookEvent]], int]:
        by_user: dict[str, list[WebhookEvent]] = defaultdict(list)
        skipped = 0
        for record in records:
            try:
                events = ledger_events(record)
            except Exception as exc:  # any record we cannot read is skipped, never the stream
                skipped += 1
                log.warning("ledger record skipped", error=type(exc).__name__, event=str(record.get("eventID")))
                continue
            for event in events:
                by_user[event.user_id].append(event)
        return by_user, skipped
