"""Emulator: the metrics SQS publishes to CloudWatch (namespace AWS/SQS), which moto never does.

SQS publishes, once a minute per queue, `ApproximateNumberOfMessagesVisible`, `...NotVisible`, `...Delayed`
and `ApproximateAgeOfOldestMessage` (seconds since the oldest message still in the queue was sent) with the
dimension `QueueName`. The operator's page reads the age from CloudWatch with GetMetricData, as it does on
AWS; this puts the same datapoints into moto's CloudWatch, read from moto's queues in this process.

A minute here is `60 * time_scale` seconds, as for the alarm evaluator (a demo does not wait a minute per
step). Only queues that hold messages are published: SQS publishes an empty queue's zeros too, but every
reader here (the sweeper's measure, the operator's page) asks only about queues that hold email, and the
alarm evaluator reads the queues themselves; the zeros of a hundred idle queues a second cost the whole
stack CPU for nothing. moto keeps every datapoint in one list for ever, and each read scans all of it:
datapoints of AWS/SQS older than `KEEP_S` are dropped, at most once a `FORGET_EVERY_S` (CloudWatch keeps
one-minute datapoints 15 days: nothing here reads back further than 20 minutes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from infra.local.periodic import Periodic

NAMESPACE = "AWS/SQS"
KEEP_S = 30 * 60.0
FORGET_EVERY_S = 60.0


@dataclass(frozen=True)
class QueueSample:
    name: str
    visible: int
    not_visible: int
    delayed: int
    oldest_sent_ms: int | None  # when the oldest message still in the queue was sent (None: empty)


def sample_of(name: str, queue: Any) -> QueueSample:
    """One moto queue's counts and its oldest message (messages are kept in the order they were sent; a FIFO
    queue's list too)."""
    by_id = getattr(queue, "_by_id", None)
    if by_id is not None and not getattr(queue, "fifo_queue", False):
        first = next(iter(list(by_id.values())[:1]), None)
        oldest = first.sent_timestamp if first is not None else None
    else:
        stamps = [m.sent_timestamp for m in list(queue._messages) if m.sent_timestamp]
        oldest = min(stamps) if stamps else None
    return QueueSample(
        name,
        int(queue.approximate_number_of_messages),
        int(queue.approximate_number_of_messages_not_visible),
        int(queue.approximate_number_of_messages_delayed),
        int(oldest) if oldest else None,
    )


def datapoints(sample: QueueSample, now_s: float) -> list[dict[str, Any]]:
    """The queue's minute of metrics, as SQS publishes them."""
    at = datetime.fromtimestamp(now_s, UTC).replace(tzinfo=None)  # moto keeps UTC times naive
    age = max(0.0, now_s - sample.oldest_sent_ms / 1000) if sample.oldest_sent_ms else 0.0
    values = {
        "ApproximateNumberOfMessagesVisible": (float(sample.visible), "Count"),
        "ApproximateNumberOfMessagesNotVisible": (float(sample.not_visible), "Count"),
        "ApproximateNumberOfMessagesDelayed": (float(sample.delayed), "Count"),
        "ApproximateAgeOfOldestMessage": (round(age), "Seconds"),
    }
    dims = [{"Name": "QueueName", "Value": sample.name}]
    return [
        {"MetricName": name, "Dimensions": dims, "Timestamp": at, "Value": value, "Unit": unit}
        for name, (value, unit) in values.items()
    ]


class SqsMetrics(Periodic):
    name = "sqs-metrics"

    def __init__(
        self,
        queues: Callable[[], Iterable[tuple[str, Any]]],
        cloudwatch_backend: Callable[[], Any],
        *,
        minute_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(minute_s)
        self._queues = queues
        self._backend = cloudwatch_backend
        self._clock = clock
        self._lock = threading.Lock()
        self._forgot_at = float("-inf")

    def tick(self) -> None:
        now = self._clock()
        backend = self._backend()
        with self._lock:
            for name, queue in list(self._queues()):
                sample = sample_of(name, queue)
                if sample.visible or sample.not_visible or sample.delayed:
                    backend.put_metric_data(NAMESPACE, datapoints(sample, now))
            if now - self._forgot_at >= FORGET_EVERY_S:
                self._forgot_at = now
                forget_before(backend, NAMESPACE, now - KEEP_S)


def forget_before(backend: Any, namespace: str, cutoff_s: float) -> None:
    """Drop the namespace's datapoints older than the cutoff from moto's CloudWatch (it keeps all for ever)."""
    cutoff = datetime.fromtimestamp(cutoff_s, UTC).replace(tzinfo=None)
    kept = [d for d in backend.metric_data if d.namespace != namespace or _when(d) >= cutoff]
    if len(kept) != len(backend.metric_data):
        backend.metric_data = kept


def _when(datum: Any) -> datetime:
    at = datum.timestamp
    if not isinstance(at, datetime):
        at = datetime.fromisoformat(str(at).replace("Z", "+00:00"))
    return at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo else at
