"""Emulator: Lambda's SQS event source poller, for the stack's event source mappings (ses_events' queue).

moto stores an SQS event source mapping but would invoke the function itself, through Docker, on every
send. The local stack stands in for the mapping instead, as Lambda runs it:

- Before polling, the checks CreateEventSourceMapping makes: the function's role may receive, delete and
  read the attributes of the queue, and the queue's visibility timeout is at least the function's timeout
  (or a batch still being handled would be given to a second invocation).
- A poller gathers a batch: up to `BatchSize` messages, for at most `MaximumBatchingWindowInSeconds`
  once the first has arrived, and invokes the function synchronously with the records Lambda sends.
- The function's answer decides what is deleted. It raised: nothing (every record comes back after the
  visibility timeout). It returned: everything, except, with ReportBatchItemFailures, the records its
  `batchItemFailures` name; an answer that names a record not in the batch, or is not of that shape,
  fails the whole batch, as Lambda does.

The poller works on moto's SQS model in this process, as Lambda's pollers work inside AWS: through the
local endpoint, every receive and delete would cost a request's worth of botocore and moto on the CPU the
functions share.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from infra.local.access import allowed
from infra.local.cloudformation import EventSource, StackFunction, TemplateError
from infra.local.lambda_runtime import FunctionCrashed, FunctionRunner, LocalFunction

# Lambda polls a queue with five pollers to start with (or the mapping's MaximumConcurrency, if lower) and
# adds up to 300 a minute while messages are still available. The soak with two here let SES's events wait
# up to 559 s behind each other: each poller invokes one batch at a time. Here five for good: scaling up
# to 20 (session 37) made the soak's starved stacks handle fewer events, not more (55,000 against 92,000 in
# its time; Send events up to 1,429 s late against 820), since the pollers share one process's CPU.
POLLERS = 5
# What a poller waits for a first message in one receive (SQS's long poll; short, so a stop is prompt).
_IDLE_WAIT_S = 1
_POLL_PERMISSIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")


def check_mapping(source: EventSource, fn: StackFunction, visibility_timeout_s: int) -> None:
    """Refuse a mapping Lambda would refuse, with Lambda's reason."""
    for action in _POLL_PERMISSIONS:
        if not allowed(fn.policies, action, source.queue_arn):
            raise TemplateError(
                f"event source {source.queue_arn} -> {fn.name}: the provided execution role does not have "
                f"permissions to call {action.split(':')[1]} on SQS"
            )
    if visibility_timeout_s < fn.timeout_s:
        raise TemplateError(
            f"event source {source.queue_arn} -> {fn.name}: queue visibility timeout: {visibility_timeout_s} "
            f"seconds is less than function timeout: {fn.timeout_s:.0f} seconds"
        )
    if source.batch_size < 1 or (source.batch_size > 10 and source.window_s < 1):
        raise TemplateError(f"event source {source.queue_arn}: batch size {source.batch_size} (over 10 needs a window)")


def sqs_record(message: Any, source: EventSource, region: str) -> dict[str, Any]:
    """The record Lambda gives a function for one SQS message."""
    body = message.body
    return {
        "messageId": message.id,
        "receiptHandle": message.receipt_handle,
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(message.approximate_receive_count),
            "SentTimestamp": str(int(message.sent_timestamp)),
            "SenderId": str(getattr(message, "sender_id", "") or ""),
            "ApproximateFirstReceiveTimestamp": str(int(message.approximate_first_receive_timestamp or 0)),
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode("utf-8")).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": source.queue_arn,
        "awsRegion": region,
    }


def failed_ids(answer: Any, batch: list[str], reports_failures: bool) -> list[str]:
    """The message ids to leave on the queue, from the function's answer (it did not raise)."""
    if not reports_failures or answer is None:
        return []
    failures = answer.get("batchItemFailures") if isinstance(answer, dict) else None
    if failures is None:
        return []  # no list: Lambda takes it as all succeeded
    if not isinstance(failures, list):
        return list(batch)
    ids = [f.get("itemIdentifier") if isinstance(f, dict) else None for f in failures]
    if any(not isinstance(i, str) or i not in batch for i in ids):
        return list(batch)  # an empty, unknown or malformed identifier fails the whole batch
    return [i for i in ids if isinstance(i, str)]


