"""A digest's run for one period: every recipient with unmailed items gets one email, exactly once.

The pipe, in the order that makes it exactly once (docs/digests.md):

1. Each recipient's rows are planned (chalicelib.digest.plan): nothing is written for one with nothing new.
2. The items its email carries are noted on its state row (`open_assembly`) before anything is queued, so
   that a crash from here on repeats the same email, never a different one.
3. The emails go through the normal pipeline (precompile's steps, in process) as campaign
   `<digest id>-<period>`: the ledger, the tenant's rate and queue, suppression, unsubscribe, tracking and
   reports all apply, and the ledger drops a recipient already queued for the period (a run repeated, a
   crash after queueing).
4. The items the ledger accepted (queued, or already) are marked mailed and the assembly closed; an item
   stored since step 1 is in neither, so it goes into the next period's email. A recipient the ledger has
   rejected for the period (now, or before a crash) has its assembly closed with nothing marked.

A recipient's writes failing (steps 2 and 4, and dropping its expired items) are that recipient's alone: the
run goes on and its last run says who and why (`failures`); an assembly left open is finished by the next.
A run holds at most MAIL_BATCH_BYTES of items planned (and one recipient's email over it) before it mails,
and its reads count against that budget too; one invocation reads at most about RUN_READ_BYTES before it
goes on in a fresh one. It reads only the items and markers that can still matter: those whose end is
after its `since`, the previous run's time (items past the window before then were that run's to deal with).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import repeat
from typing import Any, Protocol

from chalicelib.core import log
from chalicelib.core.contract import Campaign, PrecompileRequest, Recipient, iso_ms
from chalicelib.core.digest_contract import DEFAULT_MAX_ITEMS, DigestDefinition, Item
from chalicelib.digest.plan import RecipientPlan, plan_recipient
from chalicelib.ingest.precompile import PrecompileResult
from chalicelib.stores.digests import DigestState, DigestStore, RecipientDigest, Since
from chalicelib.stores.tenants import TenantRegistry

# Recipients per request through the pipeline (precompile's batch: its ledger look-up, its queue batches).
MAIL_BATCH = 500
# The bytes of items (their JSON) a run holds planned before it mails them: 500 recipients with 50 items of
# 8 KB would be 200 MB of JSON, and three times that as Python objects and rendered emails. At most this,
# and one recipient's email more (maxItems of 8 KB: 4 MB), is held at once: about 3 x 36 MB in the process.
MAIL_BATCH_BYTES = 32 * 1024 * 1024
# The failures a run's record names (each also logged); the count says how many there were.
FAILURES_KEPT = 10
# Recipients' state writes (an assembly opened, items marked) sent at once: each is one conditional
# UpdateItem of its own item, so they do not contend.
STATE_WRITERS = 16
# The bytes one invocation reads (rows of state, markers and items, as DynamoDB returns them) before it
# stops at a flush point and goes on in a fresh invocation, as when its time runs short: what one
# invocation costs stays bounded however big the digest (a run without a time limit, the CLI's, reads on).
RUN_READ_BYTES = 256 * 1024 * 1024
# A run reaches a flush point (mails what it planned, checks its time, renews its hold) at every batch and
# at least this often, however few recipients have anything new.
FLUSH_S = 15.0
# A run's hold on its digest, renewed at every flush point: a run that died frees it this soon, so Lambda's retry
# of the scheduled invocation (one and two minutes later) finds it free.
HOLD_S = 90.0
# A run that finds the digest held watches the hold, looking again at least this often: renewed, its holder
# lives (and starts this run's period when it ends); lapsed unrenewed, its holder died, and this run takes it.
WATCH_S = 20.0
# ... as long as it has this much of its time to spare besides.
WAIT_MARGIN_S = 30.0


class Mailer(Protocol):
    def handle_request(self, request: PrecompileRequest) -> PrecompileResult: ...


class DigestNotReady(Exception):
    """The digest cannot run: no definition, or one without templates, schedule or window yet."""


class DigestBusy(Exception):
    """Another run of the digest holds it: this one's time is noted on the digest, and the holder starts a
    run for it when it ends (chalicelib.digest.runner), so the invocation ends, not retried by Lambda."""


class DigestRecipientsFailed(Exception):
    """A finished run left recipients out (a write of theirs failed: throttled past the SDK's retries, most
    likely): raised so that Lambda runs the event again a minute later, and that run mails only them (the
    others' items are marked mailed). After Lambda's last retry, their items wait for the next period."""


@dataclass
class DigestRun:
    user_id: str
    digest_id: str
    period: str
    recipients: int = 0  # recipients with rows
    emails: int = 0  # recipients whose email went through the pipeline (queued, or recorded why not)
    resumed: int = 0  # of those, emails of an assembly a crash had left open
    items_mailed: int = 0
    items_waiting: int = 0  # unmailed beyond maxItems: the next period's
    items_expired: int = 0  # past the window: dropped
    items_retracted: int = 0
    busy: int = 0  # recipients with another period's assembly open (finished by the next run)
    refused: int = 0  # recipients the pipeline refused (recorded with why): their items wait for the next run
    failed: int = 0  # recipients whose writes failed: left for the next run (`failures` says why)
    failures: list[dict[str, str]] = field(default_factory=list)  # the first FAILURES_KEPT of them
    unfinished: bool = False  # stopped for time: the rest of the period is for a continuation
    resume_after: str | None = None  # where it stopped: the last recipient done (its continuation's `after`)
    since: float | None = None  # what it left unread: items (and their markers) whose end came by then
    marker_rows: int = 0  # of those, marker rows
    bytes_read: int = 0  # what those rows came to
    campaigns: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "campaigns"}
        d["campaigns"] = sorted(self.campaigns)
        return d


@dataclass(frozen=True)
class Planned:
    """A recipient planned for mailing, holding what its email and its settling need and nothing more (its
    rows, with every stored item, are let go): `size` is the bytes of its items and metadata."""

    key: str
    recipient: Recipient
    last_period: str | None
    open_ids: frozenset[str]
    state_keep: frozenset[str]  # markers a state row kept before issue 38, of items still stored
    plan: RecipientPlan
    size: int

    @classmethod
    def of(cls, rows: RecipientDigest, plan: RecipientPlan) -> Planned:
        recipient = rows.recipient
        size = sum(len(i.to_json()) for i in plan.items) + len(json.dumps(recipient.metadata)) + 256
        size += sum(len(i) for i in rows.open_ids)
        return cls(
            rows.key,
            recipient,
            rows.last_period,
            rows.open_ids,
            rows.state_mailed & plan.stored_ids,
            replace(plan, stored_ids=frozenset()),
            size,
        )


def _since(state: DigestState, period: str, after: str | None, now: float) -> float | None:
    """What a run may leave unread: what stopped mattering by the previous run (None: never ran). A
    continuation keeps its predecessor's, which read from there too."""
    last = state.last_run or {}
    if after is not None and last.get("period") == period and "since" in last:
        since = last["since"]
    else:
        since = state.last_run_at
    return None if since is None else min(float(since), now)


def period_of(when: float) -> str:
    """The period a run at `when` (its scheduled time) mails for: its UTC minute, `20261125T1300Z`."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y%m%dT%H%MZ")


def campaign_id(digest_id: str, period: str) -> str:
    return f"{digest_id}-{period}"


class DigestAssembly:
    def __init__(
        self,
        store: DigestStore,
        tenants: TenantRegistry,
        mailer: Mailer,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store = store
        self._tenants = tenants
        self._mailer = mailer
        self._clock = clock
        self._sleep = sleep

    def run(
        self,
        user_id: str,
        digest_id: str,
        scheduled_at: float | None = None,
        time_left: Callable[[], float] | None = None,
        after: str | None = None,
    ) -> DigestRun:
        """Mail the digest for the period of `scheduled_at` (now, for a run on demand). With `time_left`
        (seconds), it stops at a flush point once that is spent, and says where (`resume_after`): a run of
        the same period `after` that recipient goes on from there without reading again what was done."""
        now = self._clock()
        period = period_of(scheduled_at if scheduled_at is not None else now)
        state = self._state(user_id, digest_id)
        definition = state.definition
        run = DigestRun(user_id, digest_id, period, since=_since(state, period, after, now))
        token = uuid.uuid4().hex
        when = scheduled_at if scheduled_at is not None else now
        self._take_hold(run, token, when, time_left or (lambda: float("inf")))
        try:
            limited = time_left is not None
            return self._run(run, definition, token, now, time_left or (lambda: float("inf")), after, when, limited)
        finally:
            self._store.release_run(user_id, digest_id, token)

    def _take_hold(self, run: DigestRun, token: str, when: float, time_left: Callable[[], float]) -> None:
        """The hold, taken at the run's start; held by another run, the hold is watched until it is either
        renewed (its holder lives: this run is noted, and answered busy) or lapses (taken: this run goes on).

        A run killed without its `finally` (a timeout, out of memory, a lost sandbox) leaves its hold until
        HOLD_S after its last renewal. Lambda's retry, or a second firing of the digest's schedule, may come a second or
        two minutes after it died: answered busy at once, it would end there (busy is a success to Lambda),
        and nobody would finish the period (the dead holder never starts the run it was noted for). Watching
        the hold tells the two apart whatever the timing, at the cost of at most one WATCH_S of waiting for a
        live holder and HOLD_S for a dead one."""
        watched: float | None = None  # the hold's end as this run last saw it
        waited = 0.0
        while True:
            try:
                self._hold(run, token, when)
                return
            except DigestBusy:
                until = self._held_until(run)
                if watched is not None and until > watched:
                    raise  # renewed since: its holder is alive, and starts this run's period when it ends
                wait = min(max(0.0, until - self._clock()) + 1.0, WATCH_S)
                # Neither renewed nor lapsed after a whole hold's time: the clocks disagree; not this run's to take.
                if wait + WAIT_MARGIN_S > time_left() or waited >= HOLD_S + WATCH_S:
                    raise
                log.info("watching another run's hold", digest=run.digest_id, held_for_s=until - self._clock())
                watched = until
                self._sleep(wait)
                waited += wait

    def _held_until(self, run: DigestRun) -> float:
        state = self._store.state(run.user_id, run.digest_id)
        return (state.running_until or 0.0) if state is not None else 0.0

    def _hold(self, run: DigestRun, token: str, when: float) -> None:
        """Take (or renew) the digest's hold; held by another run, this one's time is noted for that run to
        start when it ends, and DigestBusy says so."""
        for _ in range(3):  # the hold freed between our two writes: try it again
            now = self._clock()
            if self._store.hold_run(run.user_id, run.digest_id, token, now, HOLD_S):
                return
            if self._store.note_waiting(run.user_id, run.digest_id, when, now):
                break
        raise DigestBusy(
            f"digest {run.digest_id} of {run.user_id}: another run is under way; this one ({run.period}) "
            "is noted and starts when it ends"
        )

    def next_waiting(self, user_id: str, digest_id: str, period: str) -> float | None:
        """After a run of `period` ended (its hold released): the scheduled time of a run that found it busy,
        to be started now; None if none, or if this run's period was as late (it mailed what that would)."""
        waiting = self._store.take_waiting(user_id, digest_id)
        return waiting if waiting is not None and period_of(waiting) > period else None

    def _run(
        self,
        run: DigestRun,
        definition: DigestDefinition,
        token: str,
        now: float,
        time_left: Callable[[], float],
        after: str | None,
        when: float,
        limited: bool = True,
    ) -> DigestRun:
        user_id, digest_id, period = run.user_id, run.digest_id, run.period
        retracted = self._store.retracted(user_id, digest_id)
        window_s = float(definition.window_s or 0)
        max_items = definition.max_items or DEFAULT_MAX_ITEMS
        planned: list[Planned] = []
        held = 0  # bytes of the planned recipients' items
        flushed_at = time.monotonic()
        since = Since(run.since, window_s) if run.since is not None else None
        with ThreadPoolExecutor(max_workers=STATE_WRITERS, thread_name_prefix="digest") as pool:
            for rows in self._store.recipients(user_id, digest_id, after=after, since=since):
                run.recipients += 1
                run.marker_rows += rows.marker_rows
                run.bytes_read += rows.bytes_read
                held += rows.bytes_read  # what was read counts against the budget, planned or not
                plan, skipped = plan_recipient(rows, period, now, window_s, max_items, retracted)
                self._drop(run, rows, skipped.expired)
                run.items_retracted += skipped.retracted
                if plan is not None:
                    entry = Planned.of(rows, plan)
                    planned.append(entry)
                    held += entry.size
                done = rows.key
                del rows  # its items, all of them, let go before the next recipient's are read
                # A flush point: a full batch (in recipients or in bytes), or FLUSH_S since the last
                # (recipients with nothing new are read without mailing, and the hold must be renewed and
                # the time checked all the same).
                full = len(planned) >= MAIL_BATCH or held >= MAIL_BATCH_BYTES
                if not full and time.monotonic() - flushed_at < FLUSH_S:
                    continue
                planned, retracted = self._still_applicable(run, planned, retracted)
                self._mail(run, definition, self._opened(run, planned, pool), pool)
                planned, held, flushed_at = [], 0, time.monotonic()
                if time_left() <= 0 or (limited and run.bytes_read >= RUN_READ_BYTES):
                    run.unfinished, run.resume_after = True, done  # everything up to it is done
                    break
                self._hold(run, token, when)  # renewed; lost (another run took it after ours lapsed): stop
            planned, retracted = self._still_applicable(run, planned, retracted)
            self._mail(run, definition, self._opened(run, planned, pool), pool)
        self._store.record_run(user_id, digest_id, now, run.as_dict())
        log.info("digest run", **{k: v for k, v in run.as_dict().items() if k != "campaigns"})
        return run

    def _state(self, user_id: str, digest_id: str) -> DigestState:
        state = self._store.state(user_id, digest_id)
        if state is None or not state.definition.complete:
            missing = "no definition" if state is None else "its subject, body, schedule and window"
            raise DigestNotReady(f"digest {digest_id} of {user_id} cannot run: {missing} not given yet")
        return state

    def _drop(self, run: DigestRun, rows: RecipientDigest, expired: frozenset[str]) -> None:
        """Items past the window, never mailed: deleted now (TTL would within days), and counted."""
        if not expired:
            return
        try:
            self._store.drop_items(run.user_id, run.digest_id, rows.key, expired)
        except Exception as exc:  # this recipient's trouble: TTL deletes them, the run goes on
            _failed(run, rows.key, "drop", exc)
            return
        run.items_expired += len(expired)

    def _still_applicable(
        self, run: DigestRun, planned: list[Planned], retracted: frozenset[str]
    ) -> tuple[list[Planned], frozenset[str]]:
        """The planned recipients without the items retracted since the run read the retractions (read again
        here, right before their emails are assembled: a run is minutes long), and the retractions as read.
        One Query of the digest's retractions per flush point (at most one per MAIL_BATCH recipients). An
        assembly a crash left open is mailed as it was opened (its email may be queued already)."""
        if not planned:
            return planned, retracted
        now_retracted = self._store.retracted(run.user_id, run.digest_id)
        new = now_retracted - retracted
        if not new:
            return planned, now_retracted
        kept: list[Planned] = []
        for entry in planned:
            items = [i for i in entry.plan.items if entry.plan.resumed or i.id not in new]
            left_out = len(entry.plan.items) - len(items)
            run.items_retracted += left_out
            if items or entry.plan.resumed:
                plan = replace(entry.plan, items=items, items_total=entry.plan.items_total - left_out)
                kept.append(replace(entry, plan=plan))
        return kept, now_retracted

    def _opened(self, run: DigestRun, planned: list[Planned], pool: ThreadPoolExecutor) -> list[Planned]:
        """The planned recipients whose items are noted on their state before their email is queued (an
        open one is already). One conditional write each, sent side by side: in sequence, their round
        trips would be most of a run's time. One that fails is left out of this run (recorded)."""

        def open_one(entry: Planned) -> bool | Exception:
            if entry.plan.resumed:
                return True
            ids = [i.id for i in entry.plan.items]
            try:
                return self._store.open_assembly(
                    run.user_id,
                    run.digest_id,
                    entry.key,
                    entry.plan.period,
                    ids,
                    entry.plan.keep_until,
                    entry.last_period,
                )
            except Exception as exc:  # this recipient's alone
                return exc

        opened = list(pool.map(open_one, planned))
        for entry, outcome in zip(planned, opened, strict=True):
            if isinstance(outcome, Exception):
                _failed(run, entry.key, "open", outcome)
        # Refused: another run is between its steps 2 and 4 for them, or mailed them since we read their rows.
        run.busy += sum(1 for outcome in opened if outcome is False)
        return [entry for entry, outcome in zip(planned, opened, strict=True) if outcome is True]

    def _mail(
        self, run: DigestRun, definition: DigestDefinition, batch: list[Planned], pool: ThreadPoolExecutor
    ) -> None:
        """Each period's emails through the pipeline, then their items marked mailed."""
        if not batch:
            return
        tenant = self._tenants.get(run.user_id, fresh=True)
        if tenant is None:
            raise DigestNotReady(f"digest {run.digest_id}: tenant {run.user_id} has no sender registered")
        for period in sorted({entry.plan.period for entry in batch}):
            group = [entry for entry in batch if entry.plan.period == period]
            refused: set[str] = set()
            mailing = [entry for entry in group if entry.plan.items]
            if mailing:
                cid = campaign_id(run.digest_id, period)
                request = PrecompileRequest(
                    user_id=run.user_id,
                    plan=tenant.plan,
                    sender=tenant.sender,
                    campaign=Campaign(id=cid, subject=definition.subject or "", body=definition.body or ""),
                    recipients=[_recipient(entry) for entry in mailing],
                    rejected=[],
                    registered=True,  # the registry's own sender: its keys are not handed out, nor compared
                )
                result = self._mailer.handle_request(request)  # raises: nothing marked, the assemblies stay open
                run.campaigns.add(cid)
                # Refused now, or by an earlier run of this period (the ledger had them rejected: the
                # pipeline then counts them as duplicates, and they were never queued).
                refused = {r.email.lower() for r in result.rejected if r.email} | result.known_rejected
            # Those with nothing left to send (a resumed assembly) are only closed.
            for settled in pool.map(self._settle, repeat(run), group, repeat(period), repeat(refused)):
                settled.add_to(run)

    def _settle(self, run: DigestRun, entry: Planned, period: str, refused: set[str]) -> Settled:
        """Queued (or already, or suppressed, each recorded by the pipeline): its items marked mailed.
        Refused (a template error, the daily cap, a queue that would not take it), now or by the ledger
        before a crash (a resumed assembly whose email the ledger has rejected): recorded with the reason by
        the pipeline, and its items left for the next run. The markers follow what the ledger accepted.
        A write that fails leaves the assembly open (the next run finishes it) and is recorded."""
        plan = entry.plan
        ids = [i.id for i in plan.items]
        try:
            if entry.key in refused:
                self._store.close_assembly(run.user_id, run.digest_id, entry.key, period)
                return Settled(refused=1)
            marked = set(ids) | (entry.open_ids if plan.resumed else set())
            self._store.mark_mailed(
                run.user_id,
                run.digest_id,
                entry.key,
                period,
                marked,
                entry.state_keep,
                plan.keep_until,
                plan.markers_until,
            )
        except Exception as exc:  # this recipient's alone: its assembly stays open
            return Settled(failure=_failure(entry.key, "mark", exc))
        return Settled(
            emails=1 if ids else 0,
            resumed=int(plan.resumed),
            items_mailed=len(ids),
            items_waiting=plan.items_total - len(ids),
        )


@dataclass(frozen=True)
class Settled:
    """One recipient's outcome, added to the run's counts by the thread that owns them."""

    emails: int = 0
    resumed: int = 0
    items_mailed: int = 0
    items_waiting: int = 0
    refused: int = 0
    failure: dict[str, str] | None = None

    def add_to(self, run: DigestRun) -> None:
        run.emails += self.emails
        run.resumed += self.resumed
        run.items_mailed += self.items_mailed
        run.items_waiting += self.items_waiting
        run.refused += self.refused
        if self.failure is not None:
            _note(run, self.failure)


def _failure(key: str, step: str, exc: Exception) -> dict[str, str]:
    return {"recipient": key, "step": step, "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}


def _failed(run: DigestRun, key: str, step: str, exc: Exception) -> None:
    _note(run, _failure(key, step, exc))


def _note(run: DigestRun, failure: dict[str, str]) -> None:
    """A recipient's failure: counted, named in the run's record (the first few), logged (every one)."""
    run.failed += 1
    if len(run.failures) < FAILURES_KEPT:
        run.failures.append(failure)
    log.error("digest recipient failed", user=run.user_id, digest=run.digest_id, **failure)


def _recipient(entry: Planned) -> Recipient:
    """The recipient with its metadata, `items` (newest first) and `items_total` for the templates."""
    recipient, plan = entry.recipient, entry.plan
    metadata = {**recipient.metadata, "items": [_shown(i) for i in plan.items], "items_total": plan.items_total}
    return Recipient(recipient.email, metadata)


def _shown(item: Item) -> dict[str, Any]:
    return {"id": item.id, "type": item.type, "at": iso_ms(int(item.at * 1000)), "data": item.data}
