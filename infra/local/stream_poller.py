"""Emulator: Lambda's DynamoDB stream poller, for the stack's stream event source mappings (the ledger's).

moto keeps a table's stream as a list of records on its shard, and would invoke a mapped function itself,
through Docker. The local stack stands in for the mapping, as Lambda runs one over a stream:

- Before polling, the checks CreateEventSourceMapping makes: the function's role may describe the stream,
  read its shards and records (`dynamodb:DescribeStream`, `GetShardIterator`, `GetRecords`), list streams,
  and send to the on-failure destination (an SQS queue); the settings are within Lambda's ranges.
- One poller per shard (moto has one), so records reach the function in the order they were written: a
  batch of up to `BatchSize`, gathered for at most `MaximumBatchingWindowInSeconds`, from
  `StartingPosition` (TRIM_HORIZON: the oldest record kept; LATEST: what is written after the start).
- The function returned: the batch is done, or, with ReportBatchItemFailures, done up to the first record
  its `batchItemFailures` names by sequence number; the rest is the next batch, and a failed attempt of it.
- The function raised: with BisectBatchOnFunctionError the batch is halved and each half tried (a split
  spends no retry); a batch of one, or without bisecting, is tried again after a second.
- Given up (Lambda's documented limits): a batch that failed `MaximumRetryAttempts` retries
  (`RetryAttemptsExhausted`), and records older than `MaximumRecordAgeInSeconds`, before they are given to
  the function (`RecordAgeExceeded`, the condition LocalStack and others use; not in AWS's pages). Their
  shard pointers go to the on-failure destination as Lambda's record (`DDBStreamBatchInfo`: the shard,
  the first and last sequence numbers, their times, the batch's size and the stream), never the records:
  the poller goes on past them. Without limits (-1) a batch is retried until the stream drops it.
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
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from infra.local import identity
from infra.local.access import allowed
from infra.local.cloudformation import StackFunction, StreamSource, TemplateError
from infra.local.fast_dynamodb import STREAM_LOCK
from infra.local.lambda_runtime import FunctionCrashed, FunctionRunner, LocalFunction

_IDLE_WAIT_S = 0.2
_RETRY_WAIT_S = 1.0
_POLL_PERMISSIONS = ("dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords")
RETRIES_EXHAUSTED = "RetryAttemptsExhausted"
AGE_EXCEEDED = "RecordAgeExceeded"

# Sends Lambda's record of a batch given up on to the mapping's on-failure destination (an SQS queue's ARN).
OnFailure = Callable[[LocalFunction, str, dict[str, Any]], None]


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
    _check_limits(source)
    if source.on_failure is not None:
        _check_destination(source, fn)


def _check_limits(source: StreamSource) -> None:
    """MaximumRetryAttempts and MaximumRecordAgeInSeconds within the ranges Lambda's API reference gives."""
    if not -1 <= source.max_retries <= 10000:
        raise TemplateError(
            f"event source {source.stream_arn}: MaximumRetryAttempts {source.max_retries} (-1 to 10,000)"
        )
    if source.max_record_age_s != -1 and not 60 <= source.max_record_age_s <= 604800:
        raise TemplateError(
            f"event source {source.stream_arn}: MaximumRecordAgeInSeconds {source.max_record_age_s} "
            "(-1, or 60 to 604,800)"
        )


def _check_destination(source: StreamSource, fn: StackFunction) -> None:
    """The on-failure destination is an SQS queue (the local stack's only kind) the role may send to."""
    destination = str(source.on_failure)
    if ":sqs:" not in destination:
        raise TemplateError(f"event source {source.stream_arn}: on-failure destination {destination} is not a queue")
    if not allowed(fn.policies, "sqs:SendMessage", destination):
        raise TemplateError(
            f"event source {source.stream_arn} -> {fn.name}: the provided execution role does not have "
            f"permissions to call SendMessage on {destination}"
        )


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


