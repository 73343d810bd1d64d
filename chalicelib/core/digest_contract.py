"""Digest events on the PrecompileEmail topic, parsed and validated (docs/digests.md).

A message with a `digest` object is a digest event, not a campaign: items for recipients (`item` with one
`recipient`, or `recipients: [...]` each with an `item` or `items`), `retract` (item ids no longer
applicable), or the digest's definition alone (subject, body, schedule, window, maxItems), which later
item events may leave out. As for campaigns, problems with the envelope reject the whole message and a
bad recipient or item rejects only itself, with the field and the reason.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from chalicelib.core import cron
from chalicelib.core.contract import (
    MAX_ID_LENGTH,
    MAX_METADATA_DEPTH,
    MAX_RECIPIENTS_PER_MESSAGE,
    MAX_SUBJECT_TEMPLATE_BYTES,
    MAX_TEMPLATE_BYTES,
    Recipient,
    RejectedRecipient,
    Sender,
    parse_instant,
)
from chalicelib.core.errors import FieldError, MessageInvalid
from chalicelib.core.fields import METADATA_SIZE, id_field, nests_beyond, object_field, text_field
from chalicelib.core.message_parser import check_recipient, parse_sender

MAX_ITEMS_PER_DIGEST = 500
DEFAULT_MAX_ITEMS = 50
MAX_ITEM_DATA_BYTES = 8 * 1024
MAX_ITEMS_PER_MESSAGE = 1000
MAX_RETRACTS_PER_MESSAGE = 1000
# A digest's campaigns are `<digest id>-<period>`, which must be ids too.
MAX_DIGEST_ID_LENGTH = MAX_ID_LENGTH - len("-20261125T1300Z")
MAX_ITEM_AHEAD_S = 86400
MIN_WINDOW_S = 3600
MAX_WINDOW_S = 35 * 86400
_WINDOW_RE = re.compile(r"^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?)?\Z", re.ASCII)


@dataclass(frozen=True)
class DigestDefinition:
    """What a digest email is: its templates, when it goes out, how long an item stays for it.

    Every field but `id` may be missing from an item event, which then uses the stored definition."""

    id: str
    subject: str | None = None
    body: str | None = None
    schedule: str | None = None
    window_s: float | None = None
    max_items: int | None = None

    @property
    def complete(self) -> bool:
        return None not in (self.subject, self.body, self.schedule, self.window_s)

    def merged_over(self, stored: DigestDefinition | None) -> DigestDefinition:
        """This definition's fields, the stored one's where this one says nothing."""
        if stored is None:
            return self
        return DigestDefinition(
            self.id,
            self.subject if self.subject is not None else stored.subject,
            self.body if self.body is not None else stored.body,
            self.schedule if self.schedule is not None else stored.schedule,
            self.window_s if self.window_s is not None else stored.window_s,
            self.max_items if self.max_items is not None else stored.max_items,
        )

    @property
    def says_something(self) -> bool:
        return any(v is not None for v in (self.subject, self.body, self.schedule, self.window_s, self.max_items))


@dataclass(frozen=True)
class Item:
    """One event for one recipient's digest: `at` is when it happened (epoch seconds)."""

    id: str
    type: str
    at: float
    data: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "type": self.type, "at": self.at, "data": self.data}, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> Item:
        d = json.loads(raw)
        return cls(str(d["id"]), str(d["type"]), float(d["at"]), dict(d["data"]))


@dataclass(frozen=True)
class RecipientItems:
    recipient: Recipient
    items: list[Item]


@dataclass(frozen=True)
class DigestRequest:
    """A validated digest event: the definition (whole or in part), items per recipient, retractions."""

    user_id: str
    sender: Sender | None
    digest: DigestDefinition
    recipients: list[RecipientItems] = field(default_factory=list)
    retract: list[str] = field(default_factory=list)
    rejected: list[RejectedRecipient] = field(default_factory=list)
    # Recipients named with `retract` and no items: a retraction is of the item for every recipient, so
    # naming one does not narrow it. Kept to say so in the answer and the log, never silently.
    retract_named: list[str] = field(default_factory=list)


def is_digest_event(d: dict[str, Any]) -> bool:
    return "digest" in d


