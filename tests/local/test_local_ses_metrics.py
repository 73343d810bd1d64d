"""SES's reputation metrics in the local stack's CloudWatch, as SES documents them (AWS/SES
`Reputation.BounceRate` and `Reputation.ComplaintRate`, no dimension, a rate between 0 and 1): the stand-in's
last day of sends to SES's mailbox simulator, read back with GetMetricData and by the alarm evaluator, as
the stage's reputation alarms read SES's on AWS."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import boto3
from moto import mock_aws

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


@mock_aws
def test_published_rates_are_read_by_get_metric_data_and_by_the_alarm_evaluator():
    from moto.cloudwatch.models import cloudwatch_backends

    account, region = "123456789012", "us-east-1"
    metrics = SesMetrics(
        lambda: [account],
        lambda _account, _now: (40, 0.25, 0.0),
        lambda a: cloudwatch_backends[a][region],
    )
    metrics.tick()
    cw = boto3.client("cloudwatch", region_name=region)
    end = datetime.now(UTC) + timedelta(minutes=1)
    got = cw.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "b",
                "MetricStat": {
                    "Metric": {"Namespace": NAMESPACE, "MetricName": BOUNCE_RATE},
                    "Period": 60,
                    "Stat": "Average",
                },
            },
            {
                "Id": "c",
                "MetricStat": {
                    "Metric": {"Namespace": NAMESPACE, "MetricName": COMPLAINT_RATE},
                    "Period": 60,
                    "Stat": "Average",
                },
            },
        ],
        StartTime=end - timedelta(minutes=5),
        EndTime=end,
    )
    values = {r["Id"]: r["Values"] for r in got["MetricDataResults"]}
    assert values == {"b": [0.25], "c": [0.0]}
    # The stage's bounce-rate alarm (infra.monitoring: Average over an hour) sees SES's rate, as on AWS.
    evaluator = AlarmEvaluator(cw, None, None, account_id=account, region=region)
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
