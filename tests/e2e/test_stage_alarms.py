"""The stage's watch on the local stack, created from the packaged template: the sweeper, as its own role,
measures the oldest queued email over the queues that hold email and puts it in CloudWatch; the stage's alarm
on it goes into ALARM past its limit and notifies the operator-alerts topic, as CloudWatch would."""

from __future__ import annotations

import json
import time

import pytest

from chalicelib.jobs.queue_age import METRIC, NAMESPACE
from infra.local.scheduler import scheduled_event
from tests.conftest import canonical, eventually

pytestmark = pytest.mark.e2e


def _datapoints(cw, stage: str) -> list[dict]:
    from datetime import UTC, datetime, timedelta

    end = datetime.now(UTC) + timedelta(seconds=5)
    return cw.get_metric_statistics(
        Namespace=NAMESPACE,
        MetricName=METRIC,
        Dimensions=[{"Name": "stage", "Value": stage}],
        StartTime=end - timedelta(minutes=10),
        EndTime=end,
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]


def test_the_sweeper_measures_the_oldest_queued_email_and_the_stage_alarm_tells_the_operator(stack, uid):
    r = stack.settings.resources
    sqs, sns, cw = stack.client("sqs"), stack.client("sns"), stack.client("cloudwatch")
    # An operator's pager: a queue subscribed to the stage's operator-alerts topic.
    pager = sqs.create_queue(QueueName=f"pager-{uid}")["QueueUrl"]
    pager_arn = sqs.get_queue_attributes(QueueUrl=pager, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=stack.topic_arns[r.alerts_topic.name], Protocol="sqs", Endpoint=pager_arn)
    # Email waiting on a paid tenant's queue: its drain held off by a lease nobody renews.
    user = f"aged-{uid}"
    from chalicelib import wiring
    from chalicelib.core.routing import tenant_queue_name

    c = wiring.container()
    queue = tenant_queue_name(r, user)
    held = c.leases.acquire(queue, 120_000)
    message = canonical(userId=user, campaign={"id": "aged", "subject": "Hi", "body": "<p>Hi</p>"})
    message["sender"] = stack.paid_sender(user, rate=5, ses_max_rate=10)
    stack.client("sns").publish(TopicArn=stack.topic_arns[r.precompile_topic.name], Message=json.dumps(message))
    try:
        assert eventually(lambda: stack.queue_depths().get(queue, (0, 0, 0))[0] == 1, 30)
        time.sleep(2.5)  # SQS's minute of metrics (a second here), twice: its age is in CloudWatch
        sweep = stack.runner.functions[r.function_name("sweep_queues")]
        denied = len(stack.access.denied)
        stack.runner.invoke(
            sweep, scheduled_event(f"arn:aws:events:::rule/{uid}", stack.config.account_id, stack.config.region)
        )
        assert [d for d in stack.access.denied[denied:] if d[0] == sweep.function_name] == []  # its role may
        assert eventually(lambda: any(p["Maximum"] >= 2 for p in _datapoints(cw, r.stage)), 10)
    finally:
        c.leases.drop(held)
        c.start_drain(queue)

    # Past the limit (an email waiting four hours, as the sweeper would put it): the alarm tells the operator.
    cw.put_metric_data(
        Namespace=NAMESPACE,
        MetricData=[{"MetricName": METRIC, "Dimensions": [{"Name": "stage", "Value": r.stage}], "Value": 4 * 3600.0}],
    )
    name = f"{r.prefix}-oldest-queued-email"
    said: list[dict] = []

    def notified() -> bool:
        for m in sqs.receive_message(QueueUrl=pager, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            note = json.loads(json.loads(m["Body"])["Message"])
            said.append(note)
        return any(n["AlarmName"] == name and n["NewStateValue"] == "ALARM" for n in said)

    assert eventually(notified, 60), said
    alarm = cw.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]
    assert alarm["StateValue"] == "ALARM" and "Runbook: docs/operations.md" in alarm["AlarmDescription"]
