"""A tenant's queue, made on first use: no alarm unless the stage turns them on (issue 53)."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.routing import alarm_name, tenant_queue_name
from chalicelib.queueing.tenant_queues import TenantQueues, plan_tenant_queue
from tests.fakes.queues import FakeQueueActivity


class Sqs:
    def __init__(self) -> None:
        self.created: list[str] = []

    def create_queue(self, *, QueueName: str, Attributes: dict[str, str], tags: dict[str, str]) -> dict[str, Any]:
        self.created.append(QueueName)
        return {"QueueUrl": f"https://sqs/{QueueName}"}

    def get_queue_url(self, *, QueueName: str) -> dict[str, Any]:
        return {"QueueUrl": f"https://sqs/{QueueName}"}


class CloudWatch:
    def __init__(self) -> None:
        self.alarms: list[dict[str, Any]] = []

    def put_metric_alarm(self, **alarm: Any) -> None:
        self.alarms.append(alarm)


def _queues(env: dict[str, str]) -> tuple[TenantQueues, Sqs, CloudWatch, str]:
    settings = Settings.from_env({"MOONSEND_STAGE": "test", **env})
    sqs, cloudwatch = Sqs(), CloudWatch()
    queue = tenant_queue_name(settings.resources, "user-1")
    return TenantQueues(settings, sqs, cloudwatch, FakeQueueActivity()), sqs, cloudwatch, queue


def test_by_default_a_tenants_first_queue_gets_no_alarm():
    queues, sqs, cloudwatch, queue = _queues({})
    assert queues.ensure(queue, "user-1") == f"https://sqs/{queue}"
    assert sqs.created == [queue] and cloudwatch.alarms == []


def test_a_stage_with_queue_alarms_gives_each_new_queue_the_not_empty_alarm_once():
    queues, sqs, cloudwatch, queue = _queues({"MOONSEND_QUEUE_ALARMS": "true"})
    queues.ensure(queue, "user-1")
    queues.ensure(queue, "user-1")  # known to this container: neither made again
    assert sqs.created == [queue]
    (alarm,) = cloudwatch.alarms
    assert alarm["AlarmName"] == alarm_name(queue)
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible" and alarm["Threshold"] == 1.0
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": queue}]


def test_the_plan_says_an_alarm_only_where_the_stage_turns_them_on():
    for flag, wanted in (("", False), ("0", False), ("false", False), ("1", True), ("yes", True), ("true", True)):
        settings = Settings.from_env({"MOONSEND_STAGE": "test", "MOONSEND_QUEUE_ALARMS": flag})
        plan = plan_tenant_queue(settings, tenant_queue_name(settings.resources, "u"), "u")
        assert (plan.alarm is not None) is wanted


def test_a_queue_alarms_value_that_is_neither_yes_nor_no_is_refused_not_read_as_off():
    with pytest.raises(ValueError, match="MOONSEND_QUEUE_ALARMS"):
        Settings.from_env({"MOONSEND_STAGE": "test", "MOONSEND_QUEUE_ALARMS": "y es"})
    assert Settings.from_env({"MOONSEND_QUEUE_ALARMS": "ON"}).queue_alarms
