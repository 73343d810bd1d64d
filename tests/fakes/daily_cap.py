"""The free plan's daily cap in memory: a batch's share is counted once, and read back on every repeat."""

from __future__ import annotations

from chalicelib.stores.ports.sending import Share


class FakeCap:
    def __init__(self, cap: int = 0, already: int = 0) -> None:
        self.cap, self.used = cap, already
        self.batches: list[str] = []
        self.shares: dict[str, int] = {}

    def share(self, user_id: str, wanted: int, batch: str, now: float | None = None) -> Share:
        self.batches.append(batch)
        if batch in self.shares:
            return Share(self.shares[batch], repeated=True)
        if self.used >= self.cap:  # as the store: once the cap is reached, a batch is not recorded at all
            return Share(0)
        fit = max(0, min(wanted, self.cap - self.used))
        self.used += wanted
        self.shares[batch] = fit
        return Share(fit)
