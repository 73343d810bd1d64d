"""A digest's status, as `moonsend digest status` and `GET /digests/{id}` show it, and the list of a tenant's
digests (`GET /digests`), read without their items.

Counted from the stored rows with the run's own planning (chalicelib.digest.plan), so that "pending" means
what the next run would mail: recipients with at least one unmailed item in the window, not retracted.
A status reads at most STATUS_MAX_ROWS rows (a few Query pages, whatever the digest holds): past them the
counts stop and say so (`countsComplete` false, "10000+" in the terminal), lower bounds of the real ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core import cron
from chalicelib.core.contract import iso_ms
from chalicelib.core.digest_contract import DEFAULT_MAX_ITEMS
from chalicelib.digest.assembly import period_of
from chalicelib.digest.plan import plan_recipient
from chalicelib.stores.digests import DigestState, DigestStore, ReadBudget, Since

# The rows a status reads at most (a recipient's state and markers are rows too): 10,000 items of 8 KB
# are 80 Query pages of 1 MB, small ones 5 or so. A run reads them all; a status need not.
STATUS_MAX_ROWS = 10_000
# A run asked for through the API reads every row of the digest: one per digest per this, none while one runs.
RUN_ASK_INTERVAL_S = 300.0


@dataclass(frozen=True)
class DigestHead:
    """What a digest's definition row says of it, read without its items: what a list of digests shows."""

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

    @classmethod
    def of(cls, state: DigestState, now: float) -> DigestHead:
        d = state.definition
        return cls(
            digest_id=d.id,
            complete=d.complete,
            schedule=d.schedule,
            scheduled=d.schedule is not None and state.scheduled == d.schedule,
            window_s=d.window_s,
            max_items=d.max_items or DEFAULT_MAX_ITEMS,
            next_run_at=_next_run(d.schedule, now),
            last_run_at=state.last_run_at,
            last_run=state.last_run,
            running=state.running_until is not None and state.running_until > now,
        )

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
        }


@dataclass(frozen=True)
class DigestStatus:
    head: DigestHead
    recipients: int  # with items stored
    recipients_pending: int  # whom the next run would mail
    items_stored: int
    items_pending: int  # unmailed, applicable, in the window (at most maxItems of them per email)
    items_expired: int  # past the window, not yet dropped
    items_retracted: int  # retracted before they were mailed
    counts_complete: bool = True  # False: STATUS_MAX_ROWS read, the counts above are at least these

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.head.as_dict(),
            "recipients": self.recipients,
            "recipientsPending": self.recipients_pending,
            "itemsStored": self.items_stored,
            "itemsPending": self.items_pending,
            "itemsExpired": self.items_expired,
            "itemsRetracted": self.items_retracted,
            "countsComplete": self.counts_complete,
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

    def claim_run(self, user_id: str, digest_id: str) -> int | None:
        """A run asked for through the API: None when it may start now (claimed), else the whole seconds
        until one may be asked (a run under way, or one asked or run in the last RUN_ASK_INTERVAL_S)."""
        wait = self._store.claim_asked_run(user_id, digest_id, self._clock(), RUN_ASK_INTERVAL_S)
        return None if wait is None else math.ceil(wait)

    def heads(self, user_id: str, after: str | None, limit: int) -> tuple[list[DigestHead], str | None]:
        """The tenant's digests in id order after `after`, at most `limit`, read without their items; and the
        last one's id when there are more."""
        states, more = self._store.states(user_id, after, limit)
        now = self._clock()
        return [DigestHead.of(state, now) for state in states], more

    def status(self, user_id: str, digest_id: str) -> DigestStatus | None:
        """The digest's status, or None if the tenant has no such digest."""
        state = self._store.state(user_id, digest_id)
        if state is None:
            return None
        d, now = state.definition, self._clock()
        window_s, max_items = float(d.window_s or 0), d.max_items or DEFAULT_MAX_ITEMS
        retracted = self._store.retracted(user_id, digest_id)
        recipients = pending = stored = items_pending = expired = withdrawn = 0
        budget = ReadBudget(STATUS_MAX_ROWS + 1)  # one more: spent, there are more than STATUS_MAX_ROWS
        # What the next run would read: not what stopped mattering by the last run (see DigestRun.since).
        since = Since(min(state.last_run_at, now), window_s) if state.last_run_at is not None else None
        for rows in self._store.recipients(user_id, digest_id, budget=budget, since=since):
            recipients += 1
            stored += len(rows.items)
            plan, skipped = plan_recipient(rows, period_of(now), now, window_s, max_items, retracted)
            expired += len(skipped.expired)
            withdrawn += skipped.retracted
            if plan is not None and plan.items:
                pending += 1
                items_pending += plan.items_total
        return DigestStatus(
            head=DigestHead.of(state, now),
            recipients=recipients,
            recipients_pending=pending,
            items_stored=stored,
            items_pending=items_pending,
            items_expired=expired,
            items_retracted=withdrawn,
            counts_complete=not budget.spent,
        )


def _next_run(schedule: str | None, now: float) -> float | None:
    try:
        return cron.next_fire(schedule, now) if schedule else None
    except ValueError:  # stored before its expression was checked as it is now
        return None
