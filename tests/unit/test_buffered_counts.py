"""The counts a drain or a batch of SES's events gathers: one campaign's failed write drops nobody's counts."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.stores.campaign_stats import FLUSH_RETRY_S, BufferedStats
from tests.fakes import FakeStats


class _Throttled(FakeStats):
    """Counters whose writes for some campaigns fail `times` times (DynamoDB throttling past the SDK's retries)."""

    def __init__(self, failing: dict[str, int]) -> None:
        super().__init__()
        self.failing = dict(failing)

    def add_counts(self, user_id: str, campaign_id: str, deltas: Any, **kw: Any) -> None:
        if self.failing.get(campaign_id, 0) > 0:
            self.failing[campaign_id] -= 1
            raise ConnectionError("ProvisionedThroughputExceededException")
        super().add_counts(user_id, campaign_id, deltas, **kw)


def _written(stats: FakeStats, campaign: str, name: str) -> int:
    return sum(d.get(name, 0) for _u, c, d, _e in stats.adds if c == campaign)


def test_a_campaign_whose_write_fails_once_is_written_by_the_retry_and_the_others_all_the_same():
    # The events queue is shared: tenant a's throttled counter must not drop tenant b's and c's counts.
    stats, slept = _Throttled({"a": 1}), []
    buffered = BufferedStats(stats, interval_s=3600, sleep=slept.append)
    for campaign in ("a", "b", "c"):
        buffered.add("t", campaign, bounced=2)
    buffered.flush()
    assert [_written(stats, c, "bounced") for c in ("a", "b", "c")] == [2, 2, 2]
    assert slept == [FLUSH_RETRY_S[1]]


def test_a_write_that_keeps_failing_keeps_its_counts_for_the_next_flush_and_says_so():
    stats = _Throttled({"a": len(FLUSH_RETRY_S)})
    buffered = BufferedStats(stats, interval_s=3600, sleep=lambda _s: None)
    buffered.add("t", "a", sent=5)
    buffered.add("t", "b", sent=3)
    with pytest.raises(ConnectionError):
        buffered.flush()
    assert (_written(stats, "a", "sent"), _written(stats, "b", "sent")) == (0, 3)
    buffered.add("t", "a", sent=1)  # more came meanwhile: added to what was kept
    buffered.flush()
    assert _written(stats, "a", "sent") == 6 and _written(stats, "b", "sent") == 3


def test_counts_that_could_not_be_written_within_the_stale_time_are_left_to_the_recount(monkeypatch):
    # A frozen sandbox thawed an hour later, or a write failing for minutes: written now, they could land after
    # the recount restored them from the ledger, and be counted twice.
    import chalicelib.stores.campaign_stats as campaign_stats

    stats = _Throttled({"a": len(FLUSH_RETRY_S)})
    buffered = BufferedStats(stats, interval_s=3600, sleep=lambda _s: None)
    now = [1_000_000.0]
    monkeypatch.setattr(campaign_stats.time, "time", lambda: now[0])
    buffered.add("t", "a", sent=5)
    with pytest.raises(ConnectionError):
        buffered.flush()
    now[0] += campaign_stats.STALE_S + 1
    buffered.add("t", "b", sent=1)  # a fresh count of another campaign still goes
    buffered.flush()
    assert (_written(stats, "a", "sent"), _written(stats, "b", "sent")) == (0, 1)
    buffered.flush()  # and the stale ones are gone, not kept for a later flush
    assert _written(stats, "a", "sent") == 0
