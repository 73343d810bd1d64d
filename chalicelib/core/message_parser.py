"""PrecompileEmail, parsed and validated (docs/contract.md).

Accepts MoonMail's canonical message unchanged (one `recipient`) and a batched form with
`recipients: [...]`, so a large campaign needs one SNS publish per few hundred recipients. Problems
with the envelope (user, sender, campaign) reject the whole message; problems with one recipient
reject only that recipient, so the good ones of the same batch still go out. Every error names the
field and the reason (`recipients[3].email: not an email address`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from chalicelib.core.contract import (
    MAX_ADDRESS_LENGTH,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_RECIPIENTS_PER_MESSAGE,
    MAX_SUBJECT_TEMPLATE_BYTES,
    MAX_TEMPLATE_BYTES,
    PLANS,
    Campaign,
    PrecompileRequest,
    Recipient,
    RejectedRecipient,
    Sender,
    parse_duration,
    parse_instant,
)
from chalicelib.core.errors import FieldError, MessageInvalid
from chalicelib.core.fields import (
    METADATA_SIZE,
    REGION_RE,
    SURROGATE_ESCAPE,
    id_field,
    is_email,
    is_id,
    lone_surrogate,
    nests_beyond,
    object_field,
    parse_rate,
    text_field,
)
from chalicelib.core.resources import MAX_SCHEDULE_AHEAD_DAYS


def parse_sender(d: dict[str, Any], errors: list[FieldError]) -> Sender | None:
    """`sender`, checked; None (with the errors added) when it is unusable."""
    s = object_field(d, "sender", "sender", errors)
    if not s:
        return None
    before = len(errors)
    email = s.get("emailAddress")
    if not email:
        errors.append(FieldError("sender.emailAddress", "is required"))
    elif not is_email(email):
        errors.append(FieldError("sender.emailAddress", "not an email address"))
    from_name = text_field(s, "fromName", "sender.fromName", errors, max_bytes=256, required=False, single_line=True)
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
    if region is not None and (not isinstance(region, str) or not REGION_RE.match(region)):
        errors.append(FieldError("sender.region", "not an AWS region"))
    version, proof = _named_keys(s, bool(key), errors)
    if len(errors) > before:
        return None
    return Sender(
        email_address=str(email),
        from_name=from_name,
        region=region,
        api_key=key,
        api_secret=secret,
        rate_per_second=rate,
        key_version=version,
        key_proof=proof,
    )


def _named_keys(s: dict[str, Any], given_keys: bool, errors: list[FieldError]) -> tuple[int | None, str | None]:
    """`sender.keyVersion` and `sender.keyProof`: the registered keys a message moonsend publishes names."""
    version, proof = s.get("keyVersion"), s.get("keyProof")
    if version is None and proof is None:
        return None, None
    if given_keys:
        errors.append(FieldError("sender.keyVersion", "give apiKey and apiSecret, or keyVersion, not both"))
    elif isinstance(version, bool) or not isinstance(version, int) or not 0 < version < 2**31:
        errors.append(FieldError("sender.keyVersion", "must be a positive whole number"))
    elif not isinstance(proof, str) or not proof or len(proof) > 1024 or not proof.isascii():
        errors.append(FieldError("sender.keyProof", "is required with keyVersion (messages moonsend publishes)"))
    else:
        return version, proof
    return None, None


def _campaign(d: dict[str, Any], errors: list[FieldError]) -> Campaign | None:
    c = object_field(d, "campaign", "campaign", errors)
    if not c:
        return None
    before = len(errors)
    cid = id_field(c, "id", "campaign.id", errors)
    subject = text_field(c, "subject", "campaign.subject", errors, max_bytes=MAX_SUBJECT_TEMPLATE_BYTES)
    body = text_field(c, "body", "campaign.body", errors, max_bytes=MAX_TEMPLATE_BYTES)
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
        if members and len(METADATA_SIZE.encode([m for _, m in members])) <= MAX_METADATA_BYTES:
            small.update(i for i, _ in members)
    return small


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
        return RejectedRecipient(shown, f"{_place(where)}.email: {_not_an_address(email)}")
    metadata = r.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        return RejectedRecipient(shown, f"{_place(where)}.metadata: must be an object")
    if nests_beyond(metadata, MAX_METADATA_DEPTH):
        return RejectedRecipient(shown, f"{_place(where)}.metadata: nested more than {MAX_METADATA_DEPTH} levels")
    if not small and len(METADATA_SIZE.encode(metadata)) > MAX_METADATA_BYTES:
        return RejectedRecipient(shown, f"{_place(where)}.metadata: larger than {MAX_METADATA_BYTES} bytes")
    return Recipient(email=str(email), metadata=metadata)


def _not_an_address(email: object) -> str:
    """Why `email` is not an address, saying so when it is longer than any address can be."""
    if isinstance(email, str) and len(email) > MAX_ADDRESS_LENGTH:
        return f"not an email address (longer than {MAX_ADDRESS_LENGTH} characters: {len(email):,})"
    return "not an email address"


def check_recipient(r: object, where: str) -> Recipient | RejectedRecipient:
    """One recipient (`email`, `metadata`) checked as a campaign's are; `where` names it in an error."""
    return _recipient(r, where)


