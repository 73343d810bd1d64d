"""The message contract's types: a validated PrecompileEmail request and the queued email, with the limits.

Parsing and validating a message is chalicelib.core.message_parser (one field: chalicelib.core.fields).
"""

from __future__ import annotations

import base64
import json
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from chalicelib.core.errors import FieldError, MessageInvalid
from chalicelib.core.resources import MAX_SCHEDULE_AHEAD_DAYS
from chalicelib.core.sqs_text import sqs_safe

MAX_ID_LENGTH = 128
# An address is at most 254 characters (RFC 5321's path limit less its brackets); ours are ASCII.
MAX_ADDRESS_LENGTH = 254
# DynamoDB's key sizes, in UTF-8 bytes. Every value that becomes a key is bounded where it enters so that the
# keys composed of it stay under them: the ledger's `user#campaign` (at most 257 bytes) and a lower-cased
# address (at most 254); a rejected address too long to be a key is recorded under a key of its own
# (chalicelib.ingest.rejection); a cursor or a path id the API is given is checked before it is looked up.
MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024
MAX_TEMPLATE_BYTES = 256 * 1024
MAX_SUBJECT_TEMPLATE_BYTES = 2048
MAX_RECIPIENTS_PER_MESSAGE = 1000
MAX_METADATA_BYTES = 16 * 1024
# Deeper metadata is no recipient's data; bounded so that nothing downstream recurses without end.
MAX_METADATA_DEPTH = 32
MAX_RATE_PER_SECOND = 10_000.0
# ISO 8601 durations in days, hours, minutes and seconds (`PT2H`, `P1DT12H`, `PT90M`): no months or years,
# whose length depends on the date.
_DURATION_RE = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?\Z", re.ASCII)
MIN_EXPIRES_AFTER_S = 60
PLANS = ("free", "paid")


@dataclass(frozen=True)
class Sender:
    email_address: str
    from_name: str
    region: str | None
    api_key: str | None
    api_secret: str | None
    rate_per_second: float
    # A message moonsend publishes itself (chalicelib.produce) names the tenant's registered keys by their
    # version instead of carrying them, with proof that moonsend named them (chalicelib.core.links).
    key_version: int | None = None
    key_proof: str | None = None

    @property
    def has_own_account(self) -> bool:
        """A Sender that brings its own SES keys; without them it sends on the platform's account."""
        return bool(self.api_key and self.api_secret)

    @property
    def is_paid(self) -> bool:
        """Sent through the tenant's own SES account: its keys given, or its registered keys named."""
        return self.has_own_account or self.key_version is not None

    def public_dict(self) -> dict[str, Any]:
        """The Sender as it may travel and be logged: everything but the keys."""
        return {
            "region": self.region,
            "ratePerSecond": self.rate_per_second,
            "emailAddress": self.email_address,
            "fromName": self.from_name,
        }

    def __repr__(self) -> str:  # never let the secret reach a log line through repr()
        return f"Sender(email_address={self.email_address!r}, region={self.region!r}, ...)"


@dataclass(frozen=True)
class Campaign:
    id: str
    subject: str
    body: str
    strict: bool = False
    tracking: bool = True  # open pixel and click redirects (campaign.tracking: false turns them off)
    scheduled_at: float | None = None  # epoch seconds (`scheduledAt`): send no earlier than this
    expires_after_s: float | None = None  # `expiresAfter`: send nothing later than start + this

    def deadline(self, accepted_at: float) -> float | None:
        """Epoch seconds after which none of this campaign's email may go out (None: no deadline).

        `scheduledAt + expiresAfter`; without `scheduledAt`, counted from when moonsend accepted the
        message."""
        if self.expires_after_s is None:
            return None
        return (self.scheduled_at or accepted_at) + self.expires_after_s


class Recipient(NamedTuple):
    """One recipient of a message (a NamedTuple: campaigns build hundreds of thousands of them)."""

    email: str
    metadata: dict[str, Any] = {}  # noqa: RUF012 (never mutated)

    @property
    def key(self) -> str:
        """Recipients are the same recipient whatever the case of their address."""
        return self.email.lower()


@dataclass(frozen=True)
class RejectedRecipient:
    email: str | None
    reason: str


