"""SES's reputation metrics in the local stack's CloudWatch, as SES documents them (AWS/SES
`Reputation.BounceRate` and `Reputation.ComplaintRate`, no dimension, a rate between 0 and 1): the stand-in's
last day of sends to SES's mailbox simulator, read back with GetMetricData and by the alarm evaluator, as
the stage's reputation alarms read SES's on AWS."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from infra.local.alarms import AlarmEvaluator
from infra.local.ses import DAY_S, Feedback
from infra.local.ses_metrics import BOUNCE_RATE, COMPLAINT_RATE, NAMESPACE, SesMetrics

SIM = "simulator.amazonses.com"


def test_the_rates_are_the_last_days_share_of_the_simulators_bounces_and_complaints():
    f = Feedback()
    now = time.time()
    f.add(now - DAY_S - 1, [f"bounce@{SIM}"])  # older than a day: not counted
    f.add(now - 10, [f"bounce+1@{SIM}", f"success@{SIM}"])
    f.add(now - 5, [f"complaint@{SIM}", "ann@example.org"])
    assert f.rates(now) == (4, 0.25, 0.25)
    assert Feedback().rates(now) is None  # nothing sent: SES publishes nothing


class _CloudWatch:
    """CloudWatch's GetMetricStatistics and GetMetricData over one moto backend of its own. Not moto's
    in-process mock: it would reset the backends of the session's local stack, which this process serves."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def get_metric_statistics(self, Namespace, MetricName, Dimensions, StartTime, EndTime, Period, Statistics):
        naive = [t.astimezone(UTC).replace(tzinfo=None) for t in (StartTime, EndTime)]  # as moto keeps them
        points = self.backend.get_metric_statistics(Namespace, MetricName, *naive, Period, Statistics, Dimensions)
        return {"Datapoints": [{s: getattr(p, s.lower()) for s in Statistics} for p in points]}


def test_published_rates_are_read_back_as_cloudwatch_answers_and_by_the_alarm_evaluator():
    from moto.cloudwatch.models import CloudWatchBackend

    account, region = "123456789012", "us-east-1"
    backend = CloudWatchBackend(region, account)
    metrics = SesMetrics(lambda: [account], lambda _account, _now: (40, 0.25, 0.0), lambda _a: backend)
    metrics.tick()
    # Read back as CloudWatch answers GetMetricStatistics (the operator's page reads them with GetMetricData
    # through the stack: tests/browser/test_ops_browser.py).
    cloudwatch = _CloudWatch(backend)
    end = datetime.now(UTC) + timedelta(minutes=1)
    for name, value in ((BOUNCE_RATE, 0.25), (COMPLAINT_RATE, 0.0)):
        got = cloudwatch.get_metric_statistics(NAMESPACE, name, [], end - timedelta(minutes=5), end, 60, ["Average"])
        assert [p["Average"] for p in got["Datapoints"]] == [value]
    # The stage's bounce-rate alarm (infra.monitoring: Average over an hour) sees SES's rate, as on AWS.
    evaluator = AlarmEvaluator(cloudwatch, None, None, account_id=account, region=region)
    alarm = {
        "Namespace": NAMESPACE,
        "MetricName": BOUNCE_RATE,
        "Dimensions": [],
        "Period": 3600,
        "Statistic": "Average",
    }
    assert evaluator.metric_value(alarm) == 0.25
    # Lambda's own metrics are still not emulated: missing data.
    assert evaluator.metric_value({**alarm, "Namespace": "AWS/Lambda", "MetricName": "Errors"}) is None
