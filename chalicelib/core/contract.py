"""The message contract: what PrecompileEmail accepts and what goes on a tenant's queue.

Accepts MoonMail's canonical message unchanged (one `recipient`) and a batched form with
`recipients: [...]`, so a large campaign needs one SNS publish per few hundred recipients. Problems
with the envelope (user, sender, campaign) reject the whole message; problems with one recipient
reject only that recipient, so the good ones of the same batch still go out. Every error names the
field and the reason (`recipients[3].email: not an email address`).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from chalicelib.core.errors import FieldError, MessageInvalid
from chalicelib.core.resources import MAX_SCHEDULE_AHEAD_DAYS

MAX_ID_LENGTH = 128
MAX_TEMPLATE_BYTES = 256 * 1024
MAX_SUBJECT_TEMPLATE_BYTES = 2048
MAX_RECIPIENTS_PER_MESSAGE = 1000
MAX_METADATA_BYTES = 16 * 1024
# Control characters a header may not carry (tab, which is white space, aside), C1 ones included.
_HEADER_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# Deeper metadata is no recipient's data; bounded so that nothing downstream recurses without end.
MAX_METADATA_DEPTH = 32
MAX_RATE_PER_SECOND = 10_000.0
# One encoder for every metadata size check: json.dumps builds a new one per call when given options.
_METADATA_SIZE = json.JSONEncoder(default=str)
# A JSON escape of a UTF-16 surrogate (\ud800-\udfff): paired, it is one character (an emoji); alone it
# decodes to a string that cannot be encoded as UTF-8, and would fail later in SQS, MIME or DynamoDB.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

# Ids travel into queue names, S3 keys, log lines and file names: a conservative alphabet that still
# takes the ids identity providers hand out (`auth0|5f3e...`, `google-oauth2|1234`, emails).
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.|@:+=-]*$")
# Pragmatic address check: one @, a dotted domain, no spaces or control characters, ASCII only.
_EMAIL_RE = re.compile(
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$"
)
_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
# ISO 8601 durations in days, hours, minutes and seconds (`PT2H`, `P1DT12H`, `PT90M`): no months or years,
# whose length depends on the date.
_DURATION_RE = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")
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

    @property
    def has_own_account(self) -> bool:
        """A sender that brings its own SES keys; without them it sends on the platform's account."""
        return bool(self.api_key and self.api_secret)

    def public_dict(self) -> dict[str, Any]:
        """The sender as it may travel and be logged: everything but the keys."""
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


