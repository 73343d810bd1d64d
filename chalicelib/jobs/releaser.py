"""release_scheduled: once a minute, move scheduled email that is about due onto its queue.

Each run releases every stored batch due within `schedule_lead_s` (90 s by default: a run and a half).
A released email goes on its tenant's queue with `DelaySeconds` up to its campaign's time, so it becomes
visible at `scheduledAt` and not before; the releaser then starts a drain of that queue told to begin at
the earliest time it released (the drain waits for it), so sending starts within about a second of
`scheduledAt` instead of whenever the queue's alarm or the sweeper notices. Batches of a cancelled
campaign are recorded `cancelled`; batches past their campaign's deadline (`scheduledAt + expiresAfter`,
after an outage or a long pause) are recorded `expired` with the reason, and neither is queued.

Crash safety: a batch is removed from the store only after its emails are on the queue and recorded
`queued`. A run that dies in between leaves the batch, and the next run queues it again; the drainer's
claim makes the second copy of an email a no-op.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import MAX_DELAY_S, expired_reason
from chalicelib.queueing.email_queue import EmailQueue
from chalicelib.queueing.enqueuer import Outgoing
from chalicelib.stores.campaign_control import CANCELLED as CAMPAIGN_CANCELLED
from chalicelib.stores.ledger_model import CANCELLED, EXPIRED
from chalicelib.stores.ports.campaigns import CampaignSchedule, ControlSwitch
from chalicelib.stores.ports.schedule import ReleaseStore, StoredBatch
from chalicelib.stores.recorder import Recorder
from chalicelib.stores.schedule import BodyGone, minute_of

CANCELLED_REASON = "campaign cancelled before its scheduled time"


@dataclass
class ReleaseResult:
    released: int = 0
    expired: int = 0
    cancelled: int = 0
    batches: int = 0
    left: int = 0  # batches that could not be queued this time (tried again next run)
    lost: int = 0  # batches whose stored body was gone: removed, said on their campaign
    starts: dict[str, int] = field(default_factory=dict)  # queue -> earliest due (epoch ms) released


class Releaser:
    def __init__(
        self,
        settings: Settings,
        store: ReleaseStore,
        recorder: Recorder,
        buckets: CampaignSchedule,
        control: ControlSwitch,
        email_queue: EmailQueue,
        start_drain: Callable[[str, int | None], None],
    ) -> None:
        self._settings = settings
        self._store = store
        self._recorder = recorder
        self._buckets = buckets  # each campaign's schedule partitions, kept beside its counters
        self._control = control
        self._email_queue = email_queue
        self._start_drain = start_drain

    def release(self, now_ms: int | None = None) -> ReleaseResult:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        up_to = now + int(self._settings.schedule_lead_s * 1000)
        result = ReleaseResult()
        cursor = up_to
        for batch in list(self._store.due(up_to)):
            result.batches += 1
            try:
                self._release_one(batch, now, result)
            except Exception as exc:  # one batch's trouble must not hold up the others: tried next run
                result.left += 1
                log.error("scheduled batch not released", item=batch.item, error=f"{type(exc).__name__}: {exc}")
                if not self._set_aside(batch):
                    cursor = min(cursor, batch.due_ms)  # the cursor stays at the oldest batch left behind
        self._store.advance(cursor)
        for queue, due in result.starts.items():
            self._start_drain(queue, due)
        if result.batches:
            log.info(
                "scheduled email released",
                batches=result.batches,
                released=result.released,
                expired=result.expired,
                cancelled=result.cancelled,
                left=result.left,
                lost=result.lost,
            )
        return result

    def _resolve_lost(self, batch: StoredBatch, result: ReleaseResult) -> None:
        """A batch whose body is gone: stored twice by a move of an older release (its twin released it
        and deleted the body), or kept past the bucket's lifecycle. Nothing can be queued from it: its row is
        removed with the reason said, on the campaign and in the log, rather than tried for good."""
        reason = (
            f"a scheduled batch of {batch.count} email(s) due at {minute_of(batch.due_ms)}Z has no stored body "
            "(released by another copy of it, or kept past the schedule store's 45 days): removed"
        )
        log.error("scheduled batch without its body", item=batch.item, reason=reason)
        self._recorder.note_error(batch.user_id, batch.campaign_id, reason)
        self._store.remove(batch, keep_body=True)
        result.lost += 1

    def cancel_scheduled(self, user_id: str, campaign_id: str) -> int:
        """A cancelled campaign's batches still waiting for their time: recorded `cancelled` now."""
        n = 0
        buckets = self._buckets.schedule_buckets(user_id, campaign_id)
        for batch in self._store.of_campaign(user_id, campaign_id, buckets):
            keys = [e for e, _ in self._store.emails(batch)]
            done = self._recorder.unsent(user_id, campaign_id, CANCELLED, keys, CANCELLED_REASON)
            self._store.remove(batch)
            n += done
        return n

    def _set_aside(self, batch: StoredBatch) -> bool:
        """The batch tried again at each run from a partition of its own, so that the cursor goes on: a
        batch that fails every run would otherwise keep the cursor at its minute, and each run would read
        every minute since (1,440 more Queries a day) until the releaser ran out of time for every tenant.
        False when it could not be moved either (the cursor then waits for it)."""
        try:
            self._store.set_aside(batch)
            return True
        except Exception as exc:
            log.error("scheduled batch not set aside", item=batch.item, error=type(exc).__name__)
            return False

    def _release_one(self, batch: StoredBatch, now: int, result: ReleaseResult) -> None:
        try:
            emails = self._store.emails(batch)
        except BodyGone:
            self._resolve_lost(batch, result)
            return
        keys = [e for e, _ in emails]
        user, campaign = batch.user_id, batch.campaign_id
        if self._control.state(user, campaign) == CAMPAIGN_CANCELLED:
            n = self._recorder.unsent(user, campaign, CANCELLED, keys, CANCELLED_REASON)
            result.cancelled += n
        elif batch.deadline_ms is not None and now >= batch.deadline_ms:
            reason = expired_reason(batch.deadline_ms)
            result.expired += self._recorder.unsent(user, campaign, EXPIRED, keys, reason)
        else:
            delay = min(MAX_DELAY_S, max(0, math.ceil((batch.due_ms - now) / 1000)))
            outgoing = [Outgoing(key=e, body=body, delay_seconds=delay) for e, body in emails]
            failures = self._email_queue.put(batch.queue, user, campaign, outgoing)
            failed = {f.key for f in failures}
            queued = [e for e in keys if e not in failed]
            self._recorder.released(user, campaign, queued)
            result.released += len(queued)
            if queued:
                start = max(batch.due_ms, now)
                result.starts[batch.queue] = min(result.starts.get(batch.queue, start), start)
            if failures:  # the rest go next run (those queued now are then dropped as duplicates)
                raise RuntimeError(f"{len(failures)} of {len(emails)} not queued: {failures[0].reason}")
        self._store.remove(batch)
