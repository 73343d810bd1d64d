"""The smaller stores' contracts (chalicelib.stores.ports), each on its fake and on the DynamoDB store:
suppressions, campaign control, the daily cap, the counters' schedule notes, reputation, the schedule store,
and the tenant queues' activity."""

from __future__ import annotations

import time
from typing import Any, Protocol

import pytest

from chalicelib.stores.campaign_control import CampaignControl
from chalicelib.stores.campaign_stats import CampaignStats
from chalicelib.stores.daily_cap import DailyCap
from chalicelib.stores.ports.campaigns import CampaignSchedule, ControlSwitch, Counts
from chalicelib.stores.ports.queues import QueueTouch
from chalicelib.stores.ports.schedule import ParkingStore
from chalicelib.stores.ports.sending import DailyShare, Limits, ReputationCounts, Share, Window
from chalicelib.stores.ports.suppression import SuppressionList
from chalicelib.stores.queue_activity import QueueActivity
from chalicelib.stores.reputation import DAY_S, Reputation
from chalicelib.stores.schedule import ScheduleStore
from chalicelib.stores.suppression import Suppressions
from tests.contract.conftest import real_container
from tests.fakes.control import FakeControl
from tests.fakes.daily_cap import FakeCap
from tests.fakes.queues import FakeQueueActivity
from tests.fakes.reputation import FakeReputation
from tests.fakes.schedule import FakeSchedule
from tests.fakes.stats import FakeStats
from tests.fakes.suppressions import FakeSuppressions


def _settings(request: pytest.FixtureRequest) -> Any:
    return real_container(request).settings


# --- suppressions ------------------------------------------------------------------------------------------


class SuppressionPorts(SuppressionList, Protocol):
    """Every suppression port."""


def suppressions_of(side: str, request: pytest.FixtureRequest) -> SuppressionPorts:
    if side == "fake":
        return FakeSuppressions()
    store: Suppressions = real_container(request).suppressions
    return store


