"""Emulator: SQS's limits on what a send carries, refused at the local endpoint as SQS refuses them.

moto takes any character in a message body and counts a message's size in characters, so a body with
U+FFFF, or of 400,000 three-byte characters (1,200,000 bytes), was queued locally and would be refused by
SQS. These are checked before moto sees the request (on the short path, `sqs_wire`, and on moto's own);
each decision is data: a `Refusal` of the whole request, or the entries of a batch SQS would fail.

- Characters (SendMessage's and SendMessageBatch's documentation): a body may hold only #x9 | #xA | #xD |
  #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF. SendMessage: InvalidMessageContents (botocore's
  model), "Invalid binary character '#xFFFF' was found in the message body, the set of allowed characters
  is #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]." Confirmed (the message, from
  reports of 2019 to 2026, with '#x7', '#x1', '#xFFFF': the first such character, upper-case hex, no
  padding); its JSON `__type` (com.amazonaws.sqs#InvalidMessageContents, the model's shape id) is assumed.
  SendMessageBatch: the model documents no error of an entry for it. An entry with such a character is
  failed alone, as a BatchResultErrorEntry {"Code": "InvalidMessageContents", "SenderFault": true} with the
  same message, and the others are queued: UNVERIFIED (chosen; not seen from AWS).
- Size (the same pages, and the quotas page): at most 1 MiB = 1,048,576 bytes of UTF-8, or the queue's
  MaximumMessageSize, for a message and for the sum of a batch's entries, each body with its message
  attributes (name, data type and value). SendMessage over it: InvalidParameterValue, "One or more
  parameters are invalid. Reason: Message must be shorter than 1048576 bytes." Confirmed (HTTP 400, the
  JSON `__type` com.amazon.coral.service#InvalidParameterValueException, Type Sender; the message from
  reports with 262144 and, since the limit rose, 1048576). SendMessageBatch over it: BatchRequestTooLong
  (the model), code AWS.SimpleQueueService.BatchRequestTooLong, "Batch requests cannot be longer than
  1048576 bytes. You have sent 1200000 bytes." Confirmed (a report checked against AWS in 2026).

Not checked: message attribute values' characters (our code sends one Number attribute, digits only);
which check AWS makes first when a request breaks several (here: the batch's size, then each entry's
characters; for SendMessage its size, then its characters). In the Query protocol (form bodies, older
SDKs) a whole request is refused alike, but a batch entry with a refused character is not failed: every
SDK of ours speaks JSON.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

Response = tuple[int, dict[str, str], bytes]

MAX_MESSAGE_BYTES = 1_048_576  # 1 MiB: a message, and a batch's entries together
SENDS = frozenset({"SendMessage", "SendMessageBatch"})

_REFUSED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ASCII_REFUSED = bytes(c for c in range(0x20) if c not in (0x9, 0xA, 0xD))  # what ASCII text can hold of them
_ALLOWED = "#x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]"
_JSON = "application/x-amz-json-1.0"
_XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"


@dataclass(frozen=True)
class Refusal:
    """SQS's answer instead of the request's: an error of the JSON protocol (or, rendered, the Query one)."""

    code: str  # the code SDKs read (x-amzn-query-error; the Query protocol's <Code>)
    shape: str  # the JSON protocol's __type
    message: str

    def json(self) -> Response:
        headers = {
            "Content-Type": _JSON,
            "x-amzn-query-error": f"{self.code};Sender",
            "x-amzn-RequestId": str(uuid.uuid4()),
        }
        return 400, headers, json.dumps({"__type": self.shape, "message": self.message}).encode()

    def xml(self) -> Response:
        body = (
            f'<?xml version="1.0"?><ErrorResponse xmlns="{_XMLNS}"><Error><Type>Sender</Type>'
            f"<Code>{self.code}</Code><Message>{escape(self.message)}</Message><Detail/></Error>"
            f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )
        return 400, {"Content-Type": "text/xml"}, body.encode()


@dataclass(frozen=True)
class BatchVerdict:
    """What SQS makes of a SendMessageBatch: refused whole, or these entries failed and the rest queued."""

    refusal: Refusal | None = None
    failed: list[dict[str, Any]] = field(default_factory=list)  # BatchResultErrorEntry, in the answer's shape
    entries: list[dict[str, Any]] = field(default_factory=list)  # the entries to queue


def refused_character(text: str) -> str | None:
    """The first character SQS refuses in `text`, or None. ASCII text (which CPython knows at no cost) is
    looked at as bytes, five times faster than the pattern, which non-ASCII text needs."""
    if text.isascii():
        raw = text.encode("ascii")
        if len(raw.translate(None, _ASCII_REFUSED)) == len(raw):
            return None
    m = _REFUSED.search(text)
    return m.group() if m else None


def utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def attributes_size(attributes: Any) -> int:
    """What message attributes add to a message's size: each name, data type and value, in bytes."""
    if not isinstance(attributes, dict):
        return 0
    size = 0
    for name, value in attributes.items():
        if not isinstance(value, dict):
            continue
        size += utf8_size(str(name)) + utf8_size(str(value.get("DataType", "")))
        if isinstance(value.get("StringValue"), str):
            size += utf8_size(value["StringValue"])
        elif isinstance(value.get("BinaryValue"), str):  # base64 in the JSON protocol
            with contextlib.suppress(ValueError):  # binascii.Error is one
                size += len(base64.b64decode(value["BinaryValue"]))
    return size


