"""The queues the sweeper looks at every minute (chalicelib.jobs.queues_in_use): put on this hour or the last
(UTC), or held by a drain within the last hour."""

from __future__ import annotations

import calendar

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.routing import tenant_queue_name
from chalicelib.jobs.queues_in_use import QueuesInUse

RESOURCES = Settings.from_env({"MOONSEND_STAGE": "test"}).resources


class Used:
    def __init__(self, by_hour: dict[str, set[str]]) -> None:
        self.by_hour = by_hour
        self.asked: list[list[str]] = []
        self.marked: list[tuple[str, str]] = []

    def mark_hour(self, user_id: str, hour: str) -> None:
        self.marked.append((user_id, hour))
        self.by_hour.setdefault(hour, set()).add(user_id)

    def used_in(self, hours):
        hours = list(hours)
        self.asked.append(hours)
        return set().union(*(self.by_hour.get(h, set()) for h in hours))


class Drained:
    def __init__(self, queues: set[str]) -> None:
        self.queues = queues
        self.since: list[int] = []

    def drained(self, since_ms: int) -> set[str]:
        self.since.append(since_ms)
        return set(self.queues)


def test_queues_put_on_this_hour_or_the_last_in_utc_and_those_a_drain_held_within_the_hour_are_in_use():
    now = calendar.timegm((2026, 12, 1, 0, 30, 0)) + 0.5  # half past midnight UTC: the last hour was November's
    used = Used({"2026-12-01T00": {"a"}, "2026-11-30T23": {"b"}, "2026-11-30T22": {"c"}})
    backlog = tenant_queue_name(RESOURCES, "d")
    drained = Drained({backlog})
    in_use = QueuesInUse(RESOURCES, used, drained).at(now)
    assert used.asked == [["2026-12-01T00", "2026-11-30T23"]]
    assert drained.since == [int((now - 3600) * 1000)]
    assert in_use == {tenant_queue_name(RESOURCES, u) for u in ("a", "b")} | {backlog}


def test_a_source_that_cannot_be_read_raises_for_the_sweeper_to_look_at_every_queue():
    class Broken:
        def drained(self, since_ms: int) -> set[str]:
            raise RuntimeError("throttled")

    with pytest.raises(RuntimeError, match="throttled"):
        QueuesInUse(RESOURCES, Used({}), Broken()).at(0.0)


def test_a_queue_kept_in_use_is_marked_once_an_hour_and_the_free_queue_never():
    now = calendar.timegm((2026, 12, 1, 10, 5, 0))
    used = Used({})
    in_use = QueuesInUse(RESOURCES, used, Drained(set()))
    stuck = tenant_queue_name(RESOURCES, "acme")
    for minute in range(3):
        in_use.keep(stuck, now + 60 * minute)
    in_use.keep(RESOURCES.free_queue.name, now)
    in_use.keep(stuck, now + 3600)  # the next hour
    assert used.marked == [("acme", "2026-12-01T10"), ("acme", "2026-12-01T11")]
    assert stuck in in_use.at(now + 3600 + 60)


def test_a_queue_named_by_a_hash_of_its_tenants_id_is_not_marked_for_another():
    long_id = "a" * 200  # too long for a queue name: the name is cut and hashed, not the id read back
    queue = tenant_queue_name(RESOURCES, long_id)
    used = Used({})
    QueuesInUse(RESOURCES, used, Drained(set())).keep(queue, 0.0)
    assert used.marked == []
