"""Idle tenant queues: removed (with their alarm, where the stage gives queues one) after a number of idle
days, recreated on the next send.

A tenant queue left forever would be looked at by the sweeper a few minutes a day for good, and where the
stage turns queue alarms on (`MOONSEND_QUEUE_ALARMS`) cost a CloudWatch alarm ($0.10 a month) whether the
tenant sends or not: 10,000 mostly idle tenants would pay for 10,000 alarms. So the queue's last day of
use is kept on the tenant's registry item (`queue_used_day`, UTC), and a scheduled job retires the queues
idle for `MOONSEND_IDLE_QUEUE_DAYS` (default 14, at least 1).

Why a queue is never deleted under a drainer, without any lock held while sending:

- Every container touches the day (one conditional write per queue, container and UTC day) before it
  puts anything on the queue (`TenantQueues.ensure`). A queue touched today or yesterday is never a
  candidate, since candidates are idle for a whole day or more.
- Retiring is conditional on the day the job read: a touch between the job's read and its retire makes
  the retire fail, and the queue stays. After the retire, touches fail until the queue is `gone`; the
  sender raises `QueueRetiring` and its event is retried (a retirement takes seconds).
- The job retires only an empty queue (nothing visible, in flight or delayed) with no live drain lease.
- A touch that finds the queue `gone` (or a retirement that crashed and went stale) forgets the cached
  URL and creates the queue (and its alarm, where the stage has them) again, as on first use.
- A retirement goes stale after a minute (STALE_RETIREMENT_MS), inside Lambda's retries of the event that
  met it: a job killed half-way never costs a send. So the job deletes the queue only within half that
  of its claim, and only while the claim is still its own (a consistent read just before DeleteQueue); a
  job past that leaves the queue, and a send takes it back, or its next run claims it again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.core import log
from chalicelib.core.aws import NO_SUCH_QUEUE
from chalicelib.core.config import Settings
from chalicelib.core.ports import SqsQueueRemoval
from chalicelib.core.routing import alarm_name, tenant_queue_name
from chalicelib.stores.ports.queues import LeaseHolders, QueueRetirement
from chalicelib.stores.queue_activity import DAY_S, REMOVE_WITHIN_MS, utc_day


@dataclass
class CleanupReport:
    retired: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # user_id -> why it stays


class IdleQueueCleanup:
    """The scheduled job: retire the queues idle for `idle_days`, and finish crashed retirements."""

    def __init__(
        self, settings: Settings, activity: QueueRetirement, sqs: SqsQueueRemoval, cloudwatch: Any, leases: LeaseHolders
    ) -> None:
        self._settings = settings
        self._activity = activity
        self._sqs = sqs
        self._cw = cloudwatch
        self._leases = leases

    def run(self, now: float | None = None) -> CleanupReport:
        now = time.time() if now is None else now
        days = max(1, self._settings.idle_queue_days)
        cutoff = utc_day(now - days * DAY_S)
        report = CleanupReport()
        for user_id in self._activity.stale_retirements():
            claimed = self._activity.reclaim(user_id)
            if claimed is not None and self._remove(user_id, claimed):
                report.retired.append(user_id)
        for user_id, day in self._activity.idle(cutoff):
            why = self._busy(user_id)
            if why:
                report.kept[user_id] = why
                continue
            claimed = self._activity.retire(user_id, day)
            if claimed is None:
                report.kept[user_id] = "used while being checked"
                continue
            if self._remove(user_id, claimed):
                report.retired.append(user_id)
            else:
                report.kept[user_id] = "taken back by a send, or not removed in time"
        log.info("idle queues retired", retired=len(report.retired), kept=len(report.kept), idle_days=days)
        return report

    def _busy(self, user_id: str) -> str | None:
        queue = tenant_queue_name(self._settings.resources, user_id)
        try:
            url = self._sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] in NO_SUCH_QUEUE:
                return None
            raise
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        attrs = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        waiting = sum(int(attrs.get(n, 0)) for n in names)
        if waiting:
            return f"{waiting} message(s) in the queue"
        if self._leases.holder(queue) is not None:
            return "a drain holds the queue"
        return None

    def _remove(self, user_id: str, claimed_ms: int) -> bool:
        """Delete the queue's alarm, then the queue, while the claim is this one's and young enough that no send
        can have taken it back (STALE_RETIREMENT_MS); True when it is gone."""
        queue = tenant_queue_name(self._settings.resources, user_id)
        self._cw.delete_alarms(AlarmNames=[alarm_name(queue)])
        late = int(time.time() * 1000) - claimed_ms > REMOVE_WITHIN_MS
        if late or not self._activity.still_claimed(user_id, claimed_ms):
            # The alarm alone is gone: the send that takes the queue back makes it again.
            log.warning("idle queue kept: its retirement was taken back or ran late", user=user_id, queue=queue)
            return False
        try:
            url = self._sqs.get_queue_url(QueueName=queue)["QueueUrl"]
            self._sqs.delete_queue(QueueUrl=url)
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in NO_SUCH_QUEUE:
                raise
        self._activity.gone(user_id)
        log.info("idle queue removed", user=user_id, queue=queue)
        return True
