"""Parked email: a paused campaign's (or a paused free-plan tenant's) email, off its queue until resumed.

Parking takes the email off the queue (no redelivery budget spent, no SQS requests while paused, however
long the pause) into the schedule store, in a partition of its own per campaign (or per tenant) that is
never a minute, so the releaser's minute scan never reads it. Resuming puts it back on the queue at once
and starts a drain. The partition names (`held#...`) and the tenant batch's campaign id (`_held`) are
stored data, kept as they were when parked email was called held.
"""

from __future__ import annotations

from collections.abc import Callable

from chalicelib.core import log
from chalicelib.queueing.email_queue import EmailQueue
from chalicelib.queueing.enqueuer import Outgoing
from chalicelib.stores.ports.schedule import ParkingStore, StoredBatch
from chalicelib.stores.schedule import BatchMoved, BodyGone, ScheduleStore

# The campaign id of a paused free-plan tenant's parked batches, which mix campaigns (ids may not start with `_`).
PARKED_TENANT_CAMPAIGN = "_held"


PARKED_PARTITIONS = "held#"  # what every partition of parked email begins with


def parked_bucket(user_id: str, campaign_id: str | None = None) -> str:
    """The schedule store partition of a paused campaign's parked email (or a paused free-plan tenant's)."""
    return f"{PARKED_PARTITIONS}{user_id}#{campaign_id}" if campaign_id else f"{PARKED_PARTITIONS}{user_id}"


def keep_parked(store: ScheduleStore) -> tuple[int, int]:
    """Once after upgrading: every parked batch whose body is still under `scheduled/` (and would expire 45
    days after it was parked) moved under `parked/`. (kept, put back meanwhile.) Safe to run again."""
    kept = moved = 0
    for batch in store.parked_under_lifecycle(PARKED_PARTITIONS):
        try:
            store.keep_parked(batch)
            kept += 1
        except (BatchMoved, BodyGone):  # resumed meanwhile, or expired already (its resume says so)
            moved += 1
    return kept, moved


class ParkedEmail:
    def __init__(
        self, store: ParkingStore, email_queue: EmailQueue, start_drain: Callable[[str, int | None], None]
    ) -> None:
        self._store = store
        self._email_queue = email_queue
        self._start_drain = start_drain

    def park(
        self, user_id: str, campaign_id: str | None, plan: str, queue: str, emails: list[tuple[str, str]]
    ) -> StoredBatch:
        """Store (address, queued JSON) pairs of one paused campaign (None: of a paused free-plan tenant)."""
        return self._store.put(
            user_id=user_id,
            campaign_id=campaign_id or PARKED_TENANT_CAMPAIGN,
            plan=plan,
            queue=queue,
            due_ms=0,
            deadline_ms=None,
            emails=emails,
            bucket=parked_bucket(user_id, campaign_id),
        )

    def put_back(self, batch: StoredBatch, emails: list[tuple[str, str]], url: str | None = None) -> bool:
        """One parked batch back on its queue, and out of the store once all of it is there.

        `url`: the queue's, from a drainer that just received from it (put there as it is)."""
        campaign = None if batch.campaign_id == PARKED_TENANT_CAMPAIGN else batch.campaign_id
        outgoing = [Outgoing(a, b) for a, b in emails]
        if url is None:
            failures = self._email_queue.put(batch.queue, batch.user_id, campaign, outgoing)
        else:
            failures = self._email_queue.put_at(url, batch.user_id, campaign, outgoing)
        if failures:  # kept for the next resume; the ones queued now are duplicates then, dropped by the claim
            log.error("parked email not put back", item=batch.item, reason=failures[0].reason)
            return False
        self._store.remove(batch)
        return True

    def unpark(self, user_id: str, campaign_id: str | None = None) -> int:
        """Put a resumed campaign's (or tenant's) parked email back on its queue now, and start its drain.

        Called after the resume is written: a drainer that parks email after this read sees the resume
        itself and puts that email back (chalicelib.send.parking), so nothing stays parked."""
        queues: set[str] = set()
        n = 0
        for batch in self._store.parked(parked_bucket(user_id, campaign_id)):
            try:
                emails = self._store.emails(batch)
            except BodyGone:
                self._lost(batch)
                continue
            if self.put_back(batch, emails):
                n += len(emails)
                queues.add(batch.queue)
        for queue in queues:
            self._start_drain(queue, None)
        if n:
            log.info("parked email put back", user=user_id, campaign=campaign_id, emails=n)
        return n

    def left(self, user_id: str, campaign_id: str | None = None) -> int:
        """How many batches of a campaign's (or a tenant's) parked email are still parked (one Query)."""
        return len(self._store.parked(parked_bucket(user_id, campaign_id)))

    def _lost(self, batch: StoredBatch) -> None:
        """A parked batch whose body is gone: parked before parked email had a prefix of its own, under
        `scheduled/`, and paused past that prefix's 45 days (`moonsend keep-parked` moves such bodies). Its
        row is removed, said in the log, rather than fail every resume of the campaign for good."""
        log.error(
            "parked email lost: its body expired before the resume",
            item=batch.item,
            user=batch.user_id,
            campaign=batch.campaign_id,
            emails=batch.count,
        )
        self._store.remove(batch, keep_body=True)
