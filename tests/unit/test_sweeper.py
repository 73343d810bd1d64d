"""The sweeper at scale, against a fake SQS client: no local stack, no wall-clock assertions.

The function's time is a fake too: each depth check spends a fixed number of milliseconds of it, so how
many checks fit in a sweep depends on the budget given, not on how fast this machine is.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from chalicelib.core.config import Settings
from chalicelib.jobs.sweeper import (
    DAILY_WINDOW,
    SEGMENT,
    STOP_MARGIN_MS,
    WORKERS,
    Sweeper,
    SweepLimits,
    daily_minute,
)
from tests.fakes.sqs import ListedQueues

SETTINGS = Settings.from_env({"MOONSEND_STAGE": "test"})
ENDPOINT = "https://sqs.us-east-1.amazonaws.com/123456789012"
A_MINUTE = 29_000_000  # minutes since the epoch, about 2025: the rotation works from the real clock's


def tenant_queues(n: int) -> list[str]:
    return [f"{SETTINGS.resources.tenant_queue_prefix}u{i:05d}" for i in range(n)]


class FakeTime:
    """The function's remaining time, spent by the fake's depth checks (`cost_ms` each)."""

    def __init__(self, budget_ms: int, cost_ms: int) -> None:
        self.budget_ms = budget_ms
        self.cost_ms = cost_ms
        self.spent_ms = 0
        self._lock = threading.Lock()

    def spend(self) -> None:
        with self._lock:
            self.spent_ms += self.cost_ms

    def remaining_ms(self) -> int:
        return self.budget_ms - self.spent_ms


class FakeSqs(ListedQueues):
    """ListQueues (as SQS answers it: tests.fakes.sqs.ListedQueues) and GetQueueAttributes over named queues
    of given depths, counting the depth checks and the most of them in flight at once."""

    def __init__(
        self,
        depths: dict[str, int],
        clock: FakeTime | None = None,
        pause_s: float = 0.0,
        removed: Iterable[str] = (),
        failing: Iterable[str] = (),
    ) -> None:
        super().__init__(f"{ENDPOINT}/{q}" for q in depths)
        self.depths = depths
        self.clock = clock
        self.pause_s = pause_s
        self.removed = set(removed)  # listed, then deleted before their depth check
        self.failing = set(failing)  # their depth check is throttled
        self.checks: Counter[str] = Counter()
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        name = QueueUrl.rsplit("/", 1)[-1]
        with self._lock:
            self.checks[name] += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.clock is not None:
                self.clock.spend()
            if self.pause_s:
                time.sleep(self.pause_s)
            if name in self.removed:
                raise _error("AWS.SimpleQueueService.NonExistentQueue")
            if name in self.failing:
                raise _error("Throttling")
            return {"Attributes": {"ApproximateNumberOfMessages": str(self.depths[name])}}
        finally:
            with self._lock:
                self.in_flight -= 1


def _error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "GetQueueAttributes")


class FakeLeases:
    """Leases as the drains take them: a started drain holds its queue's."""

    def __init__(self, held: Iterable[str] = ()) -> None:
        self.held = set(held)
        self.read: list[str] = []

    def holder(self, queue: str) -> object | None:
        self.read.append(queue)
        return object() if queue in self.held else None


class Drains:
    def __init__(self, leases: FakeLeases) -> None:
        self.leases = leases
        self.started: Counter[str] = Counter()
        self._lock = threading.Lock()

    def start(self, queue: str) -> None:
        with self._lock:
            self.started[queue] += 1
            self.leases.held.add(queue)


class InUse:
    """The queues in use at a time (chalicelib.jobs.queues_in_use): by default, every tenant's."""

    def __init__(self, queues: Iterable[str] | None = None, fails: bool = False) -> None:
        self.queues = None if queues is None else set(queues)
        self.fails = fails
        self.asked: list[float] = []
        self.kept: list[str] = []

    def at(self, now: float) -> set[str]:
        self.asked.append(now)
        if self.fails:
            raise RuntimeError("the index is being built")
        return set(tenant_queues(10_000)) if self.queues is None else set(self.queues)

    def keep(self, queue: str, now: float) -> None:
        self.kept.append(queue)
        if self.queues is not None:
            self.queues.add(queue)