def parse_window(value: object) -> float:
    """`window`: an ISO 8601 duration in weeks, days, hours, minutes (`P7D`, `P1W`, `PT12H`)."""
    if not isinstance(value, str) or not (m := _WINDOW_RE.match(value.strip().upper())) or not any(m.groups()):
        raise ValueError("must be an ISO 8601 duration in weeks, days, hours or minutes (e.g. P7D)")
    w, d, h, mi = (int(g or 0) for g in m.groups())
    seconds = float(w * 7 * 86400 + d * 86400 + h * 3600 + mi * 60)
    if not MIN_WINDOW_S <= seconds <= MAX_WINDOW_S:
        raise ValueError(f"must be between {MIN_WINDOW_S // 3600} hour and {MAX_WINDOW_S // 86400} days")
    return seconds


def _definition(d: dict[str, Any], errors: list[FieldError]) -> DigestDefinition | None:
    g = object_field(d, "digest", "digest", errors)
    if not g:
        return None
    before = len(errors)
    did = id_field(g, "id", "digest.id", errors)
    if len(did) > MAX_DIGEST_ID_LENGTH:  # its campaigns are `<id>-<period>`, which must be ids too
        errors.append(FieldError("digest.id", f"longer than {MAX_DIGEST_ID_LENGTH} characters"))
    subject = body = schedule = None
    window = max_items = None
    if g.get("subject") is not None:
        subject = text_field(g, "subject", "digest.subject", errors, max_bytes=MAX_SUBJECT_TEMPLATE_BYTES)
    if g.get("body") is not None:
        body = text_field(g, "body", "digest.body", errors, max_bytes=MAX_TEMPLATE_BYTES)
    if g.get("schedule") is not None:
        try:
            if not isinstance(g["schedule"], str):
                raise ValueError("must be a string, an EventBridge cron expression")
            schedule = cron.check(g["schedule"], time.time())
            gap = cron.shortest_gap(schedule, time.time())
            if gap is not None and gap < MIN_WINDOW_S:
                raise ValueError("fires more often than once an hour (a digest mails at most hourly)")
        except ValueError as exc:
            errors.append(FieldError("digest.schedule", str(exc)))
    if g.get("window") is not None:
        try:
            window = parse_window(g["window"])
        except ValueError as exc:
            errors.append(FieldError("digest.window", str(exc)))
    if g.get("maxItems") is not None:
        n = g["maxItems"]
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ITEMS_PER_DIGEST:
            errors.append(FieldError("digest.maxItems", f"must be a whole number from 1 to {MAX_ITEMS_PER_DIGEST}"))
        else:
            max_items = n
    if len(errors) > before:
        return None
    return DigestDefinition(did, subject, body, schedule, window, max_items)


