"""The oldest queued email over every queue of the stage, as one datapoint (chalicelib.jobs.queue_age)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from chalicelib.jobs.queue_age import METRIC, MIN_TIME_LEFT_MS, NAMESPACE, QUERIES_PER_CALL, QueueAge


class FakeCloudWatch:
    def __init__(self, ages: dict[str, float], fail: bool = False) -> None:
        self.ages = ages
        self.fail = fail
        self.asked: list[int] = []
        self.put: list[dict[str, Any]] = []

    def get_metric_data(self, MetricDataQueries, StartTime, EndTime, ScanBy):
        if self.fail:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetMetricData")
        assert ScanBy == "TimestampDescending" and (EndTime - StartTime).total_seconds() >= 15 * 60
        self.asked.append(len(MetricDataQueries))
        results = []
        for q in MetricDataQueries:
            metric = q["MetricStat"]["Metric"]
            assert (metric["Namespace"], metric["MetricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
            queue = metric["Dimensions"][0]["Value"]
            values = [self.ages[queue], 1.0] if queue in self.ages else []  # newest first
            results.append({"Id": q["Id"], "Values": values})
        return {"MetricDataResults": results}

    def put_metric_data(self, Namespace, MetricData):
        self.put.append({"Namespace": Namespace, **MetricData[0]})


def test_the_oldest_of_the_busy_queues_newest_datapoints_is_put_for_the_stage():
    cw = FakeCloudWatch({"q1": 40.0, "q2": 7300.0})
    assert QueueAge(cw, "prod").record(["q1", "q2", "q3"]) == 7300.0  # q3 has no datapoint yet: left out
    (put,) = cw.put
    assert (put["Namespace"], put["MetricName"], put["Value"], put["Unit"]) == (NAMESPACE, METRIC, 7300.0, "Seconds")
    assert put["Dimensions"] == [{"Name": "stage", "Value": "prod"}]


def test_no_queue_holding_email_puts_zero_so_the_alarm_goes_back_to_ok():
    cw = FakeCloudWatch({})
    assert QueueAge(cw, "prod").record([]) == 0.0
    assert cw.asked == [] and cw.put[0]["Value"] == 0.0


def test_a_thousand_and_one_queues_are_asked_five_hundred_at_a_time():
    queues = [f"q{i}" for i in range(1001)]
    cw = FakeCloudWatch({"q1000": 99.0})
    assert QueueAge(cw, "prod").record(queues) == 99.0
    assert cw.asked == [QUERIES_PER_CALL, QUERIES_PER_CALL, 1]


def test_cloudwatch_refusing_is_logged_and_the_sweep_is_not_failed():
    cw = FakeCloudWatch({}, fail=True)
    assert QueueAge(cw, "prod").record(["q1"]) is None and cw.put == []


def test_with_too_little_of_the_functions_time_left_the_measure_is_skipped_not_the_sweep_timed_out():
    cw = FakeCloudWatch({"q1": 40.0})
    assert QueueAge(cw, "prod").record(["q1"], lambda: MIN_TIME_LEFT_MS - 1) is None
    assert cw.asked == [] and cw.put == []
    left = iter([60_000, MIN_TIME_LEFT_MS - 1])  # enough to read the ages, then not to put them
    assert QueueAge(cw, "prod").record(["q1"], lambda: next(left)) is None and cw.put == []
