"""The stage's alarms and dashboard (infra.monitoring) watch metrics that exist: moonsend's own, read from the
EMF record a drain writes and the sweeper's datapoint, and AWS's, by the names AWS documents; none is per
tenant; each alarm has its runbook line in docs/operations.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

from chalicelib.core.metrics import QueueLag, drain_record
from chalicelib.core.resources import resources_for
from chalicelib.jobs import queue_age
from infra.monitoring import Limits, alarms, dashboard, monitoring

ROOT = Path(__file__).resolve().parents[2]
# AWS's documented metric names, for the namespaces the alarms and the dashboard read:
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html
# https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html
# https://docs.aws.amazon.com/ses/latest/dg/reputationdashboard-cloudwatch-alarm.html
AWS_METRICS = {
    "AWS/SQS": {
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesVisible",
        "NumberOfEmptyReceives",
        "NumberOfMessagesDeleted",
        "NumberOfMessagesReceived",
        "NumberOfMessagesSent",
        "SentMessageSize",
    },
    "AWS/Lambda": {
        "Invocations",
        "Errors",
        "DeadLetterErrors",
        "DestinationDeliveryFailures",
        "Throttles",
        "Duration",
        "IteratorAge",
        "ConcurrentExecutions",
        "UnreservedConcurrentExecutions",
    },
    "AWS/SES": {
        "Send",
        "Delivery",
        "Bounce",
        "Complaint",
        "Reject",
        "Reputation.BounceRate",
        "Reputation.ComplaintRate",
    },
}


def _drain_record() -> dict:
    counts = {"Sent": 3, "Failed": 1, "Throttled": 2, "Retried": 1, "Duplicates": 0}
    lag = QueueLag()
    lag.add(120)
    return drain_record(stage="prod", plan="paid", queue="q", tenant="t", counts=counts, lag=lag)


def _ours() -> set[str]:
    """What moonsend writes to its namespace: a drain's EMF record, read back, and the sweeper's datapoint."""
    (directive,) = _drain_record()["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == queue_age.NAMESPACE
    return {m["Name"] for m in directive["Metrics"]} | {queue_age.METRIC}


def _dimension_sets() -> dict[str, set[frozenset[str]]]:
    """Each moonsend metric's dimension names, as it is written: CloudWatch matches a metric by all of them."""
    (directive,) = _drain_record()["_aws"]["CloudWatchMetrics"]
    drain = {frozenset(d) for d in directive["Dimensions"]}
    sets: dict[str, set[frozenset[str]]] = {m["Name"]: drain for m in directive["Metrics"]}
    sets[queue_age.METRIC] = {frozenset({"stage"})}
    return sets


def _known(namespace: str, metric: str) -> bool:
    return metric in (_ours() if namespace == queue_age.NAMESPACE else AWS_METRICS.get(namespace, set()))


def test_every_alarm_watches_a_metric_that_is_published_and_none_is_a_tenants():
    r = resources_for("moonsend", "prod")
    for a in alarms(r, Limits()):
        assert _known(a.namespace, a.metric), (a.name, a.namespace, a.metric)
        if a.namespace == queue_age.NAMESPACE:
            assert frozenset(n for n, _v in a.dimensions) in _dimension_sets()[a.metric], a.name
        assert r.tenant_queue_prefix not in json.dumps(a.resource("T")), a.name  # an idle tenant costs nothing
        assert a.name.startswith(r.prefix)


def test_every_dashboard_metric_is_published():
    r = resources_for("moonsend", "prod")
    body = json.loads(dashboard(r)["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"])
    seen = 0
    for widget in body["widgets"]:
        for line in widget["properties"]["metrics"]:
            namespace, metric = line[0], line[1]
            assert _known(namespace, metric), (widget["properties"]["title"], namespace, metric)
            if namespace == queue_age.NAMESPACE:  # every dimension the writer gives, or the line stays empty
                names = frozenset(line[2:-1:2])
                assert names in _dimension_sets()[metric], (metric, sorted(names))
            seen += 1
    titles = " ".join(w["properties"]["title"] for w in body["widgets"]).lower()
    for part in (
        "sends",
        "throttles",
        "queue depth",
        "oldest",
        "errors",
        "duration",
        "concurrency",
        "webhook",
        "iterator",
    ):
        assert part in titles, part
    assert seen > 20


def test_the_reputation_alarms_are_at_half_the_guards_limits():
    r = resources_for("moonsend", "prod")
    by_metric = {a.metric: a for a in alarms(r, Limits.of({"MOONSEND_BOUNCE_LIMIT": "0.04"}))}
    assert by_metric["Reputation.BounceRate"].threshold == 0.02
    assert by_metric["Reputation.ComplaintRate"].threshold == 0.0005  # the guard's 0.1%, halved


def test_every_alarm_notifies_the_operator_topic_whose_email_is_a_parameter():
    r = resources_for("moonsend", "prod")
    template = monitoring(r, Limits())
    subscription = template["Resources"]["OperatorAlertsEmail"]
    assert subscription["Condition"] in template["Conditions"]
    assert subscription["Properties"]["Endpoint"] == {"Ref": "OperatorEmail"}
    assert template["Parameters"]["OperatorEmail"]["Default"] == ""
    for a in alarms(r, Limits()):
        props = a.resource(r.alerts_topic.logical_id)["Properties"]
        assert props["AlarmActions"] == props["OKActions"] == [{"Ref": r.alerts_topic.logical_id}]


def test_each_alarm_has_its_runbook_line_with_its_threshold():
    runbook = (
        (ROOT / "docs" / "operations.md").read_text(encoding="utf-8").split("## Alarms", 1)[1].split("\n## ", 1)[0]
    )
    r = resources_for("moonsend", "<stage>")
    for a in alarms(r, Limits()):
        row = next((line for line in runbook.splitlines() if f"`{a.name}`" in line), None)
        assert row is not None, f"no runbook line for {a.name}"
        assert re.search(r"\| .+ \| .+ \| .+ \|", row), row  # what it watches, what it means, what to do
