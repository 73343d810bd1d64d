"""Each tenant queue's last day and hour of use and whether it exists, on the tenant's registry item.

The queue's writer touches the day (and hour) before it puts anything on the queue; the idle-queue job
(chalicelib.jobs.idle_queues) retires queues idle long enough. Why no queue is removed under a
sender is told there. The hour is the sweeper's (chalicelib.jobs.queues_in_use): it looks every minute at
the queues used this hour or the last, found by the table's index of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.expressions.condition import Condition

from chalicelib.core.errors import QueueRetiring
from chalicelib.stores.tables import bound, condition_failed
from chalicelib.stores.tenant_model import TenantModel

ACTIVE, RETIRING, GONE = "active", "retiring", "gone"
# A retirement not finished in this long crashed: the next touch takes the queue back (and recreates it).
# A retirement not finished this long after it was claimed is taken back by the next send. Under Lambda's
# async retries (a minute, then two more), so that an event that met a retirement killed half-way is sent
# by its retry rather than given up on. Safe because the job removes a queue only within REMOVE_WITHIN_MS
# of its claim (chalicelib.jobs.idle_queues), and a retirement takes seconds.
STALE_RETIREMENT_MS = 60 * 1000
REMOVE_WITHIN_MS = STALE_RETIREMENT_MS // 2
DAY_S = 86_400


def utc_day(now: float | None = None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if now is None else now))


def utc_hour(now: float | None = None) -> str:
    """`2026-11-29T19`: the UTC hour, as the index of queues in use keys it (its day is its first ten)."""
    return time.strftime("%Y-%m-%dT%H", time.gmtime(time.time() if now is None else now))


class QueueActivity:
    """The last day each tenant's queue was used, and whether it exists: on the tenant's registry item."""

    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(TenantModel, table_name, region)

    def touch(self, user_id: str, day: str, hour: str | None = None) -> bool:
        """Mark the queue used today (and this hour). True when it must be (re)created first: it was retired.

        Raises QueueRetiring while a retirement is under way (retry shortly)."""
        m = self._model
        used = [m.queue_used_day.set(day), *([m.queue_used_hour.set(hour)] if hour else [])]
        try:
            m(user_id).update(
                actions=[*used, m.queue_state.set(ACTIVE)],
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
                actions=[*used, m.queue_state.set(ACTIVE), m.queue_state_at.set(now_ms)],
                condition=(m.queue_state == state) & (m.queue_state_at == at)
                if item.queue_state_at is not None
                else (m.queue_state == state),
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            raise QueueRetiring(f"the queue of {user_id} changed state while being taken back; retry") from exc
        return True

    def mark_hour(self, user_id: str, hour: str) -> None:
        """Mark the tenant's queue in use this hour, and nothing else (the sweeper's, for a queue it found holding
        email: it stays in use until found empty, however long its drains fail)."""
        m = self._model
        try:
            m(user_id).update(actions=[m.queue_used_hour.set(hour)], condition=m.user_id.exists())
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    def used_in(self, hours: Iterable[str]) -> set[str]:
        """The tenants whose queue was last used in one of these UTC hours (`utc_hour`; the index: a request an
        hour asked, as many rows as tenants found; eventually consistent, so a touch of a moment ago may be
        missing)."""
        index = self._model.by_queue_hour
        return {item.user_id for hour in hours for item in index.query(hour)}

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

    def retire(self, user_id: str, day: str) -> int | None:
        """Claim the queue for removal, if it is still unused since `day`: the claim's time (epoch ms), or None."""
        m = self._model
        return self._claim(user_id, (m.queue_used_day == day) & (m.queue_state == ACTIVE))

    def reclaim(self, user_id: str) -> int | None:
        """Claim again a retirement gone stale (its job died), to finish it: the claim's time, or None when a
        send took the queue back meanwhile."""
        m = self._model
        cutoff = int(time.time() * 1000) - STALE_RETIREMENT_MS
        return self._claim(user_id, (m.queue_state == RETIRING) & (m.queue_state_at < cutoff))

    def still_claimed(self, user_id: str, claimed_ms: int) -> bool:
        """The retirement claimed at `claimed_ms` is still this one (no send took the queue back)."""
        item = self._model.get(user_id, consistent_read=True, attributes_to_get=["queue_state", "queue_state_at"])
        return item.queue_state == RETIRING and int(item.queue_state_at or 0) == claimed_ms

    def _claim(self, user_id: str, condition: Condition) -> int | None:
        m, now = self._model, int(time.time() * 1000)
        try:
            m(user_id).update(actions=[m.queue_state.set(RETIRING), m.queue_state_at.set(now)], condition=condition)
            return now
        except UpdateError as exc:
            if condition_failed(exc):
                return None
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
