"""A delivery: one signed request's worth of events for one endpoint, as it waits on the delivery queue.

Events for an endpoint are put in requests of at most its `maxEventsPerRequest` (and MAX_PAYLOAD_BYTES),
in the order they were recorded. The request's body is made once, here, and stored with the delivery, so
every retry sends the same bytes under the same `webhook-id`:

    {"type": "moonsend.events", "timestamp": "<when made>", "data": {"events": [<event>, ...]}}

The `webhook-id` is a digest of the endpoint and the events' ids, so the same events made into a delivery
twice (the ledger's stream delivers a record again) carry the same id as well.

Events are UTF-8, except the code points SQS refuses in a message (`sqs_safe`): a tenant's text may hold
U+FFFF (a strict template's own words in a rejection reason), which SQS would refuse on the delivery
queue. Those are written as JSON's \\uXXXX, so the body is the same JSON text to any reader.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from chalicelib.core.contract import iso_ms
from chalicelib.core.sqs_text import sqs_safe
from chalicelib.stores.webhooks import Endpoint
from chalicelib.webhooks.events import WebhookEvent

# A request's body at most (UTF-8 bytes): inside its queue message every `"` and `\` of it is escaped,
# which at most doubles it, so a message stays far under SQS's 1 MiB (and ten of them are packed into
# SendMessageBatch requests by their bytes: chalicelib.webhooks.delivery_queue).
MAX_PAYLOAD_BYTES = 96 * 1024


@dataclass(frozen=True)
class WebhookRequest:
    user_id: str
    endpoint_id: str
    webhook_id: str
    payload: str  # the request's body
    events: int

    def to_message(self) -> str:
        return json.dumps(
            {
                "userId": self.user_id,
                "endpointId": self.endpoint_id,
                "webhookId": self.webhook_id,
                "payload": self.payload,
                "events": self.events,
            },
            separators=(",", ":"),
            ensure_ascii=False,  # \uXXXX would triple a non-Latin payload on the queue
        )

    @classmethod
    def from_message(cls, body: str) -> WebhookRequest:
        """The delivery of a queue message; ValueError if it is not one."""
        try:
            m = json.loads(body)
            fields = (m["userId"], m["endpointId"], m["webhookId"], m["payload"])
            events = int(m.get("events", 1))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a webhook delivery: {type(exc).__name__}") from None
        if not all(isinstance(f, str) and f for f in fields):
            raise ValueError("not a webhook delivery: a field is not a string")
        return cls(*fields, events)


def deliveries(endpoint: Endpoint, events: Iterable[WebhookEvent], now_ms: int) -> Iterator[WebhookRequest]:
    """The endpoint's requests for the events it subscribed to, in order."""
    batch: list[tuple[str, str]] = []  # each event's id and JSON
    size = 0
    for event in events:
        if not endpoint.wants(event.type):
            continue
        text = sqs_safe(json.dumps(event.data, separators=(",", ":"), ensure_ascii=False))
        n = len(text.encode("utf-8")) + 1
        if batch and (len(batch) >= endpoint.max_events or size + n > MAX_PAYLOAD_BYTES):
            yield _delivery(endpoint, batch, now_ms)
            batch, size = [], 0
        batch.append((event.id, text))
        size += n
    if batch:
        yield _delivery(endpoint, batch, now_ms)


def _delivery(endpoint: Endpoint, events: list[tuple[str, str]], now_ms: int) -> WebhookRequest:
    ids = "\0".join(event_id for event_id, _text in events)
    webhook_id = "msg_" + hashlib.sha256(f"{endpoint.id}\0{ids}".encode()).hexdigest()[:32]
    head = '{"type":"moonsend.events","timestamp":' + json.dumps(iso_ms(now_ms)) + ',"data":{"events":['
    body = head + ",".join(text for _id, text in events) + "]}}"
    return WebhookRequest(endpoint.user_id, endpoint.id, webhook_id, body, len(events))
