"""Per-campaign counters (queued, rejected, sent, failed, ...), updated atomically.

One DynamoDB item per (tenant, campaign); every change is an atomic ADD, so concurrent precompile
and drainer invocations never lose an increment. `moonsend status` reads them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pynamodb.attributes import BooleanAttribute, NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from chalicelib.core import log
from chalicelib.core.resources import CAMPAIGNS_BY_CREATED
from chalicelib.stores.ports.campaigns import CampaignCounts
from chalicelib.stores.tables import bound, update_if, warm
from chalicelib.stores.timeline import KINDS as TIMELINE_KINDS
from chalicelib.stores.timeline import Busiest, Timeline

if TYPE_CHECKING:  # the ports module reads this one's CampaignCounts
    from chalicelib.stores.ports.campaigns import Counts

# What happened to a campaign's recipients (queued ... suppressed), then what the mailbox providers said
# about the sent ones (delivered, bounced, complained: from SES's events, counted once per recipient).
COUNTERS = (
    "scheduled",  # kept in the schedule store (they count as queued when released)
    "released",  # scheduled recipients put on the queue at their time (counted in `queued` too)
    "queued",
    "rejected",
    "sent",
    "failed",
    "suppressed",
    "delivered",
    "bounced",
    "complained",
    "unsubscribed",
    "cancelled",
    "expired",  # not sent by the campaign's deadline (scheduledAt + expiresAfter)
    "retried",  # failed recipients queued again by retry-failed (and taken off `failed`)
    "opened",  # unique opens (a person's first open per recipient)
    "clicked",  # unique clicks (a person's)
    # Recipients whose email a machine opened (a privacy proxy, a scanner: chalicelib.ingest.machines).
    "machine_opened",
    "machine_clicked",  # recipients one of whose links a machine followed
)
_CACHE_MAX = 10_000
_WRITE_TRIES = 5


class _ByCreated(GlobalSecondaryIndex["CampaignStatsModel"]):
    """The tenant's campaigns by when each was created (keys only: see chalicelib.core.resources.IndexDef)."""

    class Meta:
        index_name = CAMPAIGNS_BY_CREATED
        projection = KeysOnlyProjection()

    user_id = UnicodeAttribute(hash_key=True)
    created_ms = NumberAttribute(range_key=True)


class CampaignStatsModel(Model):
    class Meta:
        table_name = "unbound"

    by_created = _ByCreated()

    user_id = UnicodeAttribute(hash_key=True)
    campaign_id = UnicodeAttribute(range_key=True)
    scheduled = NumberAttribute(default=0)
    released = NumberAttribute(default=0)
    # `released` counts every release of the campaign: set by its first message's write (this release on), or
    # by `moonsend count-released` for a campaign begun before releases were counted.
    counts_releases = BooleanAttribute(null=True)
    # Its ledger rows carry their entry times (chalicelib.stores.ledger_tally): set by its first message's write.
    entries_marked = BooleanAttribute(null=True)
    queued = NumberAttribute(default=0)
    rejected = NumberAttribute(default=0)
    sent = NumberAttribute(default=0)
    failed = NumberAttribute(default=0)
    suppressed = NumberAttribute(default=0)
    delivered = NumberAttribute(default=0)
    bounced = NumberAttribute(default=0)
    complained = NumberAttribute(default=0)
    unsubscribed = NumberAttribute(default=0)
    opened = NumberAttribute(default=0)
    cancelled = NumberAttribute(default=0)
    expired = NumberAttribute(default=0)
    retried = NumberAttribute(default=0)
    scheduled_at_ms = NumberAttribute(null=True)  # the campaign's scheduledAt
    schedule_buckets = UnicodeSetAttribute(null=True)  # the schedule store's minutes holding its batches
    deadline_ms = NumberAttribute(null=True)  # scheduledAt + expiresAfter
    control = UnicodeAttribute(null=True)  # paused | cancelled (chalicelib.stores.campaign_control)
    clicked = NumberAttribute(default=0)
    machine_opened = NumberAttribute(default=0)
    machine_clicked = NumberAttribute(default=0)
    first_sent_ms = NumberAttribute(null=True)
    last_sent_ms = NumberAttribute(null=True)
    last_error = UnicodeAttribute(null=True)
    sender_snapshot = UnicodeAttribute(null=True)  # the campaign's sender, fixed (chalicelib.stores.campaign_sender)
    # Written with the sender_snapshot, by the campaign's first accepted message: when, and its subject (the template).
    created_ms = NumberAttribute(null=True)  # the key of the by_created index: GET /campaigns, newest first
    subject = UnicodeAttribute(null=True)
    busiest_sent = NumberAttribute(null=True)  # the most sends of one second (chalicelib.stores.timeline)
    busiest_at_ms = NumberAttribute(null=True)


