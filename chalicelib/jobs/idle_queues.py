"""Idle tenant queues: removed with their alarm after a number of idle days, recreated on the next send.

Each tenant queue costs a CloudWatch alarm ($0.10 a month) and a minute's sweep, whether the tenant sends
or not; a platform of 10,000 mostly idle tenants would pay for 10,000 alarms. So the queue's last day of
use is kept on the tenant's registry item (`queue_used_day`, UTC), and a scheduled job retires the queues
idle for `MOONSEND_IDLE_QUEUE_DAYS` (default 14, at least 1).

Why a queue is never deleted under a sender, without any lock held while sending:

- Every container touches the day (one conditional write per queue, container and UTC day) before it
  puts anything on the queue (`TenantQueues.ensure`). A queue touched today or yesterday is never a
  candidate, since candidates are idle for a whole day or more.
- Retiring is conditional on the day the job read: a touch between the job's read and its retire makes
  the retire fail, and the queue stays. After the retire, touches fail until the queue is `gone`; the
  sender raises `QueueRetiring` and its event is retried (a retirement takes seconds).
- The job retires only an empty queue (nothing visible, in flight or delayed) with no live drain lease.
- A touch that finds the queue `gone` (or a retirement that crashed and went stale) forgets the cached
  URL and creates the queue and its alarm again, as on first use.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from pynamodb.exceptions import DoesNotExist, UpdateError

from chalicelib.core import log
from chalicelib.core.aws import NO_SUCH_QUEUE
from chalicelib.core.config import Settings
from chalicelib.core.errors import QueueRetiring
from chalicelib.core.routing import alarm_name, tenant_queue_name
from chalicelib.stores.lease import Leases
from chalicelib.stores.tables import bound, condition_failed
from chalicelib.stores.tenants import TenantModel

ACTIVE, RETIRING, GONE = "active", "retiring", "gone"
# A retirement not finished in this long crashed: the next touch takes the queue back (and recreates it).
STALE_RETIREMENT_MS = 10 * 60 * 1000
DAY_S = 86_400


def utc_day(now: float | None = None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if now is None else now))


class QueueActivity:
    """The last day each tenant's queue was used, and whether it exists: on the tenant's registry item."""

    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(TenantModel, table_name, region)

    def touch(self, user_id: str, day: str) -> bool:
        """Mark the queue used today. True when it must be (re)created first: it was retired.

        Raises QueueRetiring while a retirement is under way (retry shortly)."""
        m = self._model
        try:
            m(user_id).update(
                actions=[m.queue_used_day.set(day), m.queue_state.set(ACTIVE)],
                condition=m.queue_state.does_not_exist() | (m.queue_state == ACTIVE),
            )
            return False
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
        item = m.get(user_id, consistent_read=True, attributes_to_get=["queue_state", "queue_state_at"])
        state, at = item.queue_state, int(item.queue_state_at or 0)
        now_ms = int(time.time() * 1000)
        if state == RETIRING and now_ms - at < STALE_RETIREMENT_MS:
            raise QueueRetiring(f"the queue of {user_id} is being removed for idleness; retry in a minute")
        try:  # gone, or a retirement that crashed: take it back, exactly once
            m(user_id).update(
                actions=[m.queue_used_day.set(day), m.queue_state.set(ACTIVE), m.queue_state_at.set(now_ms)],
                condition=(m.queue_state == state) & (m.queue_state_at == at)
                if item.queue_state_at is not None
                else (m.queue_state == state),
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            raise QueueRetiring(f"the queue of {user_id} changed state while being taken back; retry") from exc
        return True

    def idle(self, before_day: str) -> Iterator[tuple[str, str]]:
        """(user_id, last day used) of every tenant whose queue exists and was last used before `before_day`."""
        m = self._model
        condition = (m.queue_used_day < before_day) & (m.queue_state == ACTIVE)
        for item in m.scan(condition, attributes_to_get=["user_id", "queue_used_day", "queue_state"]):
            yield item.user_id, item.queue_used_day

    def stale_retirements(self) -> Iterator[str]:
        m = self._model
        cutoff = int(time.time() * 1000) - STALE_RETIREMENT_MS
        for item in m.scan((m.queue_state == RETIRING) & (m.queue_state_at < cutoff), attributes_to_get=["user_id"]):
            yield item.user_id

    def retire(self, user_id: str, day: str) -> bool:
        """Claim the queue for removal, if it is still unused since `day`."""
        m = self._model
        try:
            m(user_id).update(
                actions=[m.queue_state.set(RETIRING), m.queue_state_at.set(int(time.time() * 1000))],
                condition=(m.queue_used_day == day) & (m.queue_state == ACTIVE),
            )
            return True
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise

    def gone(self, user_id: str) -> None:
        m = self._model
        try:
            m(user_id).update(
                actions=[m.queue_state.set(GONE), m.queue_state_at.set(int(time.time() * 1000))],
                condition=m.queue_state == RETIRING,
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    def state(self, user_id: str) -> tuple[str | None, str | None]:
        try:
            item = self._model.get(user_id, consistent_read=True)
        except DoesNotExist:
            return None, None
        return item.queue_state, item.queue_used_day


@dataclass
class CleanupReport:
    retired: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # user_id -> why it stays


class IdleQueueCleanup:
    """The scheduled job: retire the queues idle for `idle_days`, and finish crashed retirements."""

    def __init__(self, settings: Settings, activity: QueueActivity, sqs: Any, cloudwatch: Any, leases: Leases) -> None:
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
            self._remove(user_id)
            report.retired.append(user_id)
        for user_id, day in self._activity.idle(cutoff):
            why = self._busy(user_id)
            if why:
                report.kept[user_id] = why
                continue
            if not self._activity.retire(user_id, day):
                report.kept[user_id] = "used while being checked"
                continue
            self._remove(user_id)
            report.retired.append(user_id)
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

    def _remove(self, user_id: str) -> None:
        queue = tenant_queue_name(self._settings.resources, user_id)
        self._cw.delete_alarms(AlarmNames=[alarm_name(queue)])
        try:
            url = self._sqs.get_queue_url(QueueName=queue)["QueueUrl"]
            self._sqs.delete_queue(QueueUrl=url)
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in NO_SUCH_QUEUE:
                raise
        self._activity.gone(user_id)
        log.info("idle queue removed", user=user_id, queue=queue)
