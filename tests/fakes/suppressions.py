"""The suppression list in memory: `blocked` addresses (for every tenant) with why; each look-up and addition counted.

As the store: an address added for a tenant is suppressed for that tenant only, one added with no tenant for all,
and an address is added once per scope."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

PLATFORM = "platform"


class FakeSuppressions:
    def __init__(self, blocked: Mapping[str, str] | None = None) -> None:
        self.blocked = {e.lower(): why for e, why in (blocked or {}).items()}
        self.scoped: dict[tuple[str, str], str] = {}  # (tenant#<user> | platform, address) -> why
        self.lookups = 0
        self.added: list[tuple[str | None, str, str]] = []

    def check(self, user_id: str, emails: Iterable[str]) -> dict[str, str]:
        self.lookups += 1
        out: dict[str, str] = {}
        for e in (e.lower() for e in emails):
            why = self.blocked.get(e) or self.scoped.get((f"tenant#{user_id}", e)) or self.scoped.get((PLATFORM, e))
            if why:
                out[e] = why
        return out

    def add(self, user_id: str | None, email: str, source: str, reason: str) -> bool:
        self.added.append((user_id, email, source))
        scope = f"tenant#{user_id}" if user_id else PLATFORM
        if (scope, email.lower()) in self.scoped:
            return False
        where = "for every tenant" if scope == PLATFORM else "for this tenant"
        self.scoped[(scope, email.lower())] = f"suppressed {where}: {source} ({reason})"
        return True
