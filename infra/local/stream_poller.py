"""Lambda's DynamoDB stream poller, for the stack's stream event source mappings (the ledger's stream).

moto keeps a table's stream as a list of records on its shard, and would invoke a mapped function itself,
through Docker. The local stack stands in for the mapping, as Lambda runs one over a stream:

- Before polling, the checks CreateEventSourceMapping makes: the function's role may describe the stream,
  read its shards and records (`dynamodb:DescribeStream`, `GetShardIterator`, `GetRecords`), and list
  streams.
- One poller per shard (moto has one), so records reach the function in the order they were written: a
  batch of up to `BatchSize`, gathered for at most `MaximumBatchingWindowInSeconds`, from
  `StartingPosition` (TRIM_HORIZON: the oldest record kept; LATEST: what is written after the start).
- The function raised: the same batch again, after a second (Lambda retries until the records expire;
  the shard waits behind it). It returned: the batch is done, or, with ReportBatchItemFailures, done up to
  the first record its `batchItemFailures` names by sequence number, which starts the next batch.
- Each record as Lambda gives it: the stream's record (moto's), with the region, the stream's ARN, and
  its creation time in epoch seconds.

What is done is taken off moto's shard, so a long run does not keep every write of the ledger in memory.
The shard is read under the lock local transactions hold (infra.local.fast_dynamodb.STREAM_LOCK): a
record of a transaction that is then cancelled is never seen.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from infra.local.access import allowed
from infra.local.cloudformation import StackFunction, StreamSource, TemplateError
from infra.local.fast_dynamodb import STREAM_LOCK
from infra.local.lambda_runtime import FunctionCrashed, FunctionRunner, LocalFunction

_IDLE_WAIT_S = 0.2
_RETRY_WAIT_S = 1.0
_POLL_PERMISSIONS = ("dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords")


def check_stream_mapping(source: StreamSource, fn: StackFunction) -> None:
    """Refuse a mapping Lambda would refuse, with Lambda's reason."""
    needs = [(a, source.stream_arn) for a in _POLL_PERMISSIONS] + [("dynamodb:ListStreams", "*")]
    for action, resource in needs:
        if not allowed(fn.policies, action, resource):
            raise TemplateError(
                f"event source {source.stream_arn} -> {fn.name}: the provided execution role does not have "
                f"permissions to call {action.split(':')[1]} on DynamoDB"
            )
    if source.starting_position not in ("TRIM_HORIZON", "LATEST"):
        raise TemplateError(f"event source {source.stream_arn}: StartingPosition {source.starting_position!r}")
    if not 1 <= source.batch_size <= 10000:
        raise TemplateError(f"event source {source.stream_arn}: batch size {source.batch_size} (1 to 10,000)")


def stream_record(record: Any, source: StreamSource, region: str) -> dict[str, Any]:
    """The record Lambda gives a function for one stream record."""
    raw = record.to_json()
    change = dict(raw["dynamodb"])
    created = change.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        change["ApproximateCreationDateTime"] = int(created.timestamp())
    return {**raw, "eventVersion": "1.1", "awsRegion": region, "eventSourceARN": source.stream_arn, "dynamodb": change}


def done_count(answer: Any, sequence_numbers: list[str], reports_failures: bool) -> int:
    """How many of the batch's records are done, from the function's answer (it did not raise)."""
    if not reports_failures or not isinstance(answer, dict) or answer.get("batchItemFailures") is None:
        return len(sequence_numbers)
    failures = answer["batchItemFailures"]
    if not isinstance(failures, list):
        return 0
    ids = [f.get("itemIdentifier") if isinstance(f, dict) else None for f in failures]
    if any(i not in sequence_numbers for i in ids):
        return 0  # an unknown or malformed identifier: the whole batch again
    return min((sequence_numbers.index(i) for i in ids), default=len(sequence_numbers))  # type: ignore[arg-type]


class StreamPoller:
    """The poller of one stream event source mapping."""

    def __init__(
        self,
        runner: FunctionRunner,
        fn: LocalFunction,
        source: StreamSource,
        shard: Callable[[], Any],
        region: str,
    ) -> None:
        self._runner = runner
        self._fn = fn
        self._source = source
        self._shard = shard  # moto's StreamShard of the table
        self._region = region
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._busy = False
        self.batches = 0
        self.records = 0

    def start(self) -> None:
        if not self._source.enabled:
            return
        if self._source.starting_position == "LATEST":
            self._take(len(self._shard().items))
        self._thread = threading.Thread(target=self._poll, daemon=True, name=f"stream-poller-{self._fn.handler_name}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=_RETRY_WAIT_S + 2)

    @property
    def pending(self) -> int:
        """Records not yet done (the stack's idle checks count them as work left)."""
        return len(self._shard().items) + (1 if self._busy else 0)

    def _poll(self) -> None:
        while not self._stop.is_set():
            if self._runner.hurrying:
                time.sleep(0.2)
                continue
            try:
                batch = self._gather()
                if not batch:
                    self._stop.wait(_IDLE_WAIT_S)
                    continue
                self._busy = True
                try:
                    done = self._invoke(batch)
                finally:
                    self._busy = False
                if done < len(batch):
                    self._stop.wait(_RETRY_WAIT_S)
            except Exception as exc:  # the table gone, the stack stopping: Lambda's poller keeps trying
                print(f"[lambda] stream poller of {self._source.table_name}: {exc!r}")
                self._stop.wait(_RETRY_WAIT_S)

    def _gather(self) -> list[Any]:
        size = self._source.batch_size
        window_ends = time.monotonic() + self._source.window_s
        while True:
            with STREAM_LOCK:
                batch = list(self._shard().items[:size])
            if not batch or len(batch) >= size or time.monotonic() >= window_ends or self._stop.is_set():
                return batch
            time.sleep(0.05)

    def _invoke(self, batch: list[Any]) -> int:
        """Give the function the batch; take what it finished off the shard. Returns how many."""
        records = [stream_record(r, self._source, self._region) for r in batch]
        numbers = [r["dynamodb"]["SequenceNumber"] for r in records]
        try:
            answer = self._runner.invoke(self._fn, {"Records": records})
        except (Exception, FunctionCrashed) as exc:
            print(f"[lambda] {self._fn.function_name} failed a stream batch of {len(records)}: {exc!r}")
            return 0
        if isinstance(answer, str | bytes):
            answer = json.loads(answer)
        done = done_count(answer, numbers, self._source.reports_failures)
        self._take(done)
        self.batches += 1
        self.records += done
        return done

    def _take(self, n: int) -> None:
        if n <= 0:
            return
        with STREAM_LOCK:
            shard = self._shard()
            del shard.items[:n]
            shard.starting_sequence_number += n
