"""The campaign counters' writer and the timeline: sends by the second they were made, the other kinds at the
flush; a timeline that fails never makes the counters be written twice."""

from __future__ import annotations

import itertools
from typing import Any

from chalicelib.stores.campaign_stats import BufferedStats, CampaignStats
from chalicelib.stores.timeline import Busiest
from tests.fakes.stats import FakeStats


class _Timeline:
    def __init__(self, fail: bool = False) -> None:
        self.adds: list[tuple[dict[str, int], dict[int, int]]] = []
        self.fail = fail

    def warm(self) -> None:
        pass

    def add(self, user_id: str, campaign_id: str, now_s: float, deltas: Any, sent_seconds: Any) -> Busiest | None:
        if self.fail:
            raise ConnectionError("the timeline's table did not answer")
        self.adds.append((dict(deltas), dict(sent_seconds)))
        return None


class _Counters(CampaignStats):
    """CampaignStats with its counters' write counted instead of made (the timeline part is under test)."""

    def __init__(self, timeline: _Timeline) -> None:
        self._timeline = timeline  # type: ignore[assignment]
        self._busiest = {}
        self.counted: list[dict[str, int]] = []
        import threading

        self._lock = threading.Lock()

    def _count(self, user_id: str, campaign_id: str, error: str | None, deltas: Any) -> None:
        self.counted.append(dict(deltas))


def test_buffered_sends_reach_the_timeline_by_the_second_they_were_made(monkeypatch):
    stats = FakeStats()
    buffered = BufferedStats(stats, interval_s=3600)
    clock = itertools.chain([1000.2, 1000.7, 1001.1, 1001.5], itertools.repeat(1001.9))  # then the flush's
    monkeypatch.setattr("chalicelib.stores.campaign_stats.time.time", lambda: next(clock))
    for _ in range(4):
        buffered.add("acme", "c", sent=1)
    buffered.add("acme", "c", delivered=2)
    buffered.flush()
    assert stats.adds[-1][2] == {"sent": 4, "delivered": 2}
    assert stats.seconds == [("acme", "c", {1000: 2, 1001: 2})]


def test_only_the_timelines_kinds_write_to_it_and_a_failing_timeline_leaves_the_counters_written_once():
    timeline = _Timeline()
    counters = _Counters(timeline)
    counters.add("acme", "c", queued=5, rejected=1)
    assert timeline.adds == []  # queueing is not on the chart
    counters.add_counts("acme", "c", {"sent": 3}, sent_seconds={1000: 3})
    assert timeline.adds == [({"sent": 3}, {1000: 3})]
    broken = _Counters(_Timeline(fail=True))
    broken.add("acme", "c", opened=1)  # does not raise: the caller would retry and count it again
    assert broken.counted == [{"opened": 1}]