class SqsPoller:
    """The pollers of one event source mapping."""

    def __init__(
        self,
        runner: FunctionRunner,
        fn: LocalFunction,
        source: EventSource,
        backend: Callable[[], Any],
        region: str,
        pollers: int = POLLERS,
    ) -> None:
        self._runner = runner
        self._fn = fn
        self._source = source
        self._backend = backend  # moto's SQS backend of the queue's account and region
        self._region = region
        self._queue = source.queue_arn.rsplit(":", 1)[-1]
        self._pollers = min(pollers, source.max_concurrency or pollers)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.batches = 0  # invocations that returned
        self.records = 0  # records given to them
        self._holding = 0  # messages received and not yet given to an invocation (a batching window's)

    @property
    def handler_name(self) -> str:
        """The handler of the function this mapping invokes: how a test or bench tells `stack.pollers` apart."""
        return self._fn.handler_name

    def start(self) -> None:
        if not self._source.enabled:
            return
        for i in range(self._pollers):
            t = threading.Thread(target=self._poll, daemon=True, name=f"sqs-poller-{self._fn.handler_name}-{i}")
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=_IDLE_WAIT_S + 2)

    def _poll(self) -> None:
        while not self._stop.is_set():
            if self._runner.hurrying:  # stopping to save: what is on the queue stays there for the restart
                time.sleep(0.2)
                continue
            try:
                messages = self._gather()
                if messages:
                    try:
                        self._settle(messages)
                    finally:
                        self._hold(-len(messages))
            except Exception as exc:  # the queue gone, the stack stopping: Lambda's poller keeps trying
                print(f"[lambda] poller of {self._queue}: {exc!r}")
                self._stop.wait(_IDLE_WAIT_S)

    def _gather(self) -> list[Any]:
        """Up to a batch, for at most the batching window from the first message's arrival. Messages in
        hand are in flight on the queue, so the stack's idle checks count them as work left."""
        backend, size = self._backend(), self._source.batch_size
        visibility = int(backend.get_queue(self._queue).visibility_timeout)
        got = list(backend.receive_message(self._queue, min(size, 10), _IDLE_WAIT_S, visibility))
        self._hold(len(got))
        window_ends = time.monotonic() + self._source.window_s
        while got and len(got) < size and time.monotonic() < window_ends and not self._stop.is_set():
            more = list(backend.receive_message(self._queue, min(size - len(got), 10), 1, visibility))
            self._hold(len(more))
            got.extend(more)
        return got

    def _hold(self, n: int) -> None:
        with self._lock:
            self._holding += n

    @property
    def holding(self) -> int:
        """Messages in hand, waiting for their batch to fill or its window to end: work the stack will do,
        though no invocation runs yet and the queue counts them only as in flight."""
        return self._holding

    def _settle(self, messages: list[Any]) -> None:
        """Invoke the function with the batch, then delete what it handled."""
        records = [sqs_record(m, self._source, self._region) for m in messages]
        ids = [r["messageId"] for r in records]
        try:
            answer = self._runner.invoke(self._fn, {"Records": records})
        except (Exception, FunctionCrashed) as exc:
            print(f"[lambda] {self._fn.function_name} failed a batch of {len(ids)}: {exc!r}")
            return  # every record comes back after the visibility timeout
        if isinstance(answer, str | bytes):
            answer = json.loads(answer)
        keep = set(failed_ids(answer, ids, self._source.reports_failures))
        backend = self._backend()
        for record in records:
            if record["messageId"] not in keep:
                backend.delete_message(self._queue, record["receiptHandle"])
        with self._lock:
            self.batches += 1
            self.records += len(records)