@dataclass(frozen=True)
class QueuedEmail:
    """What precompile puts on a tenant's queue and the sender takes off it.

    The canonical queued message (rendered subject and body, recipient without metadata), with the
    tenant's SES keys left out: the sender looks them up in the tenant registry by `userId`.
    """

    user_id: str
    plan: str
    sender: dict[str, Any]
    campaign_id: str
    subject: str
    body: str
    recipient_email: str
    deadline_ms: int | None = None  # `campaign.expiresAt`: not sent after this (recorded expired)

    def to_json(self) -> str:
        return QueuedEmail.encoder(self.user_id, self.plan, self.sender, self.campaign_id, self.deadline_ms)(
            self.subject, self.body, self.recipient_email
        )

    @staticmethod
    def encoder(
        user_id: str, plan: str, sender: dict[str, Any], campaign_id: str, deadline_ms: int | None = None
    ) -> Callable[[str, str, str], str]:
        """A function from (subject, body, address) to the queued JSON, for one campaign's batch.

        The envelope is the same for every recipient of a batch, so it is encoded once; per recipient
        only three strings are escaped (with the json module's C escaper) and joined. This was half of
        precompile's cost outside rendering. The output is what `json.dumps(..., separators=(",", ":"),
        ensure_ascii=False)` gives for the same dict.
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

        def encode(subject: str, body: str, email: str, _q: Callable[[str], str] = _json_string) -> str:
            return f'{prefix}{_q(subject)},"body":{_q(body)}}},"recipient":{{"email":{_q(email)}}}}}'

        return encode

    @classmethod
    def from_json(cls, raw: str) -> QueuedEmail:
        try:
            d = json.loads(raw)
            expires = d["campaign"].get("expiresAt")
            return cls(
                user_id=str(d["userId"]),
                plan=str(d.get("userPlan", "paid")),
                sender=dict(d["sender"]),
                campaign_id=str(d["campaign"]["id"]),
                subject=str(d["campaign"]["subject"]),
                body=str(d["campaign"]["body"]),
                recipient_email=str(d["recipient"]["email"]),
                deadline_ms=_epoch_ms(expires) if expires else None,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MessageInvalid([FieldError("queued message", f"not a queued email: {exc}")]) from exc


_json_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]


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


# --- validation helpers -------------------------------------------------------------------------


def is_email(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= 254
        and bool(_EMAIL_RE.match(value))
        and (len(value.split("@", 1)[0]) <= 64)
    )


def _id(d: dict[str, Any], key: str, path: str, errors: list[FieldError]) -> str:
    value = d.get(key)
    if value is None or value == "":
        errors.append(FieldError(path, "is required"))
        return ""
    if not isinstance(value, str):
        errors.append(FieldError(path, "must be a string"))
        return ""
    if len(value) > MAX_ID_LENGTH:
        errors.append(FieldError(path, f"longer than {MAX_ID_LENGTH} characters"))
        return ""
    if not _ID_RE.match(value):
        errors.append(FieldError(path, "may only hold ASCII letters, digits and _.|@:+=- (not first)"))
        return ""
    return value


def _object(d: dict[str, Any], key: str, path: str, errors: list[FieldError]) -> dict[str, Any]:
    value = d.get(key)
    if value is None:
        errors.append(FieldError(path, "is required"))
        return {}
    if not isinstance(value, dict):
        errors.append(FieldError(path, "must be an object"))
        return {}
    return value


def _text(
    d: dict[str, Any],
    key: str,
    path: str,
    errors: list[FieldError],
    *,
    max_bytes: int,
    required: bool = True,
    single_line: bool = False,
) -> str:
    value = d.get(key)
    if value is None or (value == "" and required):
        if required:
            errors.append(FieldError(path, "is required"))
        return ""
    if not isinstance(value, str):
        errors.append(FieldError(path, "must be a string"))
        return ""
    if len(value.encode("utf-8")) > max_bytes:
        errors.append(FieldError(path, f"larger than the limit of {max_bytes} bytes"))
        return ""
    if single_line and ("\r" in value or "\n" in value):
        errors.append(FieldError(path, "must not contain line breaks"))
    elif single_line and _HEADER_CONTROLS.search(value):
        # NUL, ESC, BS, VT, FF, DEL...: nothing a mail client shows, and some it would obey (RFC 5322 §3.2.5).
        errors.append(FieldError(path, "must not contain control characters"))
        return ""
    return value


def parse_rate(value: object) -> float:
    """`ratePerSecond` as MoonMail sends it (a string) or as a number; positive and finite."""
    if isinstance(value, bool):
        raise ValueError("not a number")
    if isinstance(value, str):
        try:
            rate = float(value.strip())
        except ValueError:
            raise ValueError("not a number") from None
    elif isinstance(value, int | float):
        rate = float(value)
    else:
        raise ValueError("not a number")
    if math.isnan(rate) or math.isinf(rate):
        raise ValueError("not a finite number")
    if rate <= 0:
        raise ValueError("must be greater than zero")
    if rate > MAX_RATE_PER_SECOND:
        raise ValueError(f"above the maximum of {MAX_RATE_PER_SECOND:g}")
    return rate


def _sender(d: dict[str, Any], errors: list[FieldError]) -> Sender | None:
    s = _object(d, "sender", "sender", errors)
    if not s:
        return None
    before = len(errors)
    email = s.get("emailAddress")
    if not email:
        errors.append(FieldError("sender.emailAddress", "is required"))
    elif not is_email(email):
        errors.append(FieldError("sender.emailAddress", "not an email address"))
    from_name = _text(s, "fromName", "sender.fromName", errors, max_bytes=256, required=False, single_line=True)
    rate = 0.0
    if s.get("ratePerSecond") is None:
        errors.append(FieldError("sender.ratePerSecond", "is required"))
    else:
        try:
            rate = parse_rate(s["ratePerSecond"])
        except ValueError as exc:
            errors.append(FieldError("sender.ratePerSecond", str(exc)))
    key, secret = s.get("apiKey") or None, s.get("apiSecret") or None
    for name, v in (("apiKey", key), ("apiSecret", secret)):
        if v is not None and (not isinstance(v, str) or len(v) > 256 or not v.isprintable()):
            errors.append(FieldError(f"sender.{name}", "must be a printable string"))
    if bool(key) != bool(secret):
        errors.append(FieldError("sender.apiKey", "apiKey and apiSecret go together"))
    region = s.get("region") or None
    if region is not None and (not isinstance(region, str) or not _REGION_RE.match(region)):
        errors.append(FieldError("sender.region", "not an AWS region"))
    if len(errors) > before:
        return None
    return Sender(
        email_address=str(email),
        from_name=from_name,
        region=region,
        api_key=key,
        api_secret=secret,
        rate_per_second=rate,
    )


def _campaign(d: dict[str, Any], errors: list[FieldError]) -> Campaign | None:
    c = _object(d, "campaign", "campaign", errors)
    if not c:
        return None
    before = len(errors)
    cid = _id(c, "id", "campaign.id", errors)
    subject = _text(c, "subject", "campaign.subject", errors, max_bytes=MAX_SUBJECT_TEMPLATE_BYTES)
    body = _text(c, "body", "campaign.body", errors, max_bytes=MAX_TEMPLATE_BYTES)
    strict = c.get("strict", False)
    if not isinstance(strict, bool):
        errors.append(FieldError("campaign.strict", "must be true or false"))
    tracking = c.get("tracking", True)
    if not isinstance(tracking, bool):
        errors.append(FieldError("campaign.tracking", "must be true or false"))
    scheduled_at = expires_after = None
    if c.get("scheduledAt") is not None:
        try:
            scheduled_at = parse_instant(c["scheduledAt"])
            if scheduled_at > time.time() + MAX_SCHEDULE_AHEAD_DAYS * 86400:
                errors.append(FieldError("campaign.scheduledAt", f"more than {MAX_SCHEDULE_AHEAD_DAYS} days ahead"))
        except ValueError as exc:
            errors.append(FieldError("campaign.scheduledAt", str(exc)))
    if c.get("expiresAfter") is not None:
        try:
            expires_after = parse_duration(c["expiresAfter"])
        except ValueError as exc:
            errors.append(FieldError("campaign.expiresAfter", str(exc)))
    if len(errors) > before:
        return None
    return Campaign(
        id=cid,
        subject=subject,
        body=body,
        strict=bool(strict),
        tracking=bool(tracking),
        scheduled_at=scheduled_at,
        expires_after_s=expires_after,
    )


def _small_metadata(raw_recipients: list[object], group: int = 32) -> set[int]:
    """Indices of recipients whose metadata is certainly within MAX_METADATA_BYTES, found cheaply.

    A list's encoding is longer than any of its items', so a group of metadata that encodes within the
    limit needs no check one by one. One encode per 32 recipients instead of one each: the per-call cost
    of the json module, not the encoding, was most of it. A group over the limit is checked one by one.
    """
    small: set[int] = set()
    for start in range(0, len(raw_recipients), group):
        members = [
            (i, metadata)
            for i, r in enumerate(raw_recipients[start : start + group], start)
            if isinstance(r, dict) and isinstance(metadata := r.get("metadata"), dict)
        ]
        if members and len(_METADATA_SIZE.encode([m for _, m in members])) <= MAX_METADATA_BYTES:
            small.update(i for i, _ in members)
    return small


def _nests_beyond(value: object, limit: int) -> bool:
    """Whether `value` nests objects or lists more than `limit` levels deep (walked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _recipient(r: object, where: str | int, small: bool = False) -> Recipient | RejectedRecipient:
    """One recipient checked; `where` is its place in the message (an index of `recipients`, or a name).

    The path for an error is built only for an error: a message has hundreds of good recipients."""
    if not isinstance(r, dict):
        return RejectedRecipient(None, f"{_place(where)}: must be an object")
    email = r.get("email")
    shown = email if isinstance(email, str) else None
    if not email:
        return RejectedRecipient(None, f"{_place(where)}.email: is required")
    if not is_email(email):
        return RejectedRecipient(shown, f"{_place(where)}.email: not an email address")
    metadata = r.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        return RejectedRecipient(shown, f"{_place(where)}.metadata: must be an object")
    if _nests_beyond(metadata, MAX_METADATA_DEPTH):
        return RejectedRecipient(shown, f"{_place(where)}.metadata: nested more than {MAX_METADATA_DEPTH} levels")
    if not small and len(_METADATA_SIZE.encode(metadata)) > MAX_METADATA_BYTES:
        return RejectedRecipient(shown, f"{_place(where)}.metadata: larger than {MAX_METADATA_BYTES} bytes")
    return Recipient(email=str(email), metadata=metadata)


def _place(where: str | int) -> str:
    return f"recipients[{where}]" if isinstance(where, int) else where


def parse_precompile_message(raw: str | bytes | dict[str, Any]) -> PrecompileRequest:
    """Validate a PrecompileEmail message.

    Raises MessageInvalid when the envelope is unusable; otherwise returns the request with its
    good recipients and, separately, the rejected ones with their reasons.
    """
    if isinstance(raw, str | bytes):
        try:
            d = json.loads(raw)
        except ValueError as exc:
            raise MessageInvalid([FieldError("message", f"not valid JSON ({exc})")]) from exc
        except RecursionError as exc:
            raise MessageInvalid([FieldError("message", "not valid JSON (nested too deeply to read)")]) from exc
    else:
        d = raw
    if not isinstance(d, dict):
        raise MessageInvalid([FieldError("message", "must be a JSON object")])
    if isinstance(raw, str) and (not raw.isascii() or _SURROGATE_ESCAPE.search(raw)):
        where = _lone_surrogate(d, "")
        if where is not None:
            raise MessageInvalid([FieldError(where or "message", "not valid Unicode (a lone UTF-16 surrogate)")])

    errors: list[FieldError] = []
    user_id = _id(d, "userId", "userId", errors)
    plan = d.get("userPlan", "paid")
    if plan is None:
        plan = "paid"
    if plan not in PLANS:
        errors.append(FieldError("userPlan", f"must be one of {', '.join(PLANS)}"))
    sender = _sender(d, errors)
    campaign = _campaign(d, errors)

    one, many = d.get("recipient"), d.get("recipients")
    raw_recipients: list[object] = []
    single = False  # `recipient` (named so in errors) rather than `recipients[i]`
    if one is not None and many is not None:
        errors.append(FieldError("recipients", "give either recipient or recipients, not both"))
    elif many is not None:
        if not isinstance(many, list) or not many:
            errors.append(FieldError("recipients", "must be a non-empty list"))
        elif len(many) > MAX_RECIPIENTS_PER_MESSAGE:
            errors.append(FieldError("recipients", f"more than {MAX_RECIPIENTS_PER_MESSAGE} in one message"))
        else:
            raw_recipients = many
    elif one is not None:
        raw_recipients, single = [one], True
    else:
        errors.append(FieldError("recipient", "is required"))

    if errors or sender is None or campaign is None:
        raise MessageInvalid(errors)

    good: list[Recipient] = []
    rejected: list[RejectedRecipient] = []
    seen: set[str] = set()
    small = _small_metadata(raw_recipients)
    for i, r in enumerate(raw_recipients):
        parsed = _recipient(r, "recipient" if single else i, i in small)
        if isinstance(parsed, Recipient):
            key = parsed.key
            if key in seen:  # the same address twice in one message is one recipient
                continue
            seen.add(key)
            good.append(parsed)
        else:
            rejected.append(parsed)
    if not sender.has_own_account:
        plan = "free"
    return PrecompileRequest(
        user_id=user_id,
        plan=str(plan),
        sender=sender,
        campaign=campaign,
        recipients=good,
        rejected=rejected,
    )


def _lone_surrogate(value: object, path: str) -> str | None:
    """The path of the first string (or key) holding a lone surrogate, or None when all are valid text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            where = _lone_surrogate(k, path or "message") or _lone_surrogate(v, f"{path}.{k}" if path else str(k))
            if where is not None:
                return where.encode("ascii", "backslashreplace").decode("ascii")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            where = _lone_surrogate(v, f"{path}[{i}]")
            if where is not None:
                return where
    return None


def envelope_ids(raw: str | bytes | dict[str, Any]) -> tuple[str | None, str | None]:
    """Best-effort (userId, campaign.id) of a message that failed validation, for recording."""
    try:
        d = json.loads(raw) if isinstance(raw, str | bytes) else raw
        user, camp = d.get("userId"), (d.get("campaign") or {}).get("id")
        ok = lambda v: isinstance(v, str) and len(v) <= MAX_ID_LENGTH and bool(_ID_RE.match(v))  # noqa: E731
        return (user if ok(user) else None, camp if ok(camp) else None)
    except (ValueError, AttributeError, TypeError, RecursionError):
        return None, None


MAX_DELAY_S = 900  # the longest delay SQS gives a message


def expired_reason(deadline_ms: int) -> str:
    """Why a recipient is recorded `expired`: its campaign's deadline passed before it was sent."""
    return f"expired: not sent by its deadline {iso_ms(deadline_ms)} (scheduledAt + expiresAfter)"


# The headers every campaign email carries (chalicelib.send.mime) and SES's events are matched by
# (chalicelib.feedback.ses_events).
TENANT_HEADER = "X-Moonsend-Tenant"
CAMPAIGN_HEADER = "X-Moonsend-Campaign"


def utf8_size(text: str) -> int:
    """The UTF-8 size of `text`; without encoding it when it is ASCII (an O(1) check in CPython)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))