def sweeper(
    sqs: FakeSqs, leases: FakeLeases, drains: Drains, minute: list[int], in_use: InUse | None = None, **kw: Any
) -> Sweeper:
    return Sweeper(
        SETTINGS,
        sqs,  # type: ignore[arg-type]
        leases,  # type: ignore[arg-type]
        in_use or InUse(),
        drains.start,
        limits=SweepLimits(**kw),
        clock=lambda: minute[0] * 60.0 + 17,
    )


def test_five_thousand_queues_are_swept_within_the_time_without_raising():
    queues = tenant_queues(5_000)
    depths = {q: (3 if i % 7 == 0 else 0) for i, q in enumerate(queues)}
    depths |= {SETTINGS.resources.free_queue.name: 1, "moonsend-test-dlq": 9, "moonsend-test-ses-events": 4}
    clock = FakeTime(budget_ms=55_000, cost_ms=5)  # 5,003 checks at 5 ms: 25 s of the function's 55 s
    leases = FakeLeases()
    drains = Drains(leases)
    result = sweeper(FakeSqs(depths, clock), leases, drains, [A_MINUTE]).run(clock.remaining_ms)
    with_work = {q for q in queues if depths[q]} | {SETTINGS.resources.free_queue.name}
    assert (result.queues, result.checked, result.skipped_for_time, result.failed) == (5_001, 5_001, 0, 0)
    assert set(result.started) == with_work and set(drains.started) == with_work
    assert sorted(leases.read) == sorted(with_work)  # leases are read only for queues with work
    assert clock.remaining_ms() > STOP_MARGIN_MS


def test_a_queue_past_the_first_thousand_listed_is_swept_too():
    """ListQueues without MaxResults stops at 1,000 URLs with no NextToken: the sweeper pages by MaxResults."""
    queues = tenant_queues(2_500)
    depths = dict.fromkeys(queues, 0) | {queues[-1]: 2}  # the last in SQS's order has work
    leases = FakeLeases()
    drains = Drains(leases)
    sqs = FakeSqs(depths)
    result = sweeper(sqs, leases, drains, [A_MINUTE]).run()
    assert result.queues == 2_500 and result.checked == 2_500
    assert set(drains.started) == {queues[-1]}
    assert sqs.calls == 3  # three pages of at most 1,000