def parse_item(raw: object, where: str) -> Item:
    """One item, or ValueError naming the field (`recipients[2].items[0].at: ...`)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: must be an object")
    errors: list[FieldError] = []
    iid = id_field(raw, "id", f"{where}.id", errors)
    kind = raw.get("type", "")
    if not isinstance(kind, str) or len(kind) > 128:
        errors.append(FieldError(f"{where}.type", "must be a string of at most 128 characters"))
    at = 0.0
    try:
        at = parse_instant(raw.get("at"))
        if at > time.time() + MAX_ITEM_AHEAD_S:
            # An item is kept until `at` + window, a retraction for a window from when it came: an item
            # dated far ahead would outlive its retraction and be mailed after all.
            raise ValueError("more than a day in the future (when the event happened, not when it will)")
    except ValueError as exc:
        errors.append(FieldError(f"{where}.at", str(exc)))
    data = raw.get("data", {})
    if data is None:
        data = {}
    if not isinstance(data, dict):
        errors.append(FieldError(f"{where}.data", "must be an object"))
    elif nests_beyond(data, MAX_METADATA_DEPTH):  # before anything walks it recursively (its size, its JSON)
        errors.append(FieldError(f"{where}.data", f"nested more than {MAX_METADATA_DEPTH} levels"))
    elif len(METADATA_SIZE.encode(data)) > MAX_ITEM_DATA_BYTES:
        errors.append(FieldError(f"{where}.data", f"larger than {MAX_ITEM_DATA_BYTES} bytes"))
    if errors:
        raise ValueError("; ".join(str(e) for e in errors))
    return Item(iid, str(kind), at, data)


def _recipient_items(raw: object, where: str) -> RecipientItems | RejectedRecipient:
    """A recipient with its items (`item` or `items`), or the whole recipient rejected with why."""
    checked = check_recipient(raw, where)
    if isinstance(checked, RejectedRecipient):
        return checked
    assert isinstance(raw, dict)
    one, many = raw.get("item"), raw.get("items")
    if (one is None) == (many is None):
        return RejectedRecipient(checked.email, f"{where}: give one of item or items")
    if many is not None and (not isinstance(many, list) or not many or len(many) > MAX_ITEMS_PER_MESSAGE):
        return RejectedRecipient(checked.email, f"{where}.items: must be a list of 1 to {MAX_ITEMS_PER_MESSAGE} items")
    raw_items = [(one, f"{where}.item")] if many is None else [(it, f"{where}.items[{i}]") for i, it in enumerate(many)]
    try:
        items = [parse_item(it, path) for it, path in raw_items]
    except ValueError as exc:
        return RejectedRecipient(checked.email, str(exc))
    return RecipientItems(checked, items)


def parse_digest_message(d: dict[str, Any]) -> DigestRequest:
    """Validate a digest event (a JSON object with `digest`); MessageInvalid when its envelope is unusable."""
    errors: list[FieldError] = []
    user_id = id_field(d, "userId", "userId", errors)
    sender = parse_sender(d, errors) if d.get("sender") is not None else None
    definition = _definition(d, errors)
    retract = _retractions(d, errors)
    one, many = d.get("recipient"), d.get("recipients")
    if one is not None and many is not None:
        errors.append(FieldError("recipients", "give either recipient or recipients, not both"))
    if many is not None and (not isinstance(many, list) or not many or len(many) > MAX_RECIPIENTS_PER_MESSAGE):
        errors.append(FieldError("recipients", f"must be a list of 1 to {MAX_RECIPIENTS_PER_MESSAGE} recipients"))
    if one is not None and not retract and "item" not in d and "items" not in d and not _has_items(one):
        errors.append(FieldError("item", "is required with a recipient"))
    if errors or definition is None:
        raise MessageInvalid(errors)
    good: list[RecipientItems] = []
    rejected: list[RejectedRecipient] = []
    named: list[str] = []
    if one is not None:
        single = dict(one) if isinstance(one, dict) else one
        if isinstance(single, dict):  # the top-level `item`/`items` belong to the one recipient
            for key in ("item", "items"):
                if key in d:
                    single[key] = d[key]
        entries = [(single, "recipient")]
    else:
        entries = [(r, f"recipients[{i}]") for i, r in enumerate(many or [])]
    for raw, where in entries:
        if retract and not _has_items(raw):
            # The recipient a retraction names: it does not narrow it (an item is one event, in every digest
            # it is in); the answer names it, so that the wider scope is seen.
            named.append(str(raw.get("email", "")) if isinstance(raw, dict) else "")
            continue
        checked = _recipient_items(raw, where)
        (rejected if isinstance(checked, RejectedRecipient) else good).append(checked)  # type: ignore[arg-type]
    if not good and not retract and not rejected and not definition.says_something:
        raise MessageInvalid([FieldError("digest", "an event needs items, retract, or the digest's definition")])
    return DigestRequest(user_id, sender, definition, good, retract, rejected, named)


def _has_items(recipient: object) -> bool:
    return isinstance(recipient, dict) and ("item" in recipient or "items" in recipient)


def _retractions(d: dict[str, Any], errors: list[FieldError]) -> list[str]:
    """`retract`: one item id, or a list of them."""
    raw = d.get("retract")
    if raw is None:
        return []
    ids = [raw] if isinstance(raw, str) else raw
    if not isinstance(ids, list) or not ids or len(ids) > MAX_RETRACTS_PER_MESSAGE:
        errors.append(FieldError("retract", f"must be an item id or a list of 1 to {MAX_RETRACTS_PER_MESSAGE}"))
        return []
    out = []
    for i, v in enumerate(ids):
        holder = {"id": v}
        before = len(errors)
        iid = id_field(holder, "id", f"retract[{i}]" if not isinstance(raw, str) else "retract", errors)
        if len(errors) == before:
            out.append(iid)
    return out
