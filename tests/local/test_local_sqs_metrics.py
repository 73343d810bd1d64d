"""SQS's metrics in the local stack's CloudWatch, read as AWS documents them: GetMetricData on AWS/SQS by
QueueName, the age of the oldest message in seconds; and the local stack keeps no more of them than it reads."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from infra.local.sqs_metrics import KEEP_S, NAMESPACE, SqsMetrics


def _newest(cloudwatch, queue: str, metric: str) -> float | None:
    end = datetime.now(UTC) + timedelta(minutes=1)
    query = {
        "Id": "m",
        "MetricStat": {
            "Metric": {
                "Namespace": "AWS/SQS",
                "MetricName": metric,
                "Dimensions": [{"Name": "QueueName", "Value": queue}],
            },
            "Period": 60,
            "Stat": "Maximum",
        },
    }
    answer = cloudwatch.get_metric_data(
        MetricDataQueries=[query], StartTime=end - timedelta(minutes=3), EndTime=end, ScanBy="TimestampDescending"
    )
    values = answer["MetricDataResults"][0]["Values"]
    return values[0] if values else None


def test_a_queues_oldest_message_ages_in_cloudwatch_as_sqs_publishes_it(stack, uid):
    sqs, cloudwatch = stack.client("sqs"), stack.client("cloudwatch")
    name = f"metrics-probe-{uid}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    try:
        sqs.send_message(QueueUrl=url, MessageBody="first")
        time.sleep(2.5)  # a local minute is a second: two datapoints at least
        sqs.send_message(QueueUrl=url, MessageBody="second")
        time.sleep(1.5)
        age = _newest(cloudwatch, name, "ApproximateAgeOfOldestMessage")
        assert age is not None and 2 <= age <= 60  # the first message's age, not the second's
        assert _newest(cloudwatch, name, "ApproximateNumberOfMessagesVisible") == 2.0
    finally:
        sqs.delete_queue(QueueUrl=url)


class _Message:
    def __init__(self, sent_ms: float) -> None:
        self.sent_timestamp = sent_ms


class _Queue:
    """A moto queue, as far as the sampler reads one: `held` messages sent `age_s` ago (FIFO's list)."""

    approximate_number_of_messages_not_visible = 0
    approximate_number_of_messages_delayed = 0

    def __init__(self, held: int = 0, age_s: float = 0.0) -> None:
        self.approximate_number_of_messages = held
        self._messages = [_Message((time.time() - age_s) * 1000) for _ in range(held)]


def test_datapoints_older_than_it_keeps_are_dropped_and_others_namespaces_kept():
    from moto.cloudwatch.models import CloudWatchBackend

    backend = CloudWatchBackend("us-east-1", "123456789012")
    clock = [time.time() - KEEP_S - 600]
    metrics = SqsMetrics(lambda: [("q", _Queue(1, 30)), ("idle", _Queue())], lambda: backend, clock=lambda: clock[0])
    metrics.tick()
    backend.put_metric_data(
        "moonsend",
        [
            {
                "MetricName": "Sent",
                "Value": 1.0,
                "Dimensions": [],
                "Timestamp": datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=5),
            }
        ],
    )
    clock[0] = time.time()
    metrics.tick()
    kinds = {
        (d.namespace, d.timestamp > datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1))
        for d in backend.metric_data
    }
    assert kinds == {(NAMESPACE, True), ("moonsend", False)}
    # One minute of the busy queue's four metrics, and the other namespace's; the idle queue's zeros never.
    assert len(backend.metric_data) == 4 + 1
    assert {d.dimensions[0].value for d in backend.metric_data if d.namespace == NAMESPACE} == {"q"}
