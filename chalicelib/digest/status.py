"""A digest's status, as `moonsend digest status` and `GET /digests/{id}` show it.

Counted from the stored rows with the run's own planning (chalicelib.digest.plan), so that "pending" means
what the next run would mail: recipients with at least one unmailed item in the window, not retracted.
Reading every row costs one Query page per 1 MB of items (about 2,000 items): a status of a digest with
100,000 stored items reads about 50 pages.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core import cron
from chalicelib.core.contract import iso_ms
from chalicelib.core.digest_contract import DEFAULT_MAX_ITEMS
from chalicelib.digest.assembly import period_of
from chalicelib.digest.plan import plan_recipient
from chalicelib.stores.digests import DigestStore


@dataclass(frozen=True)
class DigestStatus:
    digest_id: str
    complete: bool  # templates, schedule and window all given: it can run
    schedule: str | None
    scheduled: bool  # its EventBridge schedule is put with that expression
    window_s: float | None
    max_items: int
    next_run_at: float | None
    last_run_at: float | None
    last_run: dict[str, Any] | None
    running: bool
    recipients: int  # with items stored
    recipients_pending: int  # whom the next run would mail
    items_stored: int
    items_pending: int  # unmailed, applicable, in the window (at most maxItems of them per email)
    items_expired: int  # past the window, not yet dropped
    items_retracted: int  # retracted before they were mailed

    def as_dict(self) -> dict[str, Any]:
        def iso(at: float | None) -> str | None:
            return iso_ms(int(at * 1000)) if at is not None else None

        return {
            "digest": self.digest_id,
            "complete": self.complete,
            "schedule": self.schedule,
            "scheduled": self.scheduled,
            "windowSeconds": self.window_s,
            "maxItems": self.max_items,
            "nextRunAt": iso(self.next_run_at),
            "lastRunAt": iso(self.last_run_at),
            "lastRun": self.last_run,
            "running": self.running,
            "recipients": self.recipients,
            "recipientsPending": self.recipients_pending,
            "itemsStored": self.items_stored,
            "itemsPending": self.items_pending,
            "itemsExpired": self.items_expired,
            "itemsRetracted": self.items_retracted,
        }


class DigestStatusReader:
    def __init__(self, store: DigestStore, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    def ready(self, user_id: str, digest_id: str) -> bool | None:
        """Whether the digest can run (its definition complete), without reading its items; None if the
        tenant has no such digest."""
        state = self._store.state(user_id, digest_id)
        return None if state is None else state.definition.complete

    def status(self, user_id: str, digest_id: str) -> DigestStatus | None:
        """The digest's status, or None if the tenant has no such digest."""
        state = self._store.state(user_id, digest_id)
        if state is None:
            return None
        d, now = state.definition, self._clock()
        window_s, max_items = float(d.window_s or 0), d.max_items or DEFAULT_MAX_ITEMS
        retracted = self._store.retracted(user_id, digest_id)
        recipients = pending = stored = items_pending = expired = withdrawn = 0
        for rows in self._store.recipients(user_id, digest_id):
            recipients += 1
            stored += len(rows.items)
            plan, skipped = plan_recipient(rows, period_of(now), now, window_s, max_items, retracted)
            expired += len(skipped.expired)
            withdrawn += skipped.retracted
            if plan is not None and plan.items:
                pending += 1
                items_pending += plan.items_total
        return DigestStatus(
            digest_id=digest_id,
            complete=d.complete,
            schedule=d.schedule,
            scheduled=d.schedule is not None and state.scheduled == d.schedule,
            window_s=d.window_s,
            max_items=max_items,
            next_run_at=_next_run(d.schedule, now),
            last_run_at=state.last_run_at,
            last_run=state.last_run,
            running=state.running_until is not None and state.running_until > now,
            recipients=recipients,
            recipients_pending=pending,
            items_stored=stored,
            items_pending=items_pending,
            items_expired=expired,
            items_retracted=withdrawn,
        )


def _next_run(schedule: str | None, now: float) -> float | None:
    try:
        return cron.next_fire(schedule, now) if schedule else None
    except ValueError:  # stored before its expression was checked as it is now
        return None