def test_a_sweep_short_of_time_stops_at_its_margin_and_the_next_minutes_cover_the_rest():
    queues = tenant_queues(5_000)
    depths = {q: 1 for q in queues}
    leases = FakeLeases()
    drains = Drains(leases)
    minute = [A_MINUTE]
    sqs = FakeSqs(depths)
    sweep = sweeper(sqs, leases, drains, minute)
    cost_ms = 40  # 1,250 checks in the 50 s before the margin: a quarter of the queues a minute
    sweeps = 0
    while len(drains.started) < len(queues):
        assert sweeps < -(-len(queues) // SEGMENT), "every queue is checked within ceil(queues / SEGMENT) minutes"
        sqs.clock = clock = FakeTime(budget_ms=60_000, cost_ms=cost_ms)
        result = sweep.run(clock.remaining_ms)
        assert SEGMENT <= result.checked < len(queues) and result.skipped_for_time > 0
        # It stopped starting checks at the margin; those it had started spent at most one cost each.
        assert STOP_MARGIN_MS - WORKERS * cost_ms <= clock.remaining_ms() <= STOP_MARGIN_MS
        sweeps += 1
        minute[0] += 1
    assert set(drains.started) == set(queues)
    assert max(drains.started.values()) == 1  # a queue whose drain holds its lease is not started again


def test_a_sweep_with_no_time_left_checks_nothing_and_does_not_raise():
    sqs = FakeSqs(dict.fromkeys(tenant_queues(3_000), 1))
    leases = FakeLeases()
    drains = Drains(leases)
    assert sweeper(sqs, leases, drains, [A_MINUTE]).sweep(lambda: STOP_MARGIN_MS).started == []
    assert not sqs.checks and not drains.started


def test_the_checks_run_on_a_bounded_pool():
    sqs = FakeSqs(dict.fromkeys(tenant_queues(400), 0), pause_s=0.002)  # long enough for the workers to overlap
    leases = FakeLeases()
    result = sweeper(sqs, leases, Drains(leases), [A_MINUTE], workers=8).run()
    assert result.checked == 400 and sum(sqs.checks.values()) == 400
    assert 1 < sqs.most_in_flight <= 8


def test_the_default_pool_is_bounded_too():
    sqs = FakeSqs(dict.fromkeys(tenant_queues(2_000), 0), pause_s=0.001)
    leases = FakeLeases()
    sweeper(sqs, leases, Drains(leases), [A_MINUTE]).run()
    assert 1 < sqs.most_in_flight <= WORKERS <= 32


def test_a_queue_removed_mid_sweep_is_skipped():
    queues = tenant_queues(50)
    sqs = FakeSqs(dict.fromkeys(queues, 2), removed=queues[10:20])
    leases = FakeLeases()
    drains = Drains(leases)
    result = sweeper(sqs, leases, drains, [A_MINUTE]).run()
    assert set(drains.started) == set(queues[:10] + queues[20:])
    assert (result.checked, result.with_work, result.failed, result.skipped_for_time) == (50, 40, 0, 0)


def test_queues_whose_lease_is_held_are_skipped():
    queues = tenant_queues(30)
    leases = FakeLeases(held=queues[:5])
    drains = Drains(leases)
    result = sweeper(FakeSqs(dict.fromkeys(queues, 1)), leases, drains, [A_MINUTE]).run()
    assert set(drains.started) == set(queues[5:]) and result.with_work == 30
    assert sorted(result.busy) == sorted(queues)  # each one's oldest email is measured, drained or not


def test_one_queue_failing_is_logged_and_the_others_are_still_swept():
    queues = tenant_queues(100)
    leases = FakeLeases()
    drains = Drains(leases)
    result = sweeper(FakeSqs(dict.fromkeys(queues, 1), failing=[queues[3]]), leases, drains, [A_MINUTE]).run()
    assert set(drains.started) == set(queues) - {queues[3]}
    assert (result.checked, result.failed, result.skipped_for_time) == (99, 1, 0)


def test_a_sweep_where_every_check_fails_raises():
    queues = tenant_queues(40)
    leases = FakeLeases()
    sweep = sweeper(FakeSqs(dict.fromkeys(queues, 1), failing=queues), leases, Drains(leases), [A_MINUTE])
    with pytest.raises(ClientError, match="Throttling"):
        sweep.run()


def test_a_check_stuck_past_the_functions_time_is_left_behind():
    stuck, released = threading.Event(), threading.Event()

    class Stuck(FakeSqs):
        def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
            stuck.set()
            released.wait(10)  # far longer than the sweep waits: if it waited for this, it would see it done
            return super().get_queue_attributes(QueueUrl=QueueUrl, AttributeNames=AttributeNames)

    # The workers see time to start their check; the sweep's last wait, the function nearly out of it.
    def remaining_ms() -> int:
        return STOP_MARGIN_MS + 1 if threading.current_thread().name.startswith("sweep") else 2_050

    leases = FakeLeases()
    try:
        result = sweeper(Stuck({tenant_queues(1)[0]: 1}), leases, Drains(leases), [A_MINUTE]).run(remaining_ms)
        assert stuck.is_set() and result.checked == 0 and result.skipped_for_time == 1
    finally:
        released.set()


def test_the_starting_point_moves_on_a_segment_a_minute():
    names = [f"q{i:04d}" for i in range(2_500)]
    leases = FakeLeases()
    minute = [A_MINUTE - A_MINUTE % 3]
    sweep = sweeper(FakeSqs({}), leases, Drains(leases), minute, segment=1_000)
    firsts = []
    for _ in range(4):
        order = sweep.rotated(names)
        assert sorted(order) == names
        firsts.append(order[0])
        minute[0] += 1
    assert firsts == ["q0000", "q1000", "q2000", "q0000"]


def test_fewer_queues_than_a_segment_are_always_taken_from_the_first():
    names = [f"q{i}" for i in range(10)]
    leases = FakeLeases()
    for m in range(A_MINUTE, A_MINUTE + 5):
        assert sweeper(FakeSqs({}), leases, Drains(leases), [m]).rotated(names) == names


def _free() -> str:
    return SETTINGS.resources.free_queue.name


def test_queues_of_tenants_not_sending_are_looked_at_a_few_minutes_a_day_each_and_no_more():
    """An idle tenant costs no look a minute (issue 53): over a whole day each idle queue is checked in its own
    DAILY_WINDOW minutes, the free queue and the queues in use every minute."""
    queues = tenant_queues(300)
    busy = queues[7]
    sqs = FakeSqs({**dict.fromkeys(queues, 0), _free(): 0})
    leases = FakeLeases()
    minute = [A_MINUTE - A_MINUTE % 1440]  # midnight UTC
    sweep = sweeper(sqs, leases, Drains(leases), minute, InUse([busy]))
    for _ in range(1440):
        sweep.run()
        minute[0] += 1
    assert sqs.checks[_free()] == 1440 and sqs.checks[busy] == 1440
    assert all(sqs.checks[q] == DAILY_WINDOW for q in queues if q != busy)


def test_a_queue_found_holding_email_is_kept_in_use_until_found_empty():
    """Its drains may fail for hours (an outage, a broken deploy): it is looked at every minute, not daily."""
    queues = tenant_queues(20)
    stuck = queues[3]
    sqs = FakeSqs({**dict.fromkeys(queues, 0), stuck: 2})
    leases = FakeLeases()
    in_use = InUse([])
    at = A_MINUTE - A_MINUTE % 1440 + daily_minute(stuck)
    sweeper(sqs, leases, Drains(leases), [at], in_use).run()
    assert in_use.kept == [stuck] and stuck in in_use.at(0)


def test_an_idle_queue_found_with_email_at_its_minute_gets_a_drain():
    queues = tenant_queues(20)
    stuck = queues[3]
    sqs = FakeSqs({**dict.fromkeys(queues, 0), stuck: 2})
    leases = FakeLeases()
    drains = Drains(leases)
    at = A_MINUTE - A_MINUTE % 1440 + daily_minute(stuck)
    assert sweeper(sqs, leases, drains, [at - 1], InUse([])).run().started == []
    result = sweeper(sqs, leases, drains, [at], InUse([])).run()
    assert result.started == [stuck] and result.queues == 20 and result.looked_at < 20


def test_what_is_in_use_is_asked_for_the_sweeps_own_time():
    in_use = InUse([])
    leases = FakeLeases()
    sweeper(FakeSqs({}), leases, Drains(leases), [A_MINUTE], in_use).run()
    assert in_use.asked == [A_MINUTE * 60.0 + 17]


def test_when_the_queues_in_use_cannot_be_read_every_queue_is_looked_at():
    queues = tenant_queues(30)
    sqs = FakeSqs(dict.fromkeys(queues, 1))
    leases = FakeLeases()
    drains = Drains(leases)
    result = sweeper(sqs, leases, drains, [A_MINUTE], InUse(fails=True)).run()
    assert result.looked_at == 30 and sorted(result.started) == sorted(queues)


def test_the_minute_of_a_queue_is_its_own_and_stays_the_same():
    assert daily_minute("moonsend-prod-t-acme") == daily_minute("moonsend-prod-t-acme")
    minutes = {daily_minute(q) for q in tenant_queues(2000)}
    assert len(minutes) > 700  # spread over the day, not bunched at one minute
