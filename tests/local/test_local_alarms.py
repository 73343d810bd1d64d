"""Alarm evaluation: as CloudWatch, actions run on state changes only."""

import json
import time

from infra.local.alarms import AlarmEvaluator, next_state

ALARM = {
    "AlarmName": "q-not-empty",
    "AlarmArn": "arn:aws:cloudwatch:us-east-1:123456789012:alarm:q-not-empty",
    "Namespace": "AWS/SQS",
    "MetricName": "ApproximateNumberOfMessagesVisible",
    "Dimensions": [{"Name": "QueueName", "Value": "q"}],
    "Statistic": "Maximum",
    "Period": 60,
    "EvaluationPeriods": 1,
    "DatapointsToAlarm": 1,
    "Threshold": 1.0,
    "ComparisonOperator": "GreaterThanOrEqualToThreshold",
    "TreatMissingData": "notBreaching",
    "AlarmActions": ["arn:aws:sns:us-east-1:123456789012:SendEmails"],
    "OKActions": [],
    "ActionsEnabled": True,
    "StateValue": "INSUFFICIENT_DATA",
}


class FakeCloudWatch:
    def __init__(self, alarm):
        self.alarm = dict(alarm)

    def get_paginator(self, _name):
        outer = self

        class P:
            def paginate(self, **_kw):
                return [{"MetricAlarms": [dict(outer.alarm)]}]

        return P()

    def set_alarm_state(self, AlarmName, StateValue, StateReason):
        self.alarm["StateValue"] = StateValue


class FakeSqs:
    def __init__(self):
        self.visible = 0

    def get_queue_url(self, QueueName):
        return {"QueueUrl": f"http://x/{QueueName}"}

    def get_queue_attributes(self, QueueUrl, AttributeNames):
        return {"Attributes": {AttributeNames[0]: str(self.visible)}}


class FakeSns:
    def __init__(self):
        self.published = []

    def publish(self, TopicArn, Subject, Message):
        self.published.append((TopicArn, Subject, json.loads(Message)))


def _evaluator():
    cw, sqs, sns = FakeCloudWatch(ALARM), FakeSqs(), FakeSns()
    ev = AlarmEvaluator(cw, sqs, sns, account_id="123456789012", region="us-east-1")
    return ev, cw, sqs, sns


def test_alarm_fires_once_on_the_way_into_alarm_and_not_again_while_it_holds():
    ev, cw, sqs, sns = _evaluator()
    ev.evaluate_once(force=True)
    assert cw.alarm["StateValue"] == "OK" and sns.published == []
    sqs.visible = 3
    ev.evaluate_once(force=True)
    assert cw.alarm["StateValue"] == "ALARM" and len(sns.published) == 1
    for _ in range(5):
        sqs.visible += 1
        ev.evaluate_once(force=True)
    assert len(sns.published) == 1  # still in ALARM: no new notification


def test_alarm_fires_again_after_going_back_to_ok():
    ev, cw, sqs, sns = _evaluator()
    sqs.visible = 1
    ev.evaluate_once(force=True)
    sqs.visible = 0
    ev.evaluate_once(force=True)
    assert cw.alarm["StateValue"] == "OK"
    sqs.visible = 2
    ev.evaluate_once(force=True)
    assert [p[2]["NewStateValue"] for p in sns.published] == ["ALARM", "ALARM"]
    assert [p[2]["OldStateValue"] for p in sns.published] == ["INSUFFICIENT_DATA", "OK"]