def send_refusal(params: dict[str, Any], limit: int = MAX_MESSAGE_BYTES) -> Refusal | None:
    """SQS's refusal of a SendMessage (its JSON parameters), or None. A body that is missing or not text is
    left to moto."""
    body = params.get("MessageBody")
    if not isinstance(body, str):
        return None
    attributes = params.get("MessageAttributes")
    if (len(body) * 4 > limit or attributes) and utf8_size(body) + attributes_size(attributes) > limit:
        return too_long(limit)
    bad = refused_character(body)
    return invalid_contents(bad) if bad is not None else None


def batch_verdict(params: dict[str, Any], limit: int = MAX_MESSAGE_BYTES) -> BatchVerdict:
    """What SQS makes of a SendMessageBatch (its JSON parameters). Entries moto refuses anyway (none, more
    than ten, not objects, a body not text) are left to it whole."""
    entries = params.get("Entries")
    if not isinstance(entries, list) or not 1 <= len(entries) <= 10:
        return BatchVerdict(entries=entries if isinstance(entries, list) else [])
    if not all(isinstance(e, dict) and isinstance(e.get("MessageBody"), str) for e in entries):
        return BatchVerdict(entries=entries)
    size = _batch_size(entries, limit)
    if size > limit:
        return BatchVerdict(refusal=batch_too_long(size, limit))
    failed, kept = [], []
    for entry in entries:
        bad = refused_character(entry["MessageBody"])
        if bad is None:
            kept.append(entry)
        else:
            failed.append(failed_entry(str(entry.get("Id", "")), invalid_contents(bad)))
    return BatchVerdict(failed=failed, entries=kept)


def _batch_size(entries: list[dict[str, Any]], limit: int) -> int:
    """The batch's size in bytes, exactly when it could be over `limit`; else a bound below it (a character
    is at most four bytes, so most batches need no encoding at all)."""
    chars = sum(len(e["MessageBody"]) for e in entries)
    with_attributes = [e for e in entries if e.get("MessageAttributes")]
    if chars * 4 <= limit and not with_attributes:
        return chars
    return sum(utf8_size(e["MessageBody"]) + attributes_size(e.get("MessageAttributes")) for e in entries)


def invalid_contents(character: str) -> Refusal:
    message = (
        f"Invalid binary character '#x{ord(character):X}' was found in the message body, "
        f"the set of allowed characters is {_ALLOWED}."
    )
    return Refusal("InvalidMessageContents", "com.amazonaws.sqs#InvalidMessageContents", message)


def too_long(limit: int) -> Refusal:
    message = f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
    return Refusal("InvalidParameterValue", "com.amazon.coral.service#InvalidParameterValueException", message)


