"""The suppression list in memory: `blocked` addresses with why; each look-up and addition counted."""

from __future__ import annotations


class FakeSuppressions:
    def __init__(self, blocked=None):
        self.blocked = {e.lower(): why for e, why in (blocked or {}).items()}
        self.lookups = 0
        self.added = []

    def check(self, user_id, emails):
        self.lookups += 1
        return {e.lower(): self.blocked[e.lower()] for e in emails if e.lower() in self.blocked}

    def add(self, user_id, email, source, reason):
        self.added.append((user_id, email, source))
        return True