class CampaignStats:
    def __init__(self, table_name: str, region: str, timeline: Timeline | None = None) -> None:
        self._model = bound(CampaignStatsModel, table_name, region)
        self._timeline = timeline
        self._busiest: dict[tuple[str, str], int] = {}  # the busiest second's sends this container knows of
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Create the DynamoDB client now, in one thread, rather than in many at first use. Not the timeline's:
        most functions that count never write it, and its client is made once, under aws's lock, when one does."""
        warm(self._model)

    def add(self, user_id: str, campaign_id: str, *, error: str | None = None, **deltas: int) -> None:
        self.add_counts(user_id, campaign_id, deltas, error=error)

    def add_counts(
        self,
        user_id: str,
        campaign_id: str,
        deltas: Mapping[str, int],
        *,
        error: str | None = None,
        sent_seconds: Mapping[int, int] | None = None,
    ) -> None:
        """Add to the campaign's counters (and its timeline): `sent_seconds` says in which epoch second each of
        the `sent` were made (BufferedStats gathers them; by default, now)."""
        self._count(user_id, campaign_id, error, deltas)
        if self._timeline is None or not any(deltas.get(k, 0) > 0 for k in TIMELINE_KINDS):
            return
        now = time.time()
        if not sent_seconds and deltas.get("sent", 0) > 0:
            sent_seconds = {int(now): deltas["sent"]}
        try:
            busiest = self._timeline.add(user_id, campaign_id, now, deltas, sent_seconds or {})
            if busiest is not None:
                self._note_busiest(user_id, campaign_id, busiest)
        except Exception as exc:
            # The counters are written: raising now would have the caller count them again on its retry. The
            # timeline is a chart, not a record (the ledger is): a minute's gap is the lesser harm.
            log.warning("timeline not written", user=user_id, campaign=campaign_id, error=type(exc).__name__)

    def _note_busiest(self, user_id: str, campaign_id: str, busiest: Busiest) -> None:
        """Keep the campaign's busiest second on its item: written only when this container saw a busier one
        than it knew (a refused condition costs a write too), and only if it is busier than the one stored."""
        key = (user_id, campaign_id)
        with self._lock:
            if busiest.sent <= self._busiest.get(key, 0):
                return
            if len(self._busiest) >= _CACHE_MAX:
                self._busiest.clear()
            self._busiest[key] = busiest.sent
        m = self._model
        update_if(
            m(user_id, campaign_id),
            [m.busiest_sent.set(busiest.sent), m.busiest_at_ms.set(busiest.at_s * 1000)],
            m.busiest_sent.does_not_exist() | (m.busiest_sent < busiest.sent),
        )

    def _count(self, user_id: str, campaign_id: str, error: str | None, deltas: Mapping[str, int]) -> None:
        actions = []
        for name, delta in deltas.items():
            if name not in COUNTERS:
                raise ValueError(f"unknown counter {name}")
            if delta:
                actions.append(getattr(self._model, name).add(delta))
        if deltas.get("sent"):
            now = int(time.time() * 1000)
            actions.append(self._model.last_sent_ms.set(now))
            actions.append(
                self._model.first_sent_ms.set(self._model.first_sent_ms | now)  # if_not_exists
            )
        if error:
            actions.append(self._model.last_error.set(error[:1000]))
        if actions:
            self._model(user_id, campaign_id).update(actions=actions)

    def flush(self) -> None:
        """Nothing is gathered here: each `add` is written at once (BufferedStats gathers)."""

    def note_schedule(
        self,
        user_id: str,
        campaign_id: str,
        scheduled_at_ms: int | None,
        deadline_ms: int | None,
        bucket: str | None = None,
    ) -> None:
        """Keep the campaign's time, deadline and schedule-store minutes beside its counters."""
        m = self._model
        actions: list[Any] = [m.scheduled_at_ms.set(scheduled_at_ms)] if scheduled_at_ms else []
        if deadline_ms:
            actions.append(m.deadline_ms.set(deadline_ms))
        if bucket:
            actions.append(m.schedule_buckets.add({bucket}))
        if actions:
            m(user_id, campaign_id).update(actions=actions)

    def schedule_buckets(self, user_id: str, campaign_id: str) -> list[str]:
        try:
            item = self._model.get(user_id, campaign_id, consistent_read=True, attributes_to_get=["schedule_buckets"])
        except self._model.DoesNotExist:
            return []
        return sorted(item.schedule_buckets or [])

    def read(self, user_id: str, campaign_id: str) -> CampaignCounts | None:
        """The campaign's counters as they stand now (a consistent read: what a correction is conditioned on)."""
        try:
            return _counts(self._model.get(user_id, campaign_id, consistent_read=True))
        except self._model.DoesNotExist:
            return None

    def correct(self, read: CampaignCounts, drift: Mapping[str, int]) -> bool:
        """Add `drift` to the counters `read` showed, only if none of them moved since (a count landing meanwhile
        would make the drift wrong: False, to be read again). An item not there yet is made with them."""
        m = self._model
        actions = [getattr(m, name).add(delta) for name, delta in drift.items() if delta]
        if not actions:
            return True
        condition = None
        for name in drift:
            attribute, value = getattr(m, name), read[name]
            if name not in COUNTERS:
                raise ValueError(f"unknown counter {name}")
            term = (attribute.does_not_exist() | (attribute == 0)) if value == 0 else attribute == value
            condition = term if condition is None else condition & term
        return update_if(m(read.user_id, read.campaign_id), actions, condition)

    def get(self, user_id: str, campaign_id: str) -> CampaignCounts | None:
        for item in self._model.query(user_id, self._model.campaign_id == campaign_id):
            return _counts(item)
        return None

    def newest(
        self, user_id: str, *, before: tuple[int, str] | None = None, limit: int = 50
    ) -> tuple[list[CampaignCounts], tuple[int, str] | None]:
        """The tenant's campaigns newest first (by when each was created), from the one after `before` (a
        (created ms, campaign id) the previous page ended with); and where this page ended, when there may
        be more. One query of the keys-only index and one batch read of the items it names."""
        conn = self._model._get_connection()
        start = None
        if before is not None:
            created, campaign = before
            start = {"user_id": {"S": user_id}, "campaign_id": {"S": campaign}, "created_ms": {"N": str(created)}}
        answer = conn.query(
            user_id, index_name=CAMPAIGNS_BY_CREATED, scan_index_forward=False, exclusive_start_key=start, limit=limit
        )
        keys = [(k["campaign_id"]["S"], int(k["created_ms"]["N"])) for k in answer.get("Items", [])]
        items = {c.campaign_id: c for c in self._many(user_id, [c for c, _ in keys])}
        page = [items[c] for c, _ in keys if c in items]
        last = answer.get("LastEvaluatedKey")
        return page, (int(last["created_ms"]["N"]), str(last["campaign_id"]["S"])) if last else None

    def list_unlisted(self, now_ms: int) -> int:
        """Give each campaign of a previous release (counters, a fixed Sender, no created time) the created time
        its first send or its schedule says, so that GET /campaigns lists it; how many. A scan: an operator's
        one-off after upgrading (`moonsend index-campaigns`), safe to run again (a condition keeps a time set)."""
        m = self._model
        listed = 0
        for item in m.scan(m.created_ms.does_not_exist() & m.sender_snapshot.exists()):
            created = item.first_sent_ms or item.scheduled_at_ms or item.last_sent_ms or now_ms
            if update_if(item, [m.created_ms.set(int(created))], m.created_ms.does_not_exist()):
                listed += 1
        return listed

    def count_releases(self, rows: Callable[[str, str], int]) -> int:
        """Give each campaign begun before releases were counted its `released` count, from its ledger: every
        recipient accepted has one row, so the releases are the counters' queued, scheduled, rejected and
        suppressed less the rows (`rows(user, campaign)`), at most `scheduled`. How many campaigns with
        scheduled recipients were counted. A scan and, per such campaign, a count of its ledger partition: an
        operator's one-off after upgrading (`moonsend count-released`), safe to run again."""
        m = self._model
        counted = 0
        for item in m.scan(m.counts_releases.does_not_exist()):
            for _ in range(_WRITE_TRIES):
                if self._count_releases(item, rows):
                    counted += 1 if (item.scheduled or 0) > 0 else 0
                    break
                try:  # its counters moved meanwhile: read again
                    item = m.get(item.user_id, item.campaign_id, consistent_read=True)
                except m.DoesNotExist:
                    break
                if item.counts_releases:
                    break
        return counted

    def _count_releases(self, item: CampaignStatsModel, rows: Callable[[str, str], int]) -> bool:
        """One campaign's count, written only if none of the counters it is made of moved since they were read
        (a release or a message meanwhile makes the figure wrong): False, to be read again."""
        m = self._model
        read = {name: int(getattr(item, name) or 0) for name in ("queued", "scheduled", "rejected", "suppressed")}
        actions: list[Any] = [m.counts_releases.set(True)]
        if read["scheduled"]:
            accepted = rows(item.user_id, item.campaign_id)
            released = read["queued"] + read["scheduled"] + read["rejected"] + read["suppressed"] - accepted
            actions.append(m.released.set(max(0, min(read["scheduled"], read["queued"], released))))
        condition = m.counts_releases.does_not_exist()
        for name, value in read.items():
            attribute = getattr(m, name)
            condition &= (attribute.does_not_exist() | (attribute == 0)) if value == 0 else attribute == value
        return update_if(item, actions, condition)

    def _many(self, user_id: str, campaign_ids: list[str]) -> Iterator[CampaignCounts]:
        for i in range(0, len(campaign_ids), 100):
            for item in self._model.batch_get([(user_id, c) for c in campaign_ids[i : i + 100]]):
                yield _counts(item)

    def all(self) -> Iterator[CampaignCounts]:
        for item in self._model.scan():
            yield _counts(item)


