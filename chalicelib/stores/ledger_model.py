"""The ledger's table and what is read from it: the states, an entry, a claim, the keys of rejected messages.

chalicelib.stores.ledger writes and reads it; the states here are the words every stage and report uses.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.expressions.condition import Condition
from pynamodb.models import Model

from chalicelib.stores.ports.ledger import Entry

QUEUED, SENT, FAILED, REJECTED, SUPPRESSED = "queued", "sent", "failed", "rejected", "suppressed"
CANCELLED, SCHEDULED, EXPIRED = "cancelled", "scheduled", "expired"
FINAL = frozenset({SENT, FAILED, REJECTED, SUPPRESSED, CANCELLED, EXPIRED})
STATES = (SCHEDULED, QUEUED, SENT, FAILED, REJECTED, SUPPRESSED, CANCELLED, EXPIRED)
FEEDBACK = (
    "delivered",
    "bounced",
    "complained",
    "unsubscribed",
    "opened",
    "clicked",
    "machine_opened",
    "machine_clicked",
)
# A person's open or click, and the one a machine made (a privacy proxy, a security scanner): counted apart,
# each once per recipient (chalicelib.ingest.machines says what marks a machine's).
MACHINE_OF = {"opened": "machine_opened", "clicked": "machine_clicked"}
PERSON_OF = {machine: person for person, machine in MACHINE_OF.items()}  # a machine's kind -> a person's


def feedback_parts(line: str | None) -> tuple[str | None, str | None]:
    """A ledger's feedback line (`delivered: 250 2.6.0 Message received`) as its kind and the receiving
    side's own text (None for each it does not have)."""
    if not line:
        return None, None
    kind, _, detail = line.partition(":")
    return kind.strip(), detail.strip() or None


class LedgerModel(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)  # "<userId>#<campaignId>" ('#' is not in the id alphabet)
    rcpt = UnicodeAttribute(range_key=True)  # lower-cased address
    email = UnicodeAttribute(null=True)
    state = UnicodeAttribute(null=True)
    reason = UnicodeAttribute(null=True)
    message_id = UnicodeAttribute(null=True)
    claim_token = UnicodeAttribute(null=True)
    claimed_until = NumberAttribute(null=True)  # epoch ms
    attempts = NumberAttribute(null=True)
    retries = NumberAttribute(null=True)  # times retry-failed re-queued it
    retried_at = NumberAttribute(null=True)  # epoch ms of the latest
    updated_at = NumberAttribute(null=True)
    expires_at = NumberAttribute(null=True)  # epoch seconds, DynamoDB TTL
    delivered_at = NumberAttribute(null=True)  # epoch ms, from SES's events
    bounced_at = NumberAttribute(null=True)
    complained_at = NumberAttribute(null=True)
    unsubscribed_at = NumberAttribute(null=True)
    opened_at = NumberAttribute(null=True)  # a person's first open
    clicked_at = NumberAttribute(null=True)
    machine_opened_at = NumberAttribute(null=True)  # a machine's first (chalicelib.ingest.machines)
    machine_clicked_at = NumberAttribute(null=True)
    machine_evidence = UnicodeAttribute(null=True)  # what marked the latest machine's open or click
    first_click = UnicodeAttribute(null=True)  # the link of the first click recorded, a person's or a machine's
    sent_at = NumberAttribute(null=True)  # epoch ms: when its send was recorded (what a machine's speed is timed by)
    ses_delivered_at = NumberAttribute(null=True)  # epoch ms: the delivery as SES timed it (`delivered_at`: recorded)
    feedback = UnicodeAttribute(null=True)  # the latest of them, with its detail
    # When it first entered the queue (precompile's record, a release, or the claim of a drainer that was faster),
    # was kept in the schedule store, was released from it: with the states and `<kind>_at`, what the campaign's
    # counters are recounted from (chalicelib.stores.ledger_tally). Never removed.
    queued_at = NumberAttribute(null=True)
    kept_at = NumberAttribute(null=True)
    released_at = NumberAttribute(null=True)
    # The kinds of feedback (bounced, complained) counted for the reputation guard, in the same transaction
    # as the count (chalicelib.stores.reputation): counted once, whatever redelivery or crash came between.
    guarded = UnicodeSetAttribute(null=True)


# Where messages with no usable tenant or campaign id are recorded, under the UTC day as the campaign:
# ids may not start with `_`, so no tenant can have this one.
UNATTRIBUTED = "_unattributed"


def unattributed_day() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def message_key(raw: str | bytes | dict[str, Any]) -> str:
    """The ledger key of a rejected message with no recipient to key it by: its content's digest."""
    if isinstance(raw, dict):
        data = json.dumps(raw, sort_keys=True, default=str).encode("utf-8")
    else:
        data = raw.encode("utf-8", "replace") if isinstance(raw, str) else raw
    return f"message-{hashlib.sha256(data).hexdigest()[:32]}"


def pk_of(user_id: str, campaign_id: str) -> str:
    return f"{user_id}#{campaign_id}"


def open_condition(m: type[LedgerModel]) -> Condition:
    """No outcome yet: unknown, scheduled or queued (the states in which an email may still be sent)."""
    return m.state.does_not_exist() | m.state.is_in(QUEUED, SCHEDULED)


def entry_of(item: LedgerModel) -> Entry:
    return Entry(
        email=item.email or item.rcpt,
        state=item.state,
        reason=item.reason,
        message_id=item.message_id,
        updated_at=int(item.updated_at) if item.updated_at else None,
        feedback=item.feedback,
        retries=int(item.retries or 0),
        claimed_until=int(item.claimed_until) if item.claimed_until else None,
        retried_at=int(item.retried_at) if item.retried_at else None,
    )
