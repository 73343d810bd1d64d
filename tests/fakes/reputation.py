"""The reputation counts in memory, over the real limits; `fail` makes the next writes raise."""

from __future__ import annotations

import time

from chalicelib.stores.ports.sending import Limits, Window
from chalicelib.stores.reputation import DAY_S


class FakeReputation:
    def __init__(self, fail: int = 0) -> None:
        self.limits = Limits()
        self.counts: dict[str, dict[str, int]] = {}  # per tenant, all days
        self.days: dict[tuple[str, str], dict[str, int]] = {}  # per tenant and UTC day, as the store keeps them
        self.writes: list[tuple[str, int]] = []  # each write of the sends (the guard's denominator)
        self.fail = fail
        self.counted: set[tuple[str, str, str, str]] = set()  # (tenant, campaign, address, kind) counted once

    def add(
        self, user_id: str, *, sent: int = 0, bounced: int = 0, complained: int = 0, now: float | None = None
    ) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("DynamoDB unreachable")
        if sent:
            self.writes.append((user_id, sent))
        mine = self.counts.setdefault(user_id, {"sent": 0, "bounced": 0, "complained": 0})
        day = self.days.setdefault((user_id, _day(now)), {"sent": 0, "bounced": 0, "complained": 0})
        for k, v in (("sent", sent), ("bounced", bounced), ("complained", complained)):
            mine[k] += v
            day[k] += v

    def count_feedback(self, user_id: str, campaign_id: str, address: str, kind: str, now: float | None = None) -> bool:
        key = (user_id, campaign_id, address.lower(), kind)
        if key in self.counted:
            return False
        self.add(user_id, now=now, **{kind: 1})  # raises as the store's transaction would: nothing counted
        self.counted.add(key)
        return True

    def sent(self, user_id: str) -> int:
        return sum(n for u, n in self.writes if u == user_id)

    def window(self, user_id: str, now: float | None = None) -> Window:
        days = self.limits.window_days
        first = _day((time.time() if now is None else now) - (days - 1) * DAY_S)
        mine = [c for (u, d), c in self.days.items() if u == user_id and d >= first]
        return Window(days, *(sum(c[k] for c in mine) for k in ("sent", "bounced", "complained")))


def _day(now: float | None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if now is None else now))