def _counts(item: CampaignStatsModel) -> CampaignCounts:
    return CampaignCounts(
        user_id=item.user_id,
        campaign_id=item.campaign_id,
        counts={name: int(getattr(item, name) or 0) for name in COUNTERS},
        first_sent_ms=int(item.first_sent_ms) if item.first_sent_ms else None,
        last_sent_ms=int(item.last_sent_ms) if item.last_sent_ms else None,
        last_error=item.last_error,
        scheduled_at_ms=int(item.scheduled_at_ms) if item.scheduled_at_ms else None,
        deadline_ms=int(item.deadline_ms) if item.deadline_ms else None,
        control=item.control,
        created_ms=int(item.created_ms) if item.created_ms else None,
        subject=item.subject,
        sender_snapshot=item.sender_snapshot,
        busiest_sent=int(item.busiest_sent) if item.busiest_sent else None,
        busiest_at_ms=int(item.busiest_at_ms) if item.busiest_at_ms else None,
        counts_releases=bool(item.counts_releases),
        entries_marked=bool(item.entries_marked),
    )


# A flush's tries of a campaign whose write fails: at once, then after these waits (s).
FLUSH_RETRY_S = (0.0, 0.2, 1.0)
# Counts pending this long (wall-clock: a frozen Lambda sandbox thaws later) are dropped, not written: the
# recount restores them from the ledger once the campaign settles (chalicelib.jobs.recount), and it counts on
# no count landing later than this after its change.
STALE_S = 300.0


