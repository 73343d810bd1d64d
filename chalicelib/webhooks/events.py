"""What a tenant hears of its email: the ledger's changes, as webhook events.

Every outcome moonsend records for a recipient is a write to the ledger (chalicelib.stores.recorder), and
the ledger's DynamoDB stream carries each write with the item before and after it. Reading events off
that stream, rather than sending them from each stage that records, means an event cannot be lost between
its record and its delivery (a stage that died after its write has still written it), and sending never
waits for a webhook.

An event is one of:
- a change of `state` into an outcome a tenant subscribes to (sent, failed, rejected, suppressed, expired);
- feedback recorded for the first time (`<kind>_at` set: delivered, bounced, complained, opened, clicked,
  unsubscribed). A machine's open or click is an `opened` or `clicked` event with `machine: true` and its
  `evidence`; a person's has `machine: false`.

Its id is a digest of the recipient, the type and the time it was recorded, so the stream's redelivery of
a record makes the same event again (and a receiver drops it by id).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from chalicelib.core.contract import iso_ms
from chalicelib.core.webhook_contract import EVENT_TYPES
from chalicelib.stores.ledger_model import FEEDBACK, MACHINE_OF, PERSON_OF, UNATTRIBUTED

_STATE_EVENTS = frozenset(EVENT_TYPES) - frozenset(FEEDBACK)
_deserialize = TypeDeserializer().deserialize


@dataclass(frozen=True)
class WebhookEvent:
    user_id: str
    type: str
    data: dict[str, Any]  # the event as the tenant receives it (its id, type and timestamp among it)
    at_ms: int = 0  # when it was recorded (its `timestamp`), epoch ms

    @property
    def id(self) -> str:
        return str(self.data["id"])


def ledger_events(record: dict[str, Any]) -> list[WebhookEvent]:
    """The events one stream record of the ledger makes (none for most: a claim, `queued`, a TTL delete).

    Raises ValueError (or KeyError, TypeError) for a record not of the ledger's shape; the caller logs and
    skips it."""
    if record.get("eventName") not in ("INSERT", "MODIFY"):
        return []
    change = record["dynamodb"]
    new = _image(change.get("NewImage"))
    old = _image(change.get("OldImage"))
    pk, rcpt = str(new["pk"]), str(new["rcpt"])
    user_id, sep, campaign_id = pk.partition("#")
    if not sep or user_id == UNATTRIBUTED:
        return []  # a message with no tenant to tell
    out: list[WebhookEvent] = []
    state = new.get("state")
    if state in _STATE_EVENTS and state != old.get("state"):
        at = _ms(new.get("updated_at"))
        fields = {"reason": new.get("reason"), "messageId": new.get("message_id")}
        out.append(_event(user_id, campaign_id, rcpt, new, str(state), at, fields))
    for kind in FEEDBACK:
        at_attr = f"{kind}_at"
        if new.get(at_attr) is not None and old.get(at_attr) is None:
            detail = str(new.get("feedback") or "")
            fields = {"detail": detail.split(": ", 1)[1] if detail.startswith(f"{kind}: ") else None}
            fields["messageId"] = new.get("message_id")
            event = _event(user_id, campaign_id, rcpt, new, kind, _ms(new.get(at_attr)), fields)
            out.append(_marked(event, kind, new))
    return out


def _marked(event: WebhookEvent, kind: str, item: dict[str, Any]) -> WebhookEvent:
    """An open or click says whose it is: a machine's (a privacy proxy's, a scanner's) is the same type as a
    person's, with `machine: true` and what marked it, so that a subscriber to `opened` hears both and tells
    them apart (chalicelib.ingest.machines)."""
    person = PERSON_OF.get(kind)
    if person is None and kind not in MACHINE_OF:
        return event
    data = dict(event.data)
    if person is not None:
        data["type"] = person
        data["machine"] = True
        data["evidence"] = str(item.get("machine_evidence") or "")
    else:
        data["machine"] = False
    return WebhookEvent(event.user_id, str(data["type"]), data, event.at_ms)


def _image(image: dict[str, Any] | None) -> dict[str, Any]:
    return {k: _deserialize(v) for k, v in (image or {}).items()}


def _ms(value: Any) -> int:
    return int(value) if isinstance(value, (int, Decimal)) else 0


def _event(
    user_id: str,
    campaign_id: str,
    rcpt: str,
    item: dict[str, Any],
    kind: str,
    at_ms: int,
    fields: dict[str, Any],
) -> WebhookEvent:
    digest = hashlib.sha256(f"{user_id}\0{campaign_id}\0{rcpt}\0{kind}\0{at_ms}".encode()).hexdigest()
    data: dict[str, Any] = {
        "id": f"evt_{digest[:32]}",
        "type": kind,
        "timestamp": iso_ms(at_ms),
        "campaignId": campaign_id,
        "recipient": str(item.get("email") or rcpt),
    }
    data.update({k: str(v) for k, v in fields.items() if v is not None})
    return WebhookEvent(user_id, kind, data, at_ms)
