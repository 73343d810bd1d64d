"""Events kept later: a tenant's events whose event-log write failed, carried round on the delivery queue.

webhook_events writes each batch's events to the event log (GET /events) before it delivers any. A tenant
whose write fails (its partition throttled past the SDK's retries) used to have its stream records given
again, which held the shard (every tenant behind them waited) and, once the mapping gave up, lost the events
from both the log and the webhooks: only stream pointers reach the on-failure destination. Instead its events
go on the delivery queue as one message (or a few, by size) of this kind; deliver_webhooks keeps them in the
log and makes their deliveries, with the queue's retries (and its dead-letter queue) behind it, while the
stream goes on. The events are the same (same ids, same recorded time): keeping them again writes the same
items, and their deliveries carry the same webhook-ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from chalicelib.webhooks.events import WebhookEvent

KIND = "keepEvents"
# A message's events, in bytes of their JSON: well within SQS's 256 KB with the envelope.
MAX_MESSAGE_BYTES = 200_000


@dataclass(frozen=True)
class LaterEvents:
    user_id: str
    events: tuple[WebhookEvent, ...]

    def to_message(self) -> str:
        events = [{"type": e.type, "data": e.data, "atMs": e.at_ms} for e in self.events]
        return json.dumps({"kind": KIND, "userId": self.user_id, "events": events}, separators=(",", ":"))

    @classmethod
    def from_message(cls, body: str) -> LaterEvents | None:
        """The events of a message of this kind; None for any other message (a delivery)."""
        if f'"kind":"{KIND}"' not in body[:32]:
            return None
        try:
            m = json.loads(body)
            user = m["userId"]
            events = tuple(WebhookEvent(user, str(e["type"]), dict(e["data"]), int(e["atMs"])) for e in m["events"])
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a message of events to keep: {type(exc).__name__}") from None
        if not isinstance(user, str) or not user or any(not isinstance(e.data.get("id"), str) for e in events):
            raise ValueError("not a message of events to keep: no tenant, or an event without its id")
        return cls(user, events)


def later_messages(user_id: str, events: Iterable[WebhookEvent]) -> list[str]:
    """The tenant's events as messages of this kind, each within MAX_MESSAGE_BYTES."""
    out: list[list[WebhookEvent]] = [[]]
    size = 0
    for event in events:
        n = len(json.dumps(event.data, separators=(",", ":"))) + 64
        if out[-1] and size + n > MAX_MESSAGE_BYTES:
            out.append([])
            size = 0
        out[-1].append(event)
        size += n
    return [LaterEvents(user_id, tuple(chunk)).to_message() for chunk in out if chunk]
