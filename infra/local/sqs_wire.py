"""Accelerator: a short path for the hot SQS calls of standard queues, past moto's generic response layer.

moto parses every request and serialises every response through a generic, model-driven layer that
costs several milliseconds per call; at 10 messages per call that caps the local stack well below
1,000 messages per second. SendMessage(Batch), ReceiveMessage and DeleteMessage(Batch) on standard
queues are answered here instead, in SQS's JSON protocol, by calling the same moto backend methods
(so validation and state are moto's), after SQS's limits that moto does not check (`sqs_limits`: the
characters a body may hold, its size in bytes). Anything unusual (FIFO queues, message attributes,
parameters out of range, an error from the backend) returns None and goes to moto as before.
"""

from __future__ import annotations

import json
from typing import Any

from moto.sqs.models import sqs_backends

from infra.local import sqs_limits
from infra.local.fast_sqs import FastQueue

Response = tuple[int, dict[str, str], bytes]
_HOT = {"SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch"}
_SYSTEM_ATTRIBUTES = (
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
)


def _ok(body: dict[str, Any]) -> Response:
    return 200, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(body).encode()


def handle(target: str, region: str, body: bytes) -> Response | None:
    action = target.removeprefix("AmazonSQS.")
    if action not in _HOT:
        return None
    try:
        params = json.loads(body or b"{}")
        account, name = params["QueueUrl"].rstrip("/").split("/")[-2:]
        backend = sqs_backends[account][region]
        queue = backend.queues.get(name)
    except (ValueError, KeyError, AttributeError):
        return None
    if not isinstance(queue, FastQueue) or queue.fifo_queue:
        return None
    try:
        return _ACTIONS[action](backend, queue, params)
    except Exception:
        return None


def max_message_bytes(region: str, queue_url: str) -> int:
    """The queue's MaximumMessageSize (SQS's 1 MiB for a queue moto does not know)."""
    try:
        account, name = queue_url.rstrip("/").split("/")[-2:]
        return int(sqs_backends[account][region].queues[name].maximum_message_size)
    except (ValueError, KeyError, TypeError, AttributeError):
        return sqs_limits.MAX_MESSAGE_BYTES


def _send_batch(backend: Any, queue: FastQueue, p: dict[str, Any]) -> Response | None:
    entries = p.get("Entries") or []
    if not entries or any("MessageAttributes" in e or "MessageSystemAttributes" in e for e in entries):
        return None
    verdict = sqs_limits.batch_verdict(p, int(queue.maximum_message_size))  # type: ignore[attr-defined]
    if verdict.refusal is not None:
        return verdict.refusal.json()
    keyed = {
        str(i): {**e, "MessageAttributes": {}, "DelaySeconds": e.get("DelaySeconds")}
        for i, e in enumerate(verdict.entries)
    }
    messages, failed = backend.send_message_batch(queue.name, keyed) if keyed else ([], [])
    ok = [{"Id": m.user_id, "MessageId": m.id, "MD5OfMessageBody": m.body_md5} for m in messages]
    return _ok({"Successful": ok, "Failed": [*failed, *verdict.failed]})


def _send(backend: Any, queue: FastQueue, p: dict[str, Any]) -> Response | None:
    if "MessageAttributes" in p or "MessageSystemAttributes" in p or "MessageBody" not in p:
        return None
    refusal = sqs_limits.send_refusal(p, int(queue.maximum_message_size))  # type: ignore[attr-defined]
    if refusal is not None:
        return refusal.json()
    m = backend.send_message(queue.name, p["MessageBody"], delay_seconds=p.get("DelaySeconds"))
    return _ok({"MessageId": m.id, "MD5OfMessageBody": m.body_md5})


def _receive(backend: Any, queue: FastQueue, p: dict[str, Any]) -> Response | None:
    count = int(p.get("MaxNumberOfMessages", 1))
    wait = int(p.get("WaitTimeSeconds", queue.receive_message_wait_time_seconds))  # type: ignore[attr-defined]
    visibility = int(p.get("VisibilityTimeout", queue.visibility_timeout))  # type: ignore[attr-defined]
    if not (1 <= count <= 10 and 0 <= wait <= 20 and 0 <= visibility <= 43200):
        return None
    attribute_names = list(p.get("MessageAttributeNames") or [])
    wanted = set(p.get("AttributeNames", [])) | set(p.get("MessageSystemAttributeNames", []))
    if wanted - {"All", *_SYSTEM_ATTRIBUTES}:
        return None
    messages = backend.receive_message(queue.name, count, wait, visibility, attribute_names)
    out = []
    for m in messages:
        item: dict[str, Any] = {
            "MessageId": m.id,
            "ReceiptHandle": m.receipt_handle,
            "MD5OfBody": m.body_md5,
            "Body": m.body,
        }
        values = {
            "SenderId": m.sender_id,
            "SentTimestamp": str(m.sent_timestamp),
            "ApproximateReceiveCount": str(m.approximate_receive_count),
            "ApproximateFirstReceiveTimestamp": str(m.approximate_first_receive_timestamp),
        }
        attrs = {k: v for k, v in values.items() if "All" in wanted or k in wanted}
        if attrs:
            item["Attributes"] = attrs
        if m.message_attributes:
            item["MessageAttributes"] = m.message_attributes
            item["MD5OfMessageAttributes"] = m.attribute_md5
        out.append(item)
    return _ok({"Messages": out} if out else {})


def _delete(backend: Any, queue: FastQueue, p: dict[str, Any]) -> Response | None:
    backend.delete_message(queue.name, p["ReceiptHandle"])
    return _ok({})


def _delete_batch(backend: Any, queue: FastQueue, p: dict[str, Any]) -> Response | None:
    entries = p.get("Entries") or []
    handles = [e["ReceiptHandle"] for e in entries]
    if not entries or len(entries) > 10 or len(set(handles)) != len(handles):
        return None
    success, failed = backend.delete_message_batch(queue.name, entries)
    return _ok({"Successful": [{"Id": i} for i in success], "Failed": failed})


_ACTIONS = {
    "SendMessageBatch": _send_batch,
    "SendMessage": _send,
    "ReceiveMessage": _receive,
    "DeleteMessage": _delete,
    "DeleteMessageBatch": _delete_batch,
}