class TestSuppressionContract:
    def test_a_tenants_suppression_blocks_that_tenant_only_and_is_added_once(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        s = suppressions_of(side, request)
        assert s.check(f"u{uid}", ["a@example.org"]) == {}
        assert s.add(f"u{uid}", "A@Example.org", "complaint", "abuse") is True
        assert s.add(f"u{uid}", "a@example.org", "complaint", "abuse") is False
        assert set(s.check(f"u{uid}", ["a@EXAMPLE.org", "b@example.org"])) == {"a@example.org"}
        assert s.check(f"other{uid}", ["a@example.org"]) == {}

    def test_a_platform_suppression_blocks_every_tenant_and_says_why(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        s = suppressions_of(side, request)
        assert s.add(None, f"gone-{uid}@example.org", "bounce", "no such user") is True
        for user in (f"u{uid}", f"other{uid}"):
            why = s.check(user, [f"gone-{uid}@example.org"])[f"gone-{uid}@example.org"]
            assert "bounce" in why and "no such user" in why

    def test_a_platform_bounce_goes_on_the_list_of_each_tenant_that_meets_it_and_of_no_other(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        s = suppressions_of(side, request)
        gone = f"gone-{uid}@example.org"
        s.add(None, gone, "bounce", "no such user")
        assert s.page(f"u{uid}") == ([], None)
        s.check(f"u{uid}", [gone])
        entries, _ = s.page(f"u{uid}")
        assert [(e.email, e.reason, e.platform_wide) for e in entries] == [(gone, "bounce", True)]
        assert s.page(f"other{uid}") == ([], None)
        assert s.lift(f"u{uid}", gone) is False  # a bounce stays

    def test_a_tenants_list_pages_in_address_order_by_prefix_and_reason_and_only_manual_entries_lift(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        s = suppressions_of(side, request)
        user = f"u{uid}"
        assert s.add_many(user, [f"m{i}@example.org" for i in range(5)] + ["Zed@Example.org"], "by phone") == (6, 0)
        assert s.add_many(user, ["m0@example.org"], "again") == (0, 1)
        s.add(user, "angry@example.org", "complaint", "abuse")
        seen, after = [], None
        for _ in range(10):
            page, after = s.page(user, prefix="m", reason="manual", after=after, limit=2)
            seen += [e.email for e in page]
            if after is None:
                break
        assert seen == [f"m{i}@example.org" for i in range(5)]
        entries, more = s.page(user, limit=100)
        assert [e.rcpt for e in entries] == ["angry@example.org", *seen, "zed@example.org"] and more is None
        zed = s.entry(user, "ZED@example.org")
        assert zed is not None and (zed.email, zed.reason, zed.detail) == ("Zed@Example.org", "manual", "by phone")
        assert s.lift(user, "zed@EXAMPLE.org") is True and s.entry(user, "zed@example.org") is None
        assert s.lift(user, "zed@example.org") is False
        assert s.lift(user, "angry@example.org") is False and s.entry(user, "angry@example.org") is not None
        assert s.check(user, ["zed@example.org"]) == {}


# --- campaign control --------------------------------------------------------------------------------------


def control_of(side: str, request: pytest.FixtureRequest) -> ControlSwitch:
    if side == "fake":
        return FakeControl()
    store: CampaignControl = real_container(request).campaign_control
    return store


class TestControlContract:
    def test_pause_and_resume_are_read_back_and_a_cancel_is_final(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        c = control_of(side, request)
        user = f"u{uid}"
        assert c.state(user, "c1", fresh=True) is None
        assert c.pause(user, "c1") is True
        assert c.state(user, "c1", fresh=True) == "paused"
        assert c.resume(user, "c1") is True
        assert c.state(user, "c1", fresh=True) is None
        assert c.pause(user, "c1") is True
        c.cancel(user, "c1")
        assert c.state(user, "c1") == "cancelled"  # a change clears the cache
        # Neither a pause written over it nor a resume (an operator's cancel racing the tenant's) undoes it.
        assert c.pause(user, "c1") is False and c.state(user, "c1", fresh=True) == "cancelled"
        assert c.resume(user, "c1") is False and c.state(user, "c1", fresh=True) == "cancelled"
        c.cancel(user, "c1")  # again: nothing changes
        assert c.state(user, "c1", fresh=True) == "cancelled"

    def test_a_campaign_never_paused_is_cancelled_at_once(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        c = control_of(side, request)
        c.cancel(f"u{uid}", "c2")
        assert c.state(f"u{uid}", "c2", fresh=True) == "cancelled"
        assert c.resume(f"u{uid}", "c2") is False


# --- the daily cap -----------------------------------------------------------------------------------------


def cap_of(side: str, request: pytest.FixtureRequest, cap: int) -> DailyShare:
    if side == "fake":
        return FakeCap(cap=cap)
    s = _settings(request)
    store = DailyCap(s.resources.usage_table.name, s.region, cap)
    return store


class TestDailyCapContract:
    def test_a_batch_is_counted_once_and_the_cap_shared_in_order(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        cap = cap_of(side, request, 5)
        assert cap.cap == 5
        assert cap.share(f"u{uid}", 3, "b1") == Share(3)
        assert cap.share(f"u{uid}", 3, "b1") == Share(3, repeated=True)  # a redelivery: the same, counted once
        assert cap.share(f"u{uid}", 4, "b2") == Share(2)
        assert cap.share(f"u{uid}", 1, "b3") == Share(0)  # the cap is reached: nothing recorded for it
        assert cap.share(f"u{uid}", 1, "b3") == Share(0)
        assert cap.share(f"u{uid}", 4, "b2") == Share(2, repeated=True)


# --- the counters' schedule notes --------------------------------------------------------------------------


class Counters(CampaignSchedule, Counts, Protocol):
    """What FakeStats stands in for."""


def stats_of(side: str, request: pytest.FixtureRequest) -> Counters:
    if side == "fake":
        return FakeStats()
    store: CampaignStats = real_container(request).stats
    return store


class TestCountersContract:
    def test_a_campaigns_schedule_minutes_are_kept_once_each_in_order(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        stats = stats_of(side, request)
        assert stats.schedule_buckets(f"u{uid}", "c1") == []
        stats.note_schedule(f"u{uid}", "c1", 1_000, 2_000, "2026-12-01T08:01")
        stats.note_schedule(f"u{uid}", "c1", 1_000, 2_000, "2026-12-01T08:00")
        stats.note_schedule(f"u{uid}", "c1", 1_000, 2_000, "2026-12-01T08:01")
        stats.note_schedule(f"u{uid}", "c1", 1_000, 2_000)
        assert stats.schedule_buckets(f"u{uid}", "c1") == ["2026-12-01T08:00", "2026-12-01T08:01"]
        assert stats.schedule_buckets(f"u{uid}", "c2") == []

    def test_an_unknown_counter_is_refused(self, side: str, request: pytest.FixtureRequest, uid: str) -> None:
        stats = stats_of(side, request)
        stats.add(f"u{uid}", "c1", sent=1, error="x")
        with pytest.raises(ValueError):
            stats.add(f"u{uid}", "c1", sends=1)


# --- reputation --------------------------------------------------------------------------------------------


def reputation_of(side: str, request: pytest.FixtureRequest) -> ReputationCounts:
    if side == "fake":
        return FakeReputation()
    s = _settings(request)
    store = Reputation(s.resources.usage_table.name, s.region, Limits(), s.resources.ledger_table.name)
    return store


class TestReputationContract:
    def test_the_window_sums_the_last_days_and_forgets_older_ones(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        rep = reputation_of(side, request)
        now = time.time()
        assert rep.limits == Limits()
        assert rep.window(f"u{uid}", now) == Window(7, 0, 0, 0)
        rep.add(f"u{uid}", sent=300, now=now)
        rep.add(f"u{uid}", bounced=2, complained=1, now=now - 2 * DAY_S)
        rep.add(f"u{uid}", sent=1000, bounced=900, now=now - 8 * DAY_S)  # outside the week
        assert rep.window(f"u{uid}", now) == Window(7, 300, 2, 1)

    def test_a_recipients_bounce_or_complaint_is_counted_once_however_often_it_is_handled(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        rep, user = reputation_of(side, request), f"u{uid}"
        if side == "real":  # the store marks the recipient's ledger entry in the same transaction
            real_container(request).ledger.record_queued(user, "c1", ["Ann@example.org", "bob@example.org"])
        assert rep.count_feedback(user, "c1", "Ann@example.org", "complained") is True
        assert rep.count_feedback(user, "c1", "ann@example.org", "complained") is False  # handled again
        assert rep.count_feedback(user, "c1", "ann@example.org", "bounced") is True  # another kind
        assert rep.count_feedback(user, "c1", "bob@example.org", "complained") is True
        assert rep.window(user) == Window(7, 0, 1, 2)


# --- the schedule store ------------------------------------------------------------------------------------


def schedule_of(side: str, request: pytest.FixtureRequest) -> ParkingStore:
    if side == "fake":
        return FakeSchedule()
    store: ScheduleStore = real_container(request).schedule
    return store


class TestScheduleContract:
    def test_a_batch_is_kept_in_its_partition_once_and_forgotten_when_removed(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        store = schedule_of(side, request)
        bucket = f"held#{uid}"
        emails = [("b@example.org", '{"b": 1}'), ("a@example.org", '{"a": 1}')]
        first, again = (
            store.put(
                user_id=f"u{uid}",
                campaign_id="c1",
                plan="free",
                queue="q",
                due_ms=1_000,
                deadline_ms=None,
                emails=e,
                bucket=bucket,
            )
            for e in (emails, list(reversed(emails)))
        )
        assert again.item == first.item and (first.bucket, first.count) == (bucket, 2)
        assert store.parked(bucket) == [first]
        assert store.emails(first) == list(reversed(emails))
        store.remove(first)
        assert store.parked(bucket) == []


# --- each tenant queue's activity --------------------------------------------------------------------------


class TestQueuesInUseOnTheStack:
    """The two sources of the sweeper's queues in use, on the local stack's DynamoDB (its index, its scan)."""

    def test_a_tenant_is_found_by_the_hour_its_queue_was_last_used(
        self, request: pytest.FixtureRequest, uid: str
    ) -> None:
        s = _settings(request)
        store = QueueActivity(s.resources.tenants_table.name, s.region)
        store.touch(f"a{uid}", "2031-01-02", "2031-01-02T10")
        store.touch(f"b{uid}", "2031-01-02", "2031-01-02T09")
        store.touch(f"c{uid}", "2031-01-02", "2031-01-02T08")
        store.touch(f"d{uid}", "2031-01-02")  # a writer of before hours: its day only
        store.touch(f"b{uid}", "2031-01-02", "2031-01-02T11")  # used again: found by its last hour only
        assert store.used_in(["2031-01-02T10", "2031-01-02T09"]) >= {f"a{uid}"}
        assert {f"b{uid}", f"c{uid}", f"d{uid}"}.isdisjoint(store.used_in(["2031-01-02T10", "2031-01-02T09"]))
        assert f"b{uid}" in store.used_in(["2031-01-02T11"])

    def test_a_queue_whose_lease_a_drain_held_since_a_time_was_drained_whichever_slot_and_end(
        self, request: pytest.FixtureRequest, uid: str
    ) -> None:
        from chalicelib.core.drainer_shares import lease_key
        from chalicelib.stores.lease import Leases

        s = _settings(request)
        leases = Leases(s.resources.leases_table.name, s.region)
        before_ms = int(time.time() * 1000) - 1
        held, ended, helper = f"q-held-{uid}", f"q-ended-{uid}", f"q-fast-{uid}"
        assert leases.acquire(held, 60_000) is not None
        done = leases.acquire(ended, 60_000)
        assert done is not None
        leases.drop(done, quiet_from_ms=1)  # ended with a quiet time: its item stays, taken a moment ago
        assert leases.acquire(lease_key(helper, 2), 60_000) is not None  # a fast queue's third drainer only
        idle = f"q-sent-nothing-{uid}"
        nothing = leases.acquire(idle, 60_000)
        assert nothing is not None
        leases.drop(nothing)  # sent nothing (its email put back, delayed): its item stays all the same
        assert {held, ended, helper, idle} <= leases.drained(before_ms)
        assert not {held, ended, helper, idle} & leases.drained(int(time.time() * 1000) + 120_000)


class TestQueueActivityContract:
    def test_a_used_queue_is_touched_and_a_retired_one_is_recreated_once(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        user, day = f"u{uid}", "2026-12-01"
        activity: QueueTouch
        if side == "fake":
            activity = FakeQueueActivity(retired=[user])
        else:
            s = _settings(request)
            store = QueueActivity(s.resources.tenants_table.name, s.region)
            assert store.touch(user, "2026-11-01") is False  # in use: nothing to recreate
            assert store.retire(user, "2026-11-01") is not None
            store.gone(user)
            activity = store
        assert activity.touch(user, day) is True  # retired: recreate it first
        assert activity.touch(user, day) is False
