"""Tenant queues: created on first use, with their dead-letter redrive (and, as an option, a not-empty alarm).

Creation is race-safe: CreateQueue with the same attributes is idempotent in SQS, PutMetricAlarm
overwrites, and a container remembers the queues it has seen, so the cost is paid once per queue per
container. A drain is started by whoever puts email on the queue (precompile's direct start) and by the
sweeper's look every minute. The design's alarm (`ApproximateNumberOfMessagesVisible >= 1`, publishing to
SendEmails) is made only where the stage turns it on (`MOONSEND_QUEUE_ALARMS=true`): $0.10 a queue and
month, for a start the other two, and a drain's stay for the email it put back, make too (chalicelib.core.config).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.core.config import Settings
from chalicelib.core.errors import QueueRecentlyRetired
from chalicelib.core.ports import SqsQueueCreation
from chalicelib.core.resources import MAX_RECEIVE_COUNT, SEND_VISIBILITY_TIMEOUT_S
from chalicelib.core.routing import alarm_name, is_free_queue
from chalicelib.stores.ports.queues import QueueTouch
from chalicelib.stores.queue_activity import utc_hour

ALARM_PERIOD_S = 60
# SQS's answer to a CreateQueue within 60 s of a DeleteQueue of the name: the code as AWS sends it, and the
# botocore model's shape name.
QUEUE_DELETED_RECENTLY = ("AWS.SimpleQueueService.QueueDeletedRecently", "QueueDeletedRecently")


@dataclass(frozen=True)
class QueuePlan:
    """What a tenant queue must look like: decided as data, then applied by `ensure`."""

    name: str
    attributes: dict[str, str]
    tags: dict[str, str]
    alarm: dict[str, Any] | None  # PutMetricAlarm's arguments, None: no alarm (Settings.queue_alarms)


def not_empty_alarm(settings: Settings, queue_name: str) -> dict[str, Any]:
    """The alarm that tells send_emails a queue has work (PutMetricAlarm arguments)."""
    return {
        "AlarmName": alarm_name(queue_name),
        "AlarmDescription": f"{queue_name} has emails to send",
        "Namespace": "AWS/SQS",
        "MetricName": "ApproximateNumberOfMessagesVisible",
        "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
        "Statistic": "Maximum",
        "Period": ALARM_PERIOD_S,
        "EvaluationPeriods": 1,
        "DatapointsToAlarm": 1,
        "Threshold": 1.0,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": "notBreaching",
        "AlarmActions": [settings.topic_arn(settings.resources.send_topic.name)],
    }


def plan_tenant_queue(settings: Settings, queue_name: str, user_id: str) -> QueuePlan:
    r = settings.resources
    return QueuePlan(
        name=queue_name,
        attributes={
            "VisibilityTimeout": str(SEND_VISIBILITY_TIMEOUT_S),
            "MessageRetentionPeriod": str(14 * 24 * 3600),
            "SqsManagedSseEnabled": "true",
            "RedrivePolicy": json.dumps(
                {
                    "deadLetterTargetArn": settings.queue_arn(r.dead_letter_queue.name),
                    "maxReceiveCount": str(MAX_RECEIVE_COUNT),
                },
                separators=(",", ":"),
            ),
        },
        # Tag values are limited to 256 characters; the user id is validated to 128.
        tags={"moonsend:stage": settings.stage, "moonsend:tenant": user_id},
        alarm=not_empty_alarm(settings, queue_name) if settings.queue_alarms else None,
    )


class TenantQueues:
    def __init__(self, settings: Settings, sqs: SqsQueueCreation, cloudwatch: Any, activity: QueueTouch) -> None:
        self._settings = settings
        self._sqs = sqs
        self._cw = cloudwatch
        self._activity = activity
        self._urls: dict[str, str] = {}
        self._touched: dict[str, str] = {}  # queue -> the UTC hour this container last marked it used
        self._lock = threading.Lock()

    def url(self, queue_name: str) -> str:
        """The URL of an existing queue (cached)."""
        hit = self._urls.get(queue_name)
        if hit:
            return hit
        url = self._sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
        with self._lock:
            self._urls[queue_name] = url
        return url

    def ensure(self, queue_name: str, user_id: str) -> str:
        """The URL of the tenant's queue, creating the queue (and its alarm, if the stage has them) on first use.

        Marks the queue used today and this hour first (once per container and hour), so that the idle-queue
        job never removes a queue that is about to get email, and the sweeper looks at it while it has some;
        a queue the job removed is created again here."""
        if is_free_queue(self._settings.resources, queue_name):
            return self.url(queue_name)  # provisioned with the platform, never created here
        hour = utc_hour()
        if self._touched.get(queue_name) != hour:
            if self._activity.touch(user_id, hour[:10], hour):
                self.forget(queue_name)
            with self._lock:
                self._touched[queue_name] = hour
        hit = self._urls.get(queue_name)
        if hit:
            return hit
        plan = plan_tenant_queue(self._settings, queue_name, user_id)
        try:
            url = self._sqs.create_queue(QueueName=plan.name, Attributes=plan.attributes, tags=plan.tags)["QueueUrl"]
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code in QUEUE_DELETED_RECENTLY:
                raise QueueRecentlyRetired(
                    f"the queue {queue_name} was retired less than 60 s ago and SQS creates it again only after "
                    "that: nothing was queued, the invocation is retried"
                ) from exc
            # Another container created it with attributes that since changed: use it as it is.
            if code not in ("QueueAlreadyExists", "QueueNameExists"):
                raise
            url = self._sqs.get_queue_url(QueueName=plan.name)["QueueUrl"]
        if plan.alarm is not None:
            self._cw.put_metric_alarm(**plan.alarm)
        with self._lock:
            self._urls[queue_name] = url
        return url

    def forget(self, queue_name: str) -> None:
        with self._lock:
            self._urls.pop(queue_name, None)
