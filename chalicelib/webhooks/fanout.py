"""webhook_events: a batch of the ledger's changes made into deliveries for the endpoints that want them.

For each tenant with events in the batch, its endpoints are read once; each endpoint gets its subscribed
events, in the order the stream gave them, in requests of its size. A delivery for an enabled endpoint
goes on the delivery queue; one for a disabled endpoint is held for replay at once (no request is made
to an endpoint that was disabled).

One tenant's trouble must not hold the stream, which carries every tenant's events:
- A record that is not of the ledger's shape is logged and skipped.
- A delivery SQS refuses for what it is (SenderFault: sent again, it is refused again) is held for
  replay, and its records count as done.
- A tenant whose event log cannot be written now has its events put on the delivery queue, to be kept
  and delivered from there (chalicelib.webhooks.later_events): the stream goes on for every tenant, and no
  event is lost if the write keeps failing. Only if that queue refuses them too do its records fail.
- Anything else that may pass on a retry (an endpoint table or the queue that failed, SQS's own fault)
  fails only the records it came from: Lambda is told them (ReportBatchItemFailures) and
  gives the stream again from the first of them (the same events make deliveries with the same event
  ids). A delivery the queue
  did not take is held as well, so that if Lambda gives up on its records (the mapping's retries and
  age limit: infra/cfn.py), which sends its on-failure destination only where they were in the stream,
  its events are still there to replay. A held request whose retry went through is sent again by a
  replay, under its own webhook-id: receivers drop repeats.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core import log
from chalicelib.stores.ports.events import EventRecords
from chalicelib.stores.webhooks import Endpoint, HeldRequests, WebhookEndpoints
from chalicelib.webhooks.deliveries import WebhookRequest, deliveries
from chalicelib.webhooks.delivery_queue import DeliveryQueue
from chalicelib.webhooks.events import WebhookEvent, ledger_events
from chalicelib.webhooks.later_events import LaterEvents, later_messages

Sourced = tuple[int, WebhookEvent]  # an event and the place of its record in the batch
Made = tuple[WebhookRequest, frozenset[int]]  # a delivery and the places of the records its events came from


@dataclass(frozen=True)
class FanoutResult:
    events: int  # events the records made
    queued: int  # deliveries put on the queue
    held: int  # deliveries held: for disabled endpoints, or not taken by the queue
    skipped: int  # records not of the ledger's shape
    failed: tuple[str, ...] = ()  # sequence numbers of the records to be given again


class WebhookFanout:
    def __init__(
        self,
        endpoints: WebhookEndpoints,
        queue: DeliveryQueue,
        held: HeldRequests,
        event_log: EventRecords,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._endpoints = endpoints
        self._event_log = event_log
        self._queue = queue
        self._held = held
        self._clock = clock

    def batch(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Lambda's answer for a batch of the stream (ReportBatchItemFailures): the records to give again."""
        return {"batchItemFailures": [{"itemIdentifier": n} for n in self.handle(records).failed]}

    def handle(self, records: list[dict[str, Any]]) -> FanoutResult:
        by_user, skipped = self._events(records)
        now = self._clock()
        failed: set[int] = set()
        queued, held = self._deliver(self._kept(by_user, failed), now, failed)
        result = FanoutResult(
            sum(len(e) for e in by_user.values()),
            queued,
            held,
            skipped,
            _numbers(records, failed),
        )
        if queued or held or skipped or failed:
            # The log line keeps its field's public name, `parked`, which operators' queries read.
            fields = {("parked" if k == "held" else k): v for k, v in vars(result).items()}
            log.info("webhook deliveries made", **fields)
        return result

    def later(self, later: LaterEvents) -> FanoutResult:
        """Events a batch could not keep (chalicelib.webhooks.later_events): kept now, then delivered. Raises
        when either fails: the message comes back (keeping and delivering again is harmless: the same items,
        the same webhook-ids)."""
        self._event_log.keep((e, e.at_ms) for e in later.events)
        failed: set[int] = set()
        sourced = list(enumerate(later.events))
        queued, held = self._deliver({later.user_id: sourced}, self._clock(), failed)
        if failed:
            raise RuntimeError(f"{len(failed)} of the events kept later not delivered: the message comes back")
        return FanoutResult(len(later.events), queued, held, 0)

    def _deliver(self, logged: dict[str, list[Sourced]], now: float, failed: set[int]) -> tuple[int, int]:
        """Each tenant's events made into deliveries for its endpoints: queued, or held for a disabled one.
        (queued, held); what failed is added to `failed`."""
        to_queue: list[Made] = []
        to_hold: list[Made] = []
        for user_id, events in logged.items():
            try:
                endpoints = self._endpoints.list(user_id)
            except Exception as exc:  # this tenant's records again; the others go on
                log.warning("webhook endpoints not read", user=user_id, error=type(exc).__name__)
                failed.update(i for i, _e in events)
                continue
            for endpoint in endpoints:
                made = _made(endpoint, events, int(now * 1000))
                (to_queue if endpoint.enabled else to_hold).extend(made)
        held = sum(self._hold(d, sources, now, failed) for d, sources in to_hold)
        queued, kept = self._queue_all(to_queue, now, failed)
        return queued, held + kept

    def _kept(self, by_user: dict[str, list[Sourced]], failed: set[int]) -> dict[str, list[Sourced]]:
        """The tenants whose events are in the event log (GET /events), before any is delivered: the batch's in
        one write, or, when that fails, each tenant's in its own, so that a tenant whose log cannot be written
        now (its partition throttled) has its records come again alone, with nothing delivered meanwhile."""
        events = [e for sourced in by_user.values() for _i, e in sourced]
        if not events:
            return by_user
        try:
            self._event_log.keep((e, e.at_ms) for e in events)
            return by_user
        except Exception as exc:
            log.warning("events not kept together: kept tenant by tenant", events=len(events), error=type(exc).__name__)
        kept: dict[str, list[Sourced]] = {}
        for user_id, sourced in by_user.items():
            try:
                self._event_log.keep((e, e.at_ms) for _i, e in sourced)
                kept[user_id] = sourced
            except Exception as exc:
                if self._keep_later(user_id, sourced, exc):
                    continue
                log.warning("events not kept: their records come again", user=user_id, error=type(exc).__name__)
                failed.update(i for i, _e in sourced)
        return kept

    def _keep_later(self, user_id: str, sourced: list[Sourced], why: Exception) -> bool:
        """The tenant's events on the delivery queue, to be kept and delivered from there; False if the queue
        did not take them all (its records then come again)."""
        messages = [(user_id, m) for m in later_messages(user_id, [e for _i, e in sourced])]
        try:
            self._queue.put_messages(messages)
        except Exception as exc:
            log.warning("events not kept later either", user=user_id, error=type(exc).__name__)
            return False
        log.warning(
            "events kept later, through the delivery queue", user=user_id, events=len(sourced), error=type(why).__name__
        )
        return True

    def _queue_all(self, made: list[Made], now: float, failed: set[int]) -> tuple[int, int]:
        """The deliveries on the queue; (how many it took, how many it did not and were held)."""
        unqueued = self._queue.put([d for d, _sources in made])
        kept = 0
        for u in unqueued:
            delivery, sources = made[u.index]
            log.error(
                "webhook delivery not queued",
                user=delivery.user_id,
                endpoint=delivery.endpoint_id,
                webhook=delivery.webhook_id,
                code=u.code,
                permanent=u.permanent,
            )
            held = self._hold(delivery, sources, now, failed)
            kept += held
            if not (u.permanent and held):  # a retry may take it
                failed.update(sources)
        return len(made) - len(unqueued), kept

    def _hold(self, delivery: WebhookRequest, sources: frozenset[int], now: float, failed: set[int]) -> bool:
        """Keep it for replay; if the table fails, its records are given again."""
        d = delivery
        try:
            self._held.hold(d.user_id, d.endpoint_id, d.webhook_id, d.to_message(), now)
            return True
        except Exception as exc:
            log.warning("webhook delivery not parked", user=d.user_id, endpoint=d.endpoint_id, error=type(exc).__name__)
            failed.update(sources)
            return False

    def _events(self, records: list[dict[str, Any]]) -> tuple[dict[str, list[Sourced]], int]:
        by_user: dict[str, list[Sourced]] = defaultdict(list)
        skipped = 0
        for i, record in enumerate(records):
            try:
                events = ledger_events(record)
            except Exception as exc:  # any record we cannot read is skipped, never the stream
                skipped += 1
                log.warning("ledger record skipped", error=type(exc).__name__, event=str(record.get("eventID")))
                continue
            for event in events:
                by_user[event.user_id].append((i, event))
        return by_user, skipped


def _made(endpoint: Endpoint, events: list[Sourced], now_ms: int) -> list[Made]:
    """The endpoint's deliveries, each with the records its events came from (a delivery holds the next
    `events` of those the endpoint wants, in order)."""
    wanted = [(i, e) for i, e in events if endpoint.wants(e.type)]
    out: list[Made] = []
    start = 0
    for delivery in deliveries(endpoint, [e for _i, e in wanted], now_ms):
        out.append((delivery, frozenset(i for i, _e in wanted[start : start + delivery.events])))
        start += delivery.events
    return out


def _numbers(records: list[dict[str, Any]], failed: set[int]) -> tuple[str, ...]:
    return tuple(_sequence_number(records[i]) for i in sorted(failed))


def _sequence_number(record: dict[str, Any]) -> str:
    """The record's identifier for Lambda ("": Lambda then gives the whole batch again)."""
    return str(record.get("dynamodb", {}).get("SequenceNumber") or "")