def batch_too_long(size: int, limit: int) -> Refusal:
    message = f"Batch requests cannot be longer than {limit} bytes. You have sent {size} bytes."
    return Refusal("AWS.SimpleQueueService.BatchRequestTooLong", "com.amazonaws.sqs#BatchRequestTooLong", message)


def failed_entry(entry_id: str, refusal: Refusal) -> dict[str, Any]:
    """A batch entry's failure, as SendMessageBatch's answer lists it (BatchResultErrorEntry)."""
    return {"Id": entry_id, "SenderFault": True, "Code": refusal.code, "Message": refusal.message}


# --- moto's own path (any request the short path left to it) ------------------------------------------


@dataclass(frozen=True)
class Screened:
    """What the endpoint does with a send before moto: answer it here, or give moto `body` (the batch
    without its failed entries) and add `failed` to moto's answer, or (both None) let it through."""

    answer: Response | None = None
    body: bytes | None = None
    failed: list[dict[str, Any]] = field(default_factory=list)


def screen(action: str, body: bytes, json_protocol: bool, limit_of: Callable[[str], int]) -> Screened:
    """SQS's limits on a send that goes to moto: `limit_of` gives a queue's MaximumMessageSize from its URL."""
    if action not in SENDS:
        return Screened()
    params = _json_params(body) if json_protocol else _form_params(body, action)
    if params is None:
        return Screened()
    limit = limit_of(str(params.get("QueueUrl", "")))
    if action == "SendMessage":
        refusal = send_refusal(params, limit)
        return Screened(answer=_render(refusal, json_protocol)) if refusal else Screened()
    verdict = batch_verdict(params, limit)
    if verdict.refusal is not None:
        return Screened(answer=_render(verdict.refusal, json_protocol))
    if not verdict.failed or not json_protocol:
        return Screened()
    if not verdict.entries:  # nothing left for moto to queue
        answer = {"Successful": [], "Failed": verdict.failed}
        return Screened(answer=(200, {"Content-Type": _JSON}, json.dumps(answer).encode()))
    return Screened(body=json.dumps({**params, "Entries": verdict.entries}).encode(), failed=verdict.failed)


def with_failed(answer: bytes, failed: list[dict[str, Any]]) -> bytes:
    """moto's JSON answer to the rest of a batch, with the entries failed before it added."""
    try:
        parsed = json.loads(answer)
    except ValueError:
        return answer
    parsed["Failed"] = [*(parsed.get("Failed") or []), *failed]
    return json.dumps(parsed).encode()


def _render(refusal: Refusal, json_protocol: bool) -> Response:
    return refusal.json() if json_protocol else refusal.xml()


def _json_params(body: bytes) -> dict[str, Any] | None:
    try:
        params = json.loads(body or b"{}")
    except ValueError:
        return None
    return params if isinstance(params, dict) else None


def _form_params(body: bytes, action: str) -> dict[str, Any] | None:
    """A Query-protocol send in the JSON protocol's shape (what the checks read of it)."""
    try:
        form = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        return None
    if action == "SendMessage":
        return {"QueueUrl": form.get("QueueUrl", ""), "MessageBody": form.get("MessageBody"), **_form_attributes(form)}
    entries: dict[str, dict[str, Any]] = {}
    for key, value in form.items():
        parts = key.split(".", 2)
        if parts[0] == "SendMessageBatchRequestEntry" and len(parts) == 3 and parts[2] in ("Id", "MessageBody"):
            entries.setdefault(parts[1], {})[parts[2]] = value
    for n, entry in entries.items():
        entry.update(_form_attributes(form, f"SendMessageBatchRequestEntry.{n}."))
    return {"QueueUrl": form.get("QueueUrl", ""), "Entries": list(entries.values())}


def _form_attributes(form: dict[str, str], prefix: str = "") -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    n = 1
    while f"{prefix}MessageAttribute.{n}.Name" in form:
        p = f"{prefix}MessageAttribute.{n}."
        attributes[form[f"{p}Name"]] = {
            "DataType": form.get(f"{p}Value.DataType", ""),
            "StringValue": form.get(f"{p}Value.StringValue", ""),
        }
        n += 1
    return {"MessageAttributes": attributes} if attributes else {}