def given_up_record(
    records: list[dict[str, Any]],
    source: StreamSource,
    fn: LocalFunction,
    shard_id: str,
    condition: str,
    invocations: int,
    function_error: str | None,
) -> dict[str, Any]:
    """What Lambda sends a stream's on-failure destination for a batch it gave up on: where the records
    are in the stream (DDBStreamBatchInfo), never the records themselves."""
    first, last = records[0]["dynamodb"], records[-1]["dynamodb"]
    _arn, _aws, _ddb, region, account, _rest = source.stream_arn.split(":", 5)
    response: dict[str, Any] = {"statusCode": 200, "executedVersion": "$LATEST"}
    if function_error:
        response["functionError"] = function_error
    return {
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": f"arn:aws:lambda:{region}:{account}:function:{fn.function_name}",
            "condition": condition,
            "approximateInvokeCount": invocations,
        },
        "responseContext": response,
        "version": "1.0",
        "timestamp": _iso(time.time(), ms=True),
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": first["SequenceNumber"],
            "endSequenceNumber": last["SequenceNumber"],
            "approximateArrivalOfFirstRecord": _iso(first.get("ApproximateCreationDateTime")),
            "approximateArrivalOfLastRecord": _iso(last.get("ApproximateCreationDateTime")),
            "batchSize": len(records),
            "streamArn": source.stream_arn,
        },
    }


