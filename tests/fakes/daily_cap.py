"""The free plan's daily cap in memory: a batch's share is counted once, and read back on every repeat."""

from __future__ import annotations

from chalicelib.stores.daily_cap import Share


class FakeCap:
    def __init__(self, cap=0, already=0):
        self.cap, self.used = cap, already
        self.batches = []
        self.shares: dict[str, int] = {}

    def share(self, user_id, wanted, batch, now=None):
        self.batches.append(batch)
        if batch in self.shares:
            return Share(self.shares[batch], repeated=True)
        fit = max(0, min(wanted, self.cap - self.used))
        self.used += wanted
        self.shares[batch] = fit
        return Share(fit)
