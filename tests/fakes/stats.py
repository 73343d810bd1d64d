"""The campaign counters in memory: every add kept, as written."""

from __future__ import annotations

from chalicelib.stores.campaign_stats import COUNTERS


class FakeStats:
    def __init__(self) -> None:
        self.adds: list[tuple[str, str, dict[str, int], str | None]] = []
        self.schedules: list[tuple[str, str, int | None, int | None, str | None]] = []

    def add(self, user_id: str, campaign_id: str, error: str | None = None, **deltas: int) -> None:
        unknown = set(deltas) - set(COUNTERS)
        if unknown:
            raise ValueError(f"unknown counter {sorted(unknown)[0]}")
        self.adds.append((user_id, campaign_id, deltas, error))

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