@dataclass(frozen=True)
class PrecompileRequest:
    """A validated PrecompileEmail message: one envelope, its good and its rejected recipients."""

    user_id: str
    plan: str
    sender: Sender
    campaign: Campaign
    recipients: list[Recipient]
    rejected: list[RejectedRecipient]
    # The Sender is the registry's own, as registered (a digest's run): nothing to register or compare, and
    # no secret in it (the registry hands out none); its email goes with the tenant's current keys.
    registered: bool = False


# The queued message's field for the composed email. Deflated: composed, an email is 1.3 to 5 times its
# HTML (a text part beside it, quoted-printable, CRLF escaped in JSON), deflated and in base64 about half
# of it for Latin text and as large for Japanese, so a queued message stays as small as it was (SQS bills
# by 64 KB; a larger one goes by way of S3). Deflating costs precompile 40-130 us, inflating the drainer 10-25.
MIME = "mimeZlib"
# Larger than SES takes (40 MB): an inflated message past it is not one we wrote.
MAX_INFLATED_BYTES = 48 * 1024 * 1024


@dataclass(frozen=True)
class QueuedEmail:
    """What precompile puts on a tenant's queue and the drainer takes off it.

    The canonical queued message (rendered subject, the composed message, recipient without metadata),
    with the tenant's SES keys left out: the drainer looks them up in the tenant registry by `userId`.
    `campaign.mimeZlib` is the message as precompile composed it, all but its Date
    (chalicelib.core.mime.compose), deflated and in base64 (`pack_mime`); email queued before precompile
    composed it carries the rendered HTML as `campaign.body` instead, and the drainer composes it.
    """

    user_id: str
    plan: str
    sender: dict[str, Any]
    campaign_id: str
    subject: str
    body: str | None  # the rendered HTML, when the email is not composed yet
    recipient_email: str
    deadline_ms: int | None = None  # `campaign.expiresAt`: not sent after this (recorded expired)
    mime: str | None = None  # the composed message, without its Date

    def to_json(self) -> str:
        content, text = (MIME, pack_mime(self.mime)) if self.mime is not None else ("body", self.body or "")
        encode = QueuedEmail.encoder(self.user_id, self.plan, self.sender, self.campaign_id, self.deadline_ms, content)
        return encode(self.subject, text, self.recipient_email)

    @staticmethod
    def encoder(
        user_id: str,
        plan: str,
        sender: dict[str, Any],
        campaign_id: str,
        deadline_ms: int | None = None,
        content: str = MIME,
    ) -> Callable[[str, str, str], str]:
        """A function from (subject, content, address) to the queued JSON, for one campaign's batch.

        `content` names what the second string is: `mimeZlib` (the composed message, packed) or `body` (HTML).

        The envelope is the same for every recipient of a batch, so it is encoded once; per recipient
        only three strings are escaped (with the json module's C escaper) and joined. This was half of
        precompile's cost outside rendering. The output is what `json.dumps(..., separators=(",", ":"),
        ensure_ascii=False)` gives for the same dict, with the code points SQS refuses escaped (`sqs_safe`).
        """
        campaign: dict[str, Any] = {"id": campaign_id}
        if deadline_ms is not None:
            campaign["expiresAt"] = iso_ms(deadline_ms)
        head = json.dumps(
            {"userId": user_id, "userPlan": plan, "sender": sender, "campaign": campaign},
            separators=(",", ":"),
            ensure_ascii=False,
        )
        prefix = head[:-2] + ',"subject":'  # drop the closing `}}` of campaign and message
        key = f'"{content}":'

        def encode(subject: str, text: str, email: str, _q: Callable[[str], str] = _json_string) -> str:
            # SQS refuses some code points a tenant's text may hold (a literal U+FFFF in a subject): escaped.
            return sqs_safe(f'{prefix}{_q(subject)},{key}{_q(text)}}},"recipient":{{"email":{_q(email)}}}}}')

        return encode

    @classmethod
    def from_json(cls, raw: str) -> QueuedEmail:
        try:
            d = json.loads(raw)
            c = d["campaign"]
            if not isinstance(d, dict) or not isinstance(c, dict):
                raise TypeError("the message and its campaign must be objects")
            expires = c.get("expiresAt")
            packed = c.get(MIME)
            body = c["body"] if packed is None else None  # queued before precompile composed it
            return cls(
                user_id=str(d["userId"]),
                plan=str(d.get("userPlan", "paid")),
                sender=dict(d["sender"]),
                campaign_id=str(c["id"]),
                subject=str(c["subject"]),
                body=None if body is None else str(body),
                recipient_email=str(d["recipient"]["email"]),
                deadline_ms=_epoch_ms(expires) if expires else None,
                mime=None if packed is None else unpack_mime(packed),
            )
        except (ValueError, KeyError, TypeError, AttributeError, zlib.error) as exc:
            raise MessageInvalid([FieldError("queued message", f"not a queued email: {exc}")]) from exc
        except RecursionError as exc:
            raise MessageInvalid([FieldError("queued message", "not a queued email: nested too deeply")]) from exc