class BufferedStats:
    """Counter increments gathered in memory and written at most once per interval per campaign.

    The drainer counts one event per email; writing each would cost a DynamoDB write per email. The
    counters are for progress and reports (the per-recipient state is the record of truth), so they
    are flushed every `interval_s` and when a drain ends. A campaign's counts that could not be written
    within STALE_S are dropped: the recount writes them.
    """

    def __init__(self, stats: Counts, interval_s: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self._stats = stats
        self._interval = interval_s
        self._sleep = sleep
        self._pending: dict[tuple[str, str], dict[str, int]] = {}
        self._seconds: dict[tuple[str, str], dict[int, int]] = {}  # sends by the epoch second they were made
        self._errors: dict[tuple[str, str], str] = {}
        self._since: dict[tuple[str, str], float] = {}  # when each campaign's oldest pending count was added
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()

    def add(self, user_id: str, campaign_id: str, *, error: str | None = None, **deltas: int) -> None:
        self.add_counts(user_id, campaign_id, deltas, error=error)

    def add_counts(
        self,
        user_id: str,
        campaign_id: str,
        deltas: Mapping[str, int],
        *,
        error: str | None = None,
        sent_seconds: Mapping[int, int] | None = None,
    ) -> None:
        now = time.time()
        with self._lock:
            self._since.setdefault((user_id, campaign_id), now)
            bucket = self._pending.setdefault((user_id, campaign_id), {})
            for name, delta in deltas.items():
                bucket[name] = bucket.get(name, 0) + delta
            sent = deltas.get("sent", 0)
            if sent > 0:
                seconds = self._seconds.setdefault((user_id, campaign_id), {})
                for second, n in (sent_seconds or {int(now): sent}).items():
                    seconds[second] = seconds.get(second, 0) + n
            if error:
                self._errors[(user_id, campaign_id)] = error
            due = time.monotonic() - self._last_flush >= self._interval
        if due:
            # Counted on the way (a send just recorded): a write that fails keeps its counts for the next flush,
            # and must not fail what is being recorded.
            with contextlib.suppress(Exception):
                self.flush()

    def flush(self) -> None:
        """Write each campaign's pending counts. A campaign whose write fails is tried again (twice, shortly
        after), and if it still fails its counts stay pending for the next flush while the others are written
        all the same (a drain and the events queue mix tenants: one's throttled write must not drop another's
        counts); the first error is raised once every campaign was tried."""
        with self._lock:
            pending, seconds, errors, since = self._pending, self._seconds, self._errors, self._since
            self._pending, self._seconds, self._errors, self._since = {}, {}, {}, {}
            self._last_flush = time.monotonic()
        now = time.time()
        stale = [key for key in pending if now - since.get(key, now) > STALE_S]
        if stale:
            log.warning("campaign counts too old to write, left to the recount", campaigns=len(stale))
        keys, failed = [key for key in pending if key not in stale], dict[tuple[str, str], Exception]()
        for wait in FLUSH_RETRY_S:
            if wait:
                self._sleep(wait)
            failed = {}
            for key in keys:
                user_id, campaign_id = key
                try:
                    self._stats.add_counts(
                        user_id, campaign_id, pending[key], error=errors.get(key), sent_seconds=seconds.get(key)
                    )
                except Exception as exc:
                    failed[key] = exc
            if not failed:
                return
            keys = list(failed)
        with self._lock:  # kept for the next flush, added to what came meanwhile
            for key in failed:
                self._since[key] = min(since[key], self._since.get(key, since[key]))
                bucket = self._pending.setdefault(key, {})
                for name, delta in pending[key].items():
                    bucket[name] = bucket.get(name, 0) + delta
                mine = self._seconds.setdefault(key, {})
                for second, n in (seconds.get(key) or {}).items():
                    mine[second] = mine.get(second, 0) + n
                if key in errors:
                    self._errors.setdefault(key, errors[key])
        log.error("campaign counters not written, kept for the next flush", campaigns=len(failed))
        raise next(iter(failed.values()))
