"""Putting messages on a queue with SendMessageBatch: 10 per call, within the 1 MiB batch limit.

Only the entries SQS reports as failed are retried (with a short backoff), and any entry its answer leaves
out (a truncated or malformed answer: SQS lists every entry as Successful or Failed); entries that still
fail after the last attempt are returned to the caller, which records them, so nothing vanishes. A retried
entry SQS had in fact queued is a second copy on the queue, which the ledger's claim makes harmless.

`send_copy` is the other way a body goes onto a queue: a received message's fresh copy, put back by the drainer
(chalicelib.send.message_actions) before it deletes the original.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from chalicelib.core.contract import utf8_size
from chalicelib.core.ports import SqsBatchSend, SqsSend

MAX_BATCH_ENTRIES = 10
MAX_BATCH_BYTES = 1024 * 1024
ATTEMPTS = 4


class Outgoing(NamedTuple):
    """One message to queue (a NamedTuple: a frozen dataclass cost a microsecond per recipient to build)."""

    key: str  # the caller's id for this message (the recipient), reported back on failure
    body: str
    delay_seconds: int = 0


@dataclass(frozen=True)
class EnqueueFailure:
    key: str
    reason: str


def batches(messages: Sequence[Outgoing]) -> list[list[Outgoing]]:
    """Group messages into SendMessageBatch calls: at most 10 entries and 1 MiB per call."""
    out: list[list[Outgoing]] = []
    current: list[Outgoing] = []
    size = 0
    for m in messages:
        n = utf8_size(m.body)
        if current and (len(current) == MAX_BATCH_ENTRIES or size + n > MAX_BATCH_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(m)
        size += n
    if current:
        out.append(current)
    return out


class Enqueuer:
    def __init__(self, sqs: SqsBatchSend, sleep: Callable[[float], None] = time.sleep) -> None:
        self._sqs = sqs
        self._sleep = sleep
        self.calls = 0

    def send(self, queue_url: str, messages: Sequence[Outgoing]) -> list[EnqueueFailure]:
        failures: list[EnqueueFailure] = []
        for batch in batches(messages):
            failures.extend(self._send_batch(queue_url, batch))
        return failures

    def _send_batch(self, queue_url: str, batch: list[Outgoing]) -> list[EnqueueFailure]:
        pending = {str(i): m for i, m in enumerate(batch)}
        failed: dict[str, EnqueueFailure] = {}
        for attempt in range(ATTEMPTS):
            if not pending:
                break
            if attempt:
                self._sleep(0.05 * 2**attempt)
            entries = [{"Id": i, "MessageBody": m.body, "DelaySeconds": m.delay_seconds} for i, m in pending.items()]
            self.calls += 1
            resp = self._sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
            retry: dict[str, Outgoing] = {}
            listed: set[str] = set()
            for bad in resp.get("Failed", []):
                listed.add(bad["Id"])
                m = pending[bad["Id"]]
                failed[bad["Id"]] = EnqueueFailure(m.key, f"{bad.get('Code')}: {bad.get('Message')}")
                if not bad.get("SenderFault"):  # our own fault is not fixed by trying again
                    retry[bad["Id"]] = m
            for ok in resp.get("Successful", []):
                failed.pop(ok["Id"], None)
                listed.add(ok["Id"])
            for i, m in pending.items():
                if i not in listed:
                    failed[i] = EnqueueFailure(m.key, "SQS's answer did not list this entry")
                    retry[i] = m
            pending = retry
        return list(failed.values())


def send_copy(
    sqs: SqsSend, queue_url: str, body: str, delay_seconds: int, attributes: dict[str, Any] | None = None
) -> None:
    """A received message's fresh copy onto its queue, as one SendMessage (its receive count starts afresh).

    Raises what SQS raises: the caller deletes the original only once its copy is on the queue, so a
    refusal leaves the original to come back, and nothing is lost."""
    if attributes is None:
        sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay_seconds)
    else:
        sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay_seconds, MessageAttributes=attributes)
