"""The age of the oldest email on any send queue of the stage, as one metric (`OldestQueuedEmailSeconds`):
what the stage's alarm on a stuck queue watches (infra.monitoring), with no alarm per tenant.

SQS does not say a queue's oldest message's age; it publishes it to CloudWatch each minute
(`ApproximateAgeOfOldestMessage`). Each minute the sweeper knows which queues hold email; this reads their
ages from CloudWatch (one GetMetricData per 500 queues, the newest datapoint of the last `LOOK_BACK_MIN`
minutes: an idle queue's metrics come up to 15 minutes late) and puts the largest as one datapoint (0 when
no queue holds email, so that the alarm goes back to OK). Queues that hold no email cost nothing.

Costs: GetMetricData bills $0.01 per 1,000 metrics asked, so a stage with 100 queues holding email all
month pays about $43 for it; PutMetricData one request a minute ($0.43 a month) and one custom metric ($0.30).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.core import log

NAMESPACE = "moonsend"
METRIC = "OldestQueuedEmailSeconds"
LOOK_BACK_MIN = 20
QUERIES_PER_CALL = 500  # GetMetricData's most
# Each call needs this much of the function's time left (the client's timeouts are 2 s and 5 s, two tries).
MIN_TIME_LEFT_MS = 15_000


class QueueAge:
    def __init__(self, cloudwatch: Any, stage: str) -> None:
        self._cw = cloudwatch
        self._stage = stage

    def record(self, queues: list[str], remaining_ms: Callable[[], int] = lambda: 60_000) -> float | None:
        """Measure the oldest email's age over `queues` and put it; returns it (seconds). Only with
        MIN_TIME_LEFT_MS of the function's time left before each call: a measure is skipped rather than the
        sweep it follows turned into a timed-out invocation (retried, then a failed invocation). CloudWatch
        refusing is logged, not raised: the sweep did its work, and the next minute measures again."""
        try:
            return self._record(queues, remaining_ms)
        except (ClientError, BotoCoreError, TimeoutError) as exc:
            log.warning("oldest queued email not measured", error=repr(exc), queues=len(queues))
            return None

    def _record(self, queues: list[str], remaining_ms: Callable[[], int]) -> float:
        oldest = max(self.ages(queues, remaining_ms).values(), default=0.0)
        if remaining_ms() < MIN_TIME_LEFT_MS:
            raise TimeoutError("too little of the sweep's time left to put the measure")
        self._cw.put_metric_data(
            Namespace=NAMESPACE,
            MetricData=[
                {
                    "MetricName": METRIC,
                    "Dimensions": [{"Name": "stage", "Value": self._stage}],
                    "Value": oldest,
                    "Unit": "Seconds",
                }
            ],
        )
        if oldest:
            log.info("oldest queued email", seconds=oldest, queues=len(queues))
        return oldest

    def ages(self, queues: list[str], remaining_ms: Callable[[], int] = lambda: 60_000) -> dict[str, float]:
        """Each queue's newest `ApproximateAgeOfOldestMessage` (a queue with no datapoint yet is left out)."""
        end = datetime.now(UTC) + timedelta(minutes=1)
        out: dict[str, float] = {}
        for start in range(0, len(queues), QUERIES_PER_CALL):
            if remaining_ms() < MIN_TIME_LEFT_MS:
                raise TimeoutError("too little of the sweep's time left to read the queues' ages")
            chunk = queues[start : start + QUERIES_PER_CALL]
            answer = self._cw.get_metric_data(
                MetricDataQueries=[_query(i, q) for i, q in enumerate(chunk)],
                StartTime=end - timedelta(minutes=LOOK_BACK_MIN),
                EndTime=end,
                ScanBy="TimestampDescending",
            )
            for result in answer.get("MetricDataResults", []):
                if result.get("Values"):
                    out[chunk[int(result["Id"][1:])]] = float(result["Values"][0])
        return out


def _query(i: int, queue: str) -> dict[str, Any]:
    return {
        "Id": f"q{i}",
        "MetricStat": {
            "Metric": {
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateAgeOfOldestMessage",
                "Dimensions": [{"Name": "QueueName", "Value": queue}],
            },
            "Period": 60,
            "Stat": "Maximum",
        },
    }
