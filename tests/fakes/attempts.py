"""Sign-in attempts in memory: a count per key, added to atomically, as the DynamoDB store keeps them."""

from __future__ import annotations

import threading


class FakeAttempts:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.expiry: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, key: str) -> int:
        return self.counts.get(key, 0)

    def add(self, key: str, expires_at: int) -> int:
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            self.expiry[key] = expires_at
            return self.counts[key]

    def release(self, key: str) -> None:
        with self._lock:
            if self.counts.get(key, 0) > 0:
                self.counts[key] -= 1