def _place(where: str | int) -> str:
    return f"recipients[{where}]" if isinstance(where, int) else where


def parse_precompile_message(raw: str | bytes | dict[str, Any]) -> PrecompileRequest:
    """Validate a PrecompileEmail message.

    Raises MessageInvalid when the envelope is unusable; otherwise returns the request with its
    good recipients and, separately, the rejected ones with their reasons.
    """
    d = _json_object(raw)
    errors: list[FieldError] = []
    user_id = id_field(d, "userId", "userId", errors)
    plan = d.get("userPlan", "paid")
    if plan is None:
        plan = "paid"
    if plan not in PLANS:
        errors.append(FieldError("userPlan", f"must be one of {', '.join(PLANS)}"))
    sender = parse_sender(d, errors)
    campaign = _campaign(d, errors)
    raw_recipients, single = _recipient_list(d, errors)
    if errors or sender is None or campaign is None:
        raise MessageInvalid(errors)
    good, rejected = _recipients(raw_recipients, single)
    return PrecompileRequest(
        user_id=user_id,
        plan="paid" if plan == "paid" and sender.is_paid else "free",
        sender=sender,
        campaign=campaign,
        recipients=good,
        rejected=rejected,
    )


def _json_object(raw: str | bytes | dict[str, Any]) -> dict[str, Any]:
    """The message as a JSON object of valid Unicode, or MessageInvalid saying why not."""
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
    if isinstance(raw, str) and (not raw.isascii() or SURROGATE_ESCAPE.search(raw)):
        where = lone_surrogate(d, "")
        if where is not None:
            raise MessageInvalid([FieldError(where or "message", "not valid Unicode (a lone UTF-16 surrogate)")])
    return d


def _recipient_list(d: dict[str, Any], errors: list[FieldError]) -> tuple[list[object], bool]:
    """The recipients as given, and whether as one `recipient` (named so in errors) or `recipients[i]`."""
    one, many = d.get("recipient"), d.get("recipients")
    if one is not None and many is not None:
        errors.append(FieldError("recipients", "give either recipient or recipients, not both"))
    elif many is not None:
        if not isinstance(many, list) or not many:
            errors.append(FieldError("recipients", "must be a non-empty list"))
        elif len(many) > MAX_RECIPIENTS_PER_MESSAGE:
            errors.append(FieldError("recipients", f"more than {MAX_RECIPIENTS_PER_MESSAGE} in one message"))
        else:
            return many, False
    elif one is not None:
        return [one], True
    else:
        errors.append(FieldError("recipient", "is required"))
    return [], False


def _recipients(raw_recipients: list[object], single: bool) -> tuple[list[Recipient], list[RejectedRecipient]]:
    """Each recipient checked alone; the same address twice in one message is one recipient."""
    good: list[Recipient] = []
    rejected: list[RejectedRecipient] = []
    seen: set[str] = set()
    small = _small_metadata(raw_recipients)
    for i, r in enumerate(raw_recipients):
        parsed = _recipient(r, "recipient" if single else i, i in small)
        if isinstance(parsed, RejectedRecipient):
            rejected.append(parsed)
        elif parsed.key not in seen:
            seen.add(parsed.key)
            good.append(parsed)
    return good, rejected


def envelope_ids(raw: str | bytes | dict[str, Any]) -> tuple[str | None, str | None]:
    """Best-effort (userId, campaign.id) of a message that failed validation, for recording (a digest
    event's digest.id: its rejections are listed under the digest as a campaign's are under the campaign)."""
    try:
        d = json.loads(raw) if isinstance(raw, str | bytes) else raw
        user, camp = d.get("userId"), (d.get("campaign") or d.get("digest") or {}).get("id")
        return (user if is_id(user) else None, camp if is_id(camp) else None)
    except (ValueError, AttributeError, TypeError, RecursionError):
        return None, None