def _iso(epoch_s: Any, ms: bool = False) -> str:
    at = datetime.fromtimestamp(float(epoch_s or 0), UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" if ms else at.strftime("%Y-%m-%dT%H:%M:%SZ")


def send_to_queue(fn: LocalFunction, queue_arn: str, record: dict[str, Any]) -> None:
    """Lambda's delivery of a given-up record to an SQS queue, with the function's role, by the queue's ARN."""
    from chalicelib.core import aws

    _arn, _aws, _sqs, region, account, name = queue_arn.split(":", 5)
    sqs = aws.client("sqs", region)
    with identity.acting_as(fn.role):
        sqs.send_message(QueueUrl=f"{sqs.meta.endpoint_url}/{account}/{name}", MessageBody=json.dumps(record))


class StreamPoller:
    """The poller of one stream event source mapping."""

    def __init__(
        self,
        runner: FunctionRunner,
        fn: LocalFunction,
        source: StreamSource,
        shard: Callable[[], Any],
        region: str,
        *,
        on_failure: OnFailure = send_to_queue,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._runner = runner
        self._fn = fn
        self._source = source
        self._shard = shard  # moto's StreamShard of the table
        self._region = region
        self._send_on_failure = on_failure
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._busy = False
        self.batches = 0
        self.records = 0
        # The first record not done: the invocations that included it, and the failed ones among them.
        self._head: str | None = None
        self._invocations = 0
        self._failures = 0
        # Bisecting: the next batches are at most `_cap` records, within the `_window` records that failed.
        self._cap = 0
        self._window = 0

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
                again = self.poll_once()
                if again is None:
                    self._stop.wait(_IDLE_WAIT_S)
                elif again:
                    self._stop.wait(_RETRY_WAIT_S)
            except Exception as exc:  # the table gone, the stack stopping: Lambda's poller keeps trying
                print(f"[lambda] stream poller of {self._source.table_name}: {exc!r}")
                self._stop.wait(_RETRY_WAIT_S)

    def _size(self) -> int:
        if self._window > 0:
            return min(self._source.batch_size, self._cap, self._window)
        return self._source.batch_size

    def _gather(self) -> list[Any]:
        size = self._size()
        window_ends = time.monotonic() + self._source.window_s
        while True:
            with STREAM_LOCK:
                batch = list(self._shard().items[:size])
            if not batch or len(batch) >= size or time.monotonic() >= window_ends or self._stop.is_set():
                return batch
            time.sleep(0.05)

    def poll_once(self) -> bool | None:
        """One batch gathered and handled: None if there was none, else whether it comes again (`step`)."""
        batch = self._gather()
        if not batch:
            return None
        self._busy = True
        try:
            return self.step(batch)
        finally:
            self._busy = False

    def step(self, batch: list[Any]) -> bool:
        """One batch from the head of the shard: too old given up on, else given to the function, and what
        it did not finish tried again or given up on. True if the same records come again (after a wait)."""
        records = [stream_record(r, self._source, self._region) for r in batch]
        self._follow(records[0]["dynamodb"]["SequenceNumber"])
        expired = self._expired(records)
        if expired:
            self._give_up(records[:expired], AGE_EXCEEDED, None)
            return False
        self._invocations += 1
        try:
            answer = self._runner.invoke(self._fn, {"Records": records})
        except (Exception, FunctionCrashed) as exc:
            print(f"[lambda] {self._fn.function_name} failed a stream batch of {len(records)}: {exc!r}")
            return self._raised(records)
        if isinstance(answer, str | bytes):
            answer = json.loads(answer)
        numbers = [r["dynamodb"]["SequenceNumber"] for r in records]
        done = done_count(answer, numbers, self._source.reports_failures)
        self._done(done)
        if done == len(records):
            return False
        self._follow(numbers[done], invoked=done > 0)
        return self._failed(records[done:], None)

    def _raised(self, records: list[dict[str, Any]]) -> bool:
        if self._source.bisect and len(records) > 1:  # halved: each half tried, no retry spent
            self._cap = (len(records) + 1) // 2
            self._window = max(self._window, len(records))
            return False
        return self._failed(records, "Unhandled")

    def _failed(self, records: list[dict[str, Any]], function_error: str | None) -> bool:
        """A failed attempt of `records` (the head first): the same records tried again (none written since
        join them), or given up on past the retries."""
        self._failures += 1
        retries = self._source.max_retries
        if retries >= 0 and self._failures > retries:
            self._give_up(records, RETRIES_EXHAUSTED, function_error)
            return False
        self._cap = self._window = len(records)
        return True

    def _expired(self, records: list[dict[str, Any]]) -> int:
        """How many of the batch's first records are older than the mapping's MaximumRecordAgeInSeconds."""
        if self._source.max_record_age_s < 0:
            return 0
        oldest = self._clock() - self._source.max_record_age_s
        n = 0
        for r in records:
            if float(r["dynamodb"].get("ApproximateCreationDateTime") or 0) >= oldest:
                break
            n += 1
        return n

    def _give_up(self, records: list[dict[str, Any]], condition: str, function_error: str | None) -> None:
        """Lambda discards the records and goes on; their pointers go to the on-failure destination."""
        destination = self._source.on_failure
        print(f"[lambda] {self._fn.function_name} gave up on {len(records)} stream records: {condition}")
        record = given_up_record(
            records, self._source, self._fn, self._shard().id, condition, self._invocations, function_error
        )
        if destination is not None:
            try:
                self._send_on_failure(self._fn, destination, record)
            except Exception as exc:  # Lambda drops it too when the destination refuses
                print(f"[lambda] {self._fn.function_name}: could not send to its on-failure destination: {exc!r}")
        self._done(len(records))

    def _follow(self, head: str, invoked: bool = False) -> None:
        """A new first record not done starts its counts afresh (`invoked`: it was in the last invocation)."""
        if head != self._head:
            self._head, self._failures, self._invocations = head, 0, 1 if invoked else 0

    def _done(self, n: int) -> None:
        """The first `n` records done (or given up on): off the shard, and out of a bisected window."""
        self._take(n)
        self.records += n
        self.batches += 1 if n else 0
        self._window = max(0, self._window - n)

    def _take(self, n: int) -> None:
        if n <= 0:
            return
        with STREAM_LOCK:
            shard = self._shard()
            del shard.items[:n]
            shard.starting_sequence_number += n
