"""The sweeper: every minute, start a drain for any queue that has work and no drainer.

CloudWatch alarms act only on state changes. If messages arrive while a queue's alarm is still in
ALARM (the last drain ended, the alarm has not re-evaluated yet), no notification comes and, without
this, the queue would wait forever: MoonMail's stall. (A stage may go without queue alarms, and
precompile starts a drain itself: the sweeper is what catches a queue whose start failed or whose drain
died.) A queue with visible messages and no live lease gets a drain started (which takes the lease, so a
drain started twice still runs once). Expired leases of dead drainers are retaken the same way.

Which queues it looks at each minute: the free-plan queue, and the tenant queues in use (email put on them
this hour or the last, UTC, a drain holding them within the last hour, or found holding email by a sweep:
chalicelib.jobs.queues_in_use). Every other queue is looked at in the few minutes of the day that are its
own (a backstop, `DAILY_WINDOW` of them: a sweep started late or failed still leaves it looked at that
day). A depth check is a request, $0.40 a million: once a minute for each of a stage's queues was $0.017 a
tenant and month, idle or not (issue 53); this way a tenant costs a look a minute only while it sends, and
an hour or two after. If what is in use cannot be read (the index being built after an upgrade, a
throttled read), every queue is looked at, as before.

One depth check is a round trip and a millisecond or so of botocore's CPU (over ten on a 256 MB
Lambda), and a stage has one queue per paid tenant: checked one after another, a few thousand queues
would outlast the function's minute, and a sweep that times out starts nothing after the queue it
reached and counts as a failed invocation. So the checks run
WORKERS at once, no new check starts once the function's time is nearly up, and the queues are taken
from a point that moves on each minute by SEGMENT: a sweep that cannot check them all still checks
each one within ceil(queues / SEGMENT) minutes, with nothing to remember between sweeps (a cursor
kept in the container would be lost with it, and a cold start would begin again at the first queue).
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from botocore.exceptions import ClientError

from chalicelib.core import log
from chalicelib.core.aws import NO_SUCH_QUEUE
from chalicelib.core.config import Settings
from chalicelib.core.ports import SqsQueueListing
from chalicelib.core.queue_listing import queue_urls
from chalicelib.core.routing import is_free_queue, is_our_queue
from chalicelib.stores.ports.queues import LeaseHolders

# Checks at once: each mostly waits on its round trip, and boto3's clients are thread-safe with a pool
# of 64 connections (chalicelib.core.aws), more than these and their drain starts use. More would not
# help on a small Lambda, whose CPU already bounds the checks a second (bench/sweeper.py).
WORKERS = 24
# Queues a sweep is sure to check in its time: 24 workers for the ~50 s it has check 1,000 queues
# even at a second a check, where one normally takes tens of milliseconds. The start moves on by this
# much each minute, so each stretch of the queues is checked first once every ceil(queues / SEGMENT)
# minutes; a larger step would leave queues unchecked for good whenever sweeps fell short of it.
SEGMENT = 1_000
# No check starts with less time left than this: one in flight may take a few seconds (SQS's and
# DynamoDB's retries), and the function must end before Lambda stops it, or the sweep counts as failed.
STOP_MARGIN_MS = 10_000
# What is left of the function's time when the sweep stops waiting for checks still in flight.
LAST_MARGIN_MS = 2_000
MINUTES_A_DAY = 1440
# A queue not in use is looked at in this many minutes of the day running: one sweep that starts late, fails
# (its retry comes a minute on) or runs short of time does not leave it unlooked at for a day.
DAILY_WINDOW = 5


class InUse(Protocol):
    """The queues in use (chalicelib.jobs.queues_in_use.QueuesInUse)."""

    def at(self, now: float) -> set[str]: ...

    def keep(self, queue: str, now: float) -> None: ...


@dataclass(frozen=True)
class SweepLimits:
    workers: int = WORKERS  # checks at once
    segment: int = SEGMENT  # how far the starting point moves on each minute


@dataclass
class SweepResult:
    queues: int = 0  # of this stage, listed
    looked_at: int = 0  # this minute's: the free queue, those in use, and the day's share of the others
    checked: int = 0
    with_work: int = 0
    started: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # queues seen holding email (their age is measured after)
    failed: int = 0  # checks that raised (other than the queue having been removed meanwhile)
    first_error: BaseException | None = None

    @property
    def skipped_for_time(self) -> int:
        return self.looked_at - self.checked - self.failed


class Sweeper:
    def __init__(
        self,
        settings: Settings,
        sqs: SqsQueueListing,
        leases: LeaseHolders,
        in_use: InUse,
        start: Callable[[str], None],
        *,
        limits: SweepLimits = SweepLimits(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._sqs = sqs
        self._leases = leases
        self._in_use = in_use
        self._start = start
        self._workers = limits.workers
        self._segment = limits.segment
        self._clock = clock

    def sweep(self, remaining_ms: Callable[[], int] = lambda: 60_000) -> SweepResult:
        """Start a drain for every queue with work and no live lease, in the time `remaining_ms` leaves;
        says what it checked, found and started (a check left behind may still add to it)."""
        result = self.run(remaining_ms)
        self._report(result)
        return result

    def run(self, remaining_ms: Callable[[], int] = lambda: 60_000) -> SweepResult:
        urls = self.our_queues()
        names = self.to_look_at(sorted(urls))
        result = SweepResult(queues=len(urls), looked_at=len(names))
        if names:
            self._check_all(urls, self.rotated(names), remaining_ms, result)
        if result.failed and not result.checked and result.first_error is not None:
            raise result.first_error  # nothing could be checked: the function is broken, not a queue
        return result

    def our_queues(self) -> dict[str, str]:
        """This stage's queues: name to URL."""
        r = self._settings.resources
        urls: dict[str, str] = {}
        for url in queue_urls(self._sqs, r.prefix):
            name = url.rsplit("/", 1)[-1]
            if is_our_queue(r, name):
                urls[name] = url
        return urls

    def to_look_at(self, names: Sequence[str]) -> list[str]:
        """This minute's queues, of those listed: the free queue, the tenant queues in use, and the others whose
        minute of the day this is."""
        in_use = self._queues_in_use()
        minute = int(self._clock() // 60) % MINUTES_A_DAY
        r = self._settings.resources
        return [n for n in names if in_use is None or n in in_use or is_free_queue(r, n) or _its_minutes(n, minute)]

    def _queues_in_use(self) -> set[str] | None:
        """The queues in use now (chalicelib.jobs.queues_in_use); None if that cannot be read."""
        try:
            return self._in_use.at(self._clock())
        except Exception as exc:
            log.warning("queues in use not read: every queue is looked at", error=repr(exc))
            return None

    def rotated(self, names: Sequence[str]) -> list[str]:
        """The queues (sorted: ListQueues promises no order, and the rotation needs a stable one) from
        this minute's starting point on, round to the one before it."""
        segments = math.ceil(len(names) / self._segment)
        start = int(self._clock() // 60) % segments * self._segment
        return [*names[start:], *names[:start]]

    def has_work(self, url: str) -> bool | None:
        """Whether the queue has visible messages; None if it was removed since it was listed (an idle
        queue retired meanwhile)."""
        try:
            attrs = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        except ClientError as exc:
            if exc.response["Error"]["Code"] in NO_SUCH_QUEUE:
                return None
            raise
        return int(attrs["Attributes"]["ApproximateNumberOfMessages"]) > 0

    def _check_all(
        self, urls: dict[str, str], order: list[str], remaining_ms: Callable[[], int], result: SweepResult
    ) -> None:
        take = _Dispenser(order, lambda: remaining_ms() > STOP_MARGIN_MS)
        lock = threading.Lock()
        workers = min(self._workers, len(order))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sweep")
        try:
            futures = [pool.submit(self._work, urls, take, result, lock) for _ in range(workers)]
            wait(futures, timeout=max(0.0, (remaining_ms() - LAST_MARGIN_MS) / 1000))
        finally:
            # A check stuck past the function's time is left behind, not waited for: ending in time
            # matters more than its answer, which the next minute's sweep gets again.
            pool.shutdown(wait=False, cancel_futures=True)

    def _work(self, urls: dict[str, str], take: _Dispenser, result: SweepResult, lock: threading.Lock) -> None:
        for name in take:
            try:
                outcome = self._check(name, urls[name])
            except Exception as exc:  # one queue's error is logged, not the end of every other's check
                log.warning("sweeper could not check a queue", queue=name, error=repr(exc))
                with lock:
                    result.failed += 1
                    result.first_error = result.first_error or exc
                continue
            with lock:
                result.checked += 1
                if outcome is not None:
                    result.with_work += 1
                    result.busy.append(name)
                if outcome:
                    result.started.append(name)

    def _check(self, name: str, url: str) -> bool | None:
        """None: no work (or no queue); False: work, and a live drainer; True: work, and a drain started."""
        if not self.has_work(url):
            return None
        try:
            self._in_use.keep(name, self._clock())  # looked at every minute until found empty
        except Exception as exc:  # the drain still starts: the mark is for the next minutes' sweeps
            log.warning("queue with email not marked in use", queue=name, error=repr(exc))
        # Leases are read only for queues with work: most queues are empty most minutes.
        if self._leases.holder(name) is not None:
            return False
        self._start(name)
        return True

    def _report(self, result: SweepResult) -> None:
        fields = {
            "queues": result.queues,
            "looked_at": result.looked_at,
            "checked": result.checked,
            "with_work": result.with_work,
            "started": len(result.started),
            "failed": result.failed,
            "skipped_for_time": result.skipped_for_time,
        }
        if result.started:
            log.info("sweeper started drains", queues=result.started)
        if result.skipped_for_time:
            # Those are checked within the next few minutes (the rotation); every minute it happens
            # says the sweep no longer fits its function's time.
            log.warning("sweep ran out of time", **fields)
        else:
            log.info("swept", **fields)


def _its_minutes(queue: str, minute: int) -> bool:
    """Whether `minute` (of the UTC day) is one of the DAILY_WINDOW the queue is looked at in when not in use."""
    return (minute - daily_minute(queue)) % MINUTES_A_DAY < DAILY_WINDOW


def daily_minute(queue: str) -> int:
    """The minute of the UTC day at which a queue not in use is looked at: spread evenly, and stable (a hash
    of its name, not Python's, which changes from process to process)."""
    return zlib.crc32(queue.encode()) % MINUTES_A_DAY


class _Dispenser:
    """The queues to check, one at a time to whichever worker asks, until `go_on` says time is up."""

    def __init__(self, order: Sequence[str], go_on: Callable[[], bool]) -> None:
        self._names: Iterator[str] = iter(order)
        self._go_on = go_on
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        with self._lock:
            if not self._go_on():
                raise StopIteration
            return next(self._names)
