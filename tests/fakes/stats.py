"""The campaign counters in memory: every add kept, as written."""

from __future__ import annotations

from collections.abc import Mapping

from chalicelib.stores.campaign_stats import COUNTERS


class FakeStats:
    def __init__(self) -> None:
        self.adds: list[tuple[str, str, dict[str, int], str | None]] = []
        self.schedules: list[tuple[str, str, int | None, int | None, str | None]] = []
        self.seconds: list[tuple[str, str, dict[int, int]]] = []  # sends by the epoch second, as flushed

    def add(self, user_id: str, campaign_id: str, error: str | None = None, **deltas: int) -> None:
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
        unknown = set(deltas) - set(COUNTERS)
        if unknown:
            raise ValueError(f"unknown counter {sorted(unknown)[0]}")
        self.adds.append((user_id, campaign_id, dict(deltas), error))
        if sent_seconds:
            self.seconds.append((user_id, campaign_id, dict(sent_seconds)))

    def flush(self) -> None:
        pass

    def total(self, name: str) -> int:
        return sum(d.get(name, 0) for _u, _c, d, _e in self.adds)

    def note_schedule(
        self,
        user_id: str,
        campaign_id: str,
        scheduled_at_ms: int | None,
        deadline_ms: int | None,
        bucket: str | None = None,
    ) -> None:
        self.schedules.append((user_id, campaign_id, scheduled_at_ms, deadline_ms, bucket))

    def schedule_buckets(self, user_id: str, campaign_id: str) -> list[str]:
        return sorted({b for u, c, _at, _dl, b in self.schedules if u == user_id and c == campaign_id and b})
