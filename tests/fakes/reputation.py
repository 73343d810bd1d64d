"""The reputation counts in memory, over the real limits; `fail` makes the next writes raise."""

from __future__ import annotations

from chalicelib.stores.reputation import Limits, Window


class FakeReputation:
    def __init__(self, fail: int = 0):
        self.limits = Limits()
        self.counts: dict[str, dict[str, int]] = {}
        self.writes: list[tuple[str, int]] = []  # each write of the sends (the guard's denominator)
        self.fail = fail

    def add(self, user_id, *, sent=0, bounced=0, complained=0, now=None):
        if self.fail:
            self.fail -= 1
            raise ConnectionError("DynamoDB unreachable")
        if sent:
            self.writes.append((user_id, sent))
        mine = self.counts.setdefault(user_id, {"sent": 0, "bounced": 0, "complained": 0})
        for k, v in (("sent", sent), ("bounced", bounced), ("complained", complained)):
            mine[k] += v

    def sent(self, user_id):
        return sum(n for u, n in self.writes if u == user_id)

    def window(self, user_id, now=None):
        c = self.counts.get(user_id, {"sent": 0, "bounced": 0, "complained": 0})
        return Window(self.limits.window_days, c["sent"], c["bounced"], c["complained"])
