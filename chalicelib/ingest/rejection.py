"""Where a rejection is recorded, so that every one is listed with its reason and recorded once.

A recipient is recorded under its address when that can be a ledger key at all, even an invalid one;
an address longer than any address can be (over 254 bytes: it could be a 200 KB string, and the ledger's
sort key takes 1,024 bytes) under its first 64 characters, its length and its digest (`aaaa... (1,100
bytes, sha256 9f86d081884c7d65)`), the same for every copy of it, so that it is listed with its reason and
recorded once; an entry with no usable address (not an object, no email, control characters) under the
message's digest and its place in the message (the reason starts with it: `recipients[3]: ...`). A whole
message that cannot be used goes, with a valid tenant and campaign id, into that campaign (each recipient
it names, or the message under its digest); without them (not JSON, a hostile userId) there is no
campaign to put it in, so it goes to the `_unattributed` tenant under the day's date (an id no tenant can
have), where `moonsend status` counts it and `moonsend recipients --user _unattributed --campaign <date>`
lists the reasons.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from chalicelib.core.contract import MAX_ADDRESS_LENGTH, RejectedRecipient
from chalicelib.core.errors import MessageInvalid
from chalicelib.core.fields import is_email
from chalicelib.core.message_parser import envelope_ids
from chalicelib.stores.ledger_model import UNATTRIBUTED, message_key, unattributed_day

# How much of an address too long to be a key its record shows (4 bytes a character at most: far under
# the sort key's 1,024 bytes).
SHOWN_CHARACTERS = 64


@dataclass(frozen=True)
class MessageRejection:
    given_user: str | None  # the ids the message carried, if valid
    given_campaign: str | None
    user_id: str  # where it is recorded
    campaign_id: str
    rejected: list[RejectedRecipient]
    records: list[tuple[str, str]]  # (ledger key, reason)


def rejects_of_message(raw: str, exc: MessageInvalid) -> MessageRejection:
    """An unusable message: each recipient it names rejected with the reason, or the message itself."""
    user_id, campaign_id = envelope_ids(raw)
    reason = str(exc)
    emails = _named_recipients(raw)
    rejected = [RejectedRecipient(e, reason) for e in emails] or [RejectedRecipient(None, reason)]
    if user_id and campaign_id:
        records = [(e, reason) for e in emails] or [(message_key(raw), reason)]
        return MessageRejection(user_id, campaign_id, user_id, campaign_id, rejected, records)
    records = [(message_key(raw), f"{reason}{_given_ids(raw)}")]
    return MessageRejection(user_id, campaign_id, UNATTRIBUTED, unattributed_day(), rejected, records)


def rejection_records(rejected: list[RejectedRecipient], raw: str) -> list[tuple[str, str]]:
    """(ledger key, reason) of each rejected recipient of a valid message."""
    records: list[tuple[str, str]] = []
    digest = ""  # the message's digest, computed once and only when needed
    for r in rejected:
        key = record_key(r.email)
        if key is not None:
            records.append((key, r.reason))
            continue
        digest = digest or message_key(raw)
        records.append((f"{digest}-{r.reason.split(':', 1)[0]}", r.reason))
    return records


def _given_ids(raw: str | bytes | dict[str, Any]) -> str:
    """` (userId given: '../x')`: the ids a rejected message carried, shortened, so its producer can find it.

    Ids are not secrets; the Sender's keys are never echoed."""
    try:
        d = json.loads(raw) if isinstance(raw, str | bytes) else raw
        campaign = d.get("campaign")
        campaign = campaign if isinstance(campaign, dict) else {}
        given = [("userId", d.get("userId")), ("campaign.id", campaign.get("id"))]
    except (ValueError, AttributeError, TypeError, RecursionError):
        return ""
    shown = [f"{name} given: {v[:60]!r}{'...' if len(v) > 60 else ''}" for name, v in given if isinstance(v, str)]
    return f" ({', '.join(shown)})" if shown else ""


def record_key(email: str | None) -> str | None:
    """The ledger key a rejected recipient's address is recorded under, or None when it has none of its own."""
    if not email or not email.isprintable():  # a lone surrogate is not printable either: never encoded
        return None
    size = len(email.encode("utf-8"))
    if size <= MAX_ADDRESS_LENGTH:
        return email
    digest = hashlib.sha256(email.encode("utf-8")).hexdigest()[:16]
    return f"{email[:SHOWN_CHARACTERS]}... ({size:,} bytes, sha256 {digest})"


def _named_recipients(raw: str) -> list[str]:
    """The valid addresses an (invalid) message names, so that each can be recorded as rejected."""
    try:
        d = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    if not isinstance(d, dict):
        return []
    items = d.get("recipients")
    items = items if isinstance(items, list) else [d.get("recipient")]
    out: list[str] = []
    for r in items:
        if isinstance(r, dict) and is_email(r.get("email")) and r["email"].lower() not in {e.lower() for e in out}:
            out.append(r["email"])
    return out
