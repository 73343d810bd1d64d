"""Sign-in attempts in memory: a count per key, as the DynamoDB store keeps them."""

from __future__ import annotations


class FakeAttempts:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.expiry: dict[str, int] = {}

    def count(self, key: str) -> int:
        return self.counts.get(key, 0)

    def add(self, key: str, expires_at: int) -> int:
        self.counts[key] = self.counts.get(key, 0) + 1
        self.expiry[key] = expires_at
        return self.counts[key]