def test_notification_has_cloudwatchs_shape_with_the_queue_in_the_dimensions():
    ev, _cw, sqs, sns = _evaluator()
    sqs.visible = 1
    ev.evaluate_once(force=True)
    topic, subject, msg = sns.published[0]
    assert topic == "arn:aws:sns:us-east-1:123456789012:SendEmails"
    assert subject == 'ALARM: "q-not-empty" in US East (N. Virginia)'
    assert msg["AlarmName"] == "q-not-empty" and msg["AWSAccountId"] == "123456789012"
    assert msg["Trigger"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert msg["Trigger"]["Namespace"] == "AWS/SQS"
    assert msg["Trigger"]["Dimensions"] == [{"value": "q", "name": "QueueName"}]
    assert msg["Trigger"]["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_each_alarm_is_evaluated_once_per_scaled_period():
    ev, _cw, sqs, sns = _evaluator()
    ev.time_scale = 10.0  # a 60 s period becomes 600 s: only the first evaluation happens now
    ev.evaluate_once()
    sqs.visible = 5
    ev.evaluate_once()
    assert sns.published == []


def test_state_follows_datapoints_to_alarm_and_missing_data_treatment():
    a = {**ALARM, "EvaluationPeriods": 3, "DatapointsToAlarm": 2, "TreatMissingData": "missing"}
    assert next_state([0, 1, 0], a, "OK") == "OK"
    assert next_state([1, 0, 1], a, "OK") == "ALARM"
    assert next_state([None, None, None], a, "OK") == "INSUFFICIENT_DATA"
    assert next_state([None, None, None], {**a, "TreatMissingData": "ignore"}, "ALARM") == "ALARM"
    assert next_state([None, 1, None], {**a, "TreatMissingData": "breaching"}, "OK") == "ALARM"
    lt = {**a, "ComparisonOperator": "LessThanThreshold", "DatapointsToAlarm": 1}
    assert next_state([0], lt, "OK") == "ALARM"


def test_the_stacks_evaluator_fires_a_real_alarm_through_sns(stack, uid):
    sqs, sns, cw = stack.client("sqs"), stack.client("sns"), stack.client("cloudwatch")
    watched = sqs.create_queue(QueueName=f"probe-watched-{uid}")["QueueUrl"]
    inbox = sqs.create_queue(QueueName=f"probe-inbox-{uid}")["QueueUrl"]
    inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    topic = sns.create_topic(Name=f"probe-{uid}")["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=inbox_arn)
    cw.put_metric_alarm(
        **{k: v for k, v in ALARM.items() if k not in ("AlarmArn", "StateValue", "OKActions", "ActionsEnabled")}
        | {
            "AlarmName": f"probe-{uid}",
            "AlarmActions": [topic],
            "Dimensions": [{"Name": "QueueName", "Value": f"probe-watched-{uid}"}],
        }
    )
    sqs.send_message(QueueUrl=watched, MessageBody="work")
    got = sqs.receive_message(QueueUrl=inbox, WaitTimeSeconds=10).get("Messages", [])
    assert got, "the alarm did not fire"
    note = json.loads(json.loads(got[0]["Body"])["Message"])
    assert note["NewStateValue"] == "ALARM"
    assert note["Trigger"]["Dimensions"] == [{"value": f"probe-watched-{uid}", "name": "QueueName"}]
    sqs.delete_message(QueueUrl=inbox, ReceiptHandle=got[0]["ReceiptHandle"])
    sqs.send_message(QueueUrl=watched, MessageBody="more work")  # still in ALARM: no second notice
    time.sleep(2.5)
    assert "Messages" not in sqs.receive_message(QueueUrl=inbox)
    state = cw.describe_alarms(AlarmNames=[f"probe-{uid}"])["MetricAlarms"][0]["StateValue"]
    assert state == "ALARM"


def _aws_timed(counts):
    now = [0.0]
    cw, sns = FakeCloudWatch(ALARM), FakeSns()
    ev = AlarmEvaluator(
        cw,
        FakeSqs(),
        sns,
        account_id="123456789012",
        region="us-east-1",
        time_scale=1.0,
        clock=lambda: now[0],
        queue_counts=lambda _q: {"ApproximateNumberOfMessages": counts[0]},
        aws_timing=True,
    )
    return ev, now, sns


def _first_alarm_after(ev, now, sns, start, until):
    """Step a fake clock 5 s at a time; the time the first ALARM notification went out, or None."""
    t = start
    while t <= until:
        now[0] = t
        ev.evaluate_once()
        if any(p[2]["NewStateValue"] == "ALARM" for p in sns.published):
            return t
        t += 5.0
    return None


def test_with_aws_timing_an_inactive_queue_publishes_nothing_for_15_minutes_after_it_wakes():
    counts = [0]
    ev, now, sns = _aws_timed(counts)
    assert _first_alarm_after(ev, now, sns, 1000.0, 1100.0) is None  # empty: OK
    counts[0] = 3  # email arrives at 1105 s, in a queue not seen active (a tenant idle for days)
    fired = _first_alarm_after(ev, now, sns, 1105.0, 1105.0 + 20 * 60)
    assert fired is not None
    # SQS's first datapoint comes 15 minutes after the wake-up; the alarm sees it within two minutes.
    assert 15 * 60 <= fired - 1105.0 <= 17 * 60


def test_with_aws_timing_an_active_queue_alarms_within_a_minute_or_two():
    counts = [2]
    ev, now, sns = _aws_timed(counts)
    ev.wake_delay_s = 0  # this queue's first activity wakes it at once
    assert _first_alarm_after(ev, now, sns, 1000.0, 1000.0) == 1000.0
    counts[0] = 0
    for t in range(1060, 1300, 60):  # emptied: back to OK
        now[0] = float(t)
        ev.evaluate_once()
    ev.wake_delay_s = 15 * 60  # would apply only to a queue inactive for 6 hours
    counts[0] = 1  # new email minutes after the queue was last active: no wake-up delay
    sns.published.clear()
    fired = _first_alarm_after(ev, now, sns, 1305.0, 1305.0 + 20 * 60)
    assert fired is not None and fired - 1305.0 <= 120