def pack_mime(composed: str) -> str:
    """The composed message as the queued email carries it: zlib (RFC 1950), in base64."""
    return base64.b64encode(zlib.compress(composed.encode("ascii"), 6)).decode("ascii")


def unpack_mime(packed: object) -> str:
    """The composed message back, or ValueError/zlib.error for a field that is not one we packed."""
    if not isinstance(packed, str):
        raise TypeError(f"campaign.{MIME} must be a string, not {type(packed).__name__}")
    inflate = zlib.decompressobj()
    raw = inflate.decompress(base64.b64decode(packed, validate=True), MAX_INFLATED_BYTES)
    if inflate.unconsumed_tail or not inflate.eof:
        raise ValueError(f"campaign.{MIME} is cut short or inflates past {MAX_INFLATED_BYTES} bytes")
    return raw.decode("ascii")


_json_string: Callable[[str], str] = json.encoder.encode_basestring


def iso_ms(epoch_ms: int) -> str:
    """`2026-11-22T14:05:00.000Z`: an instant as the queued message and the API show it."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _epoch_ms(text: str) -> int:
    return int(parse_instant(text) * 1000)


def parse_instant(value: object) -> float:
    """An ISO 8601 date-time with its UTC offset (`2026-12-01T09:00:00+01:00`, `...Z`) as epoch seconds.

    The offset is required: a time without one means a different instant in every time zone."""
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError("must be an ISO 8601 date-time string")
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError("not an ISO 8601 date-time (e.g. 2026-12-01T09:00:00+01:00)") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError("needs a UTC offset (e.g. +01:00 or Z)")
    return when.timestamp()


def parse_duration(value: object) -> float:
    """`expiresAfter`: an ISO 8601 duration (`PT2H`, `P1DT6H`, `PT90M`) or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("must be an ISO 8601 duration (e.g. PT2H) or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION_RE.match(value.strip().upper())
        if not m or value.strip().upper() in ("P", "PT"):
            raise ValueError("not an ISO 8601 duration in days, hours, minutes, seconds (e.g. PT2H)")
        d, h, mi, sec = m.groups()
        seconds = int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + float(sec or 0)
    else:
        raise ValueError("must be an ISO 8601 duration (e.g. PT2H) or a number of seconds")
    if math.isnan(seconds) or math.isinf(seconds) or seconds < MIN_EXPIRES_AFTER_S:
        raise ValueError(f"must be at least {MIN_EXPIRES_AFTER_S} seconds")
    if seconds > MAX_SCHEDULE_AHEAD_DAYS * 86400:
        raise ValueError(f"longer than {MAX_SCHEDULE_AHEAD_DAYS} days")
    return seconds


MAX_DELAY_S = 900  # the longest delay SQS gives a message


def expired_reason(deadline_ms: int) -> str:
    """Why a recipient is recorded `expired`: its campaign's deadline passed before it was sent."""
    return f"expired: not sent by its deadline {iso_ms(deadline_ms)} (scheduledAt + expiresAfter)"


# The headers every campaign email carries (chalicelib.core.mime) and SES's events are matched by
# (chalicelib.feedback.ses_events).
TENANT_HEADER = "X-Moonsend-Tenant"
CAMPAIGN_HEADER = "X-Moonsend-Campaign"


def utf8_size(text: str) -> int:
    """The UTF-8 size of `text`; without encoding it when it is ASCII (an O(1) check in CPython)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))
