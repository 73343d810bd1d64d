"""The suppression list in memory: `blocked` addresses (for every tenant) with why; each look-up and addition counted.

As the store: an address added for a tenant is suppressed for that tenant only, one added with no tenant for all,
and an address is added once per scope (a reason other than `manual` replaces a `manual` entry); a platform bounce
a tenant meets is put on its own list too; a tenant's list is read in address order, a page at a time; only its
`manual` entries are lifted."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from chalicelib.stores.ports.suppression import BOUNCE, MANUAL, Suppression

PLATFORM = "platform"


class FakeSuppressions:
    def __init__(self, blocked: Mapping[str, str] | None = None) -> None:
        self.blocked = {e.lower(): why for e, why in (blocked or {}).items()}
        self.scoped: dict[tuple[str, str], str] = {}  # (tenant#<user> | platform, address) -> why
        self.entries: dict[tuple[str, str], Suppression] = {}  # as the store keeps them
        self.lookups = 0
        self.added: list[tuple[str | None, str, str]] = []

    def check(self, user_id: str, emails: Iterable[str]) -> dict[str, str]:
        self.lookups += 1
        out: dict[str, str] = {}
        for e in (e.lower() for e in emails):
            own = self.scoped.get((f"tenant#{user_id}", e))
            platform = self.scoped.get((PLATFORM, e))
            why = self.blocked.get(e) or own or platform
            if why:
                out[e] = why
            if platform and (not own or self.entries[(f"tenant#{user_id}", e)].reason == MANUAL):
                stored = self.entries[(PLATFORM, e)]
                self.add(user_id, stored.email, BOUNCE, stored.detail)
        return out

    def add(self, user_id: str | None, email: str, source: str, reason: str) -> bool:
        self.added.append((user_id, email, source))
        scope = f"tenant#{user_id}" if user_id else PLATFORM
        kept = self.entries.get((scope, email.lower()))
        if kept is not None and (source == MANUAL or kept.reason != MANUAL):  # another reason replaces `manual`
            return False
        where = "for every tenant" if scope == PLATFORM or source == BOUNCE else "for this tenant"
        self.scoped[(scope, email.lower())] = f"suppressed {where}: {source} ({reason})"
        self.entries[(scope, email.lower())] = Suppression(
            email.lower(), email, source, reason[:500], int(time.time() * 1000)
        )
        return True

    def add_many(self, user_id: str, emails: Iterable[str], reason: str) -> tuple[int, int]:
        added = [self.add(user_id, e, MANUAL, reason) for e in emails]
        return sum(added), len(added) - sum(added)

    def entry(self, user_id: str, email: str) -> Suppression | None:
        return self.entries.get((f"tenant#{user_id}", email.lower()))

    def lift(self, user_id: str, email: str) -> bool:
        key = (f"tenant#{user_id}", email.lower())
        if key not in self.entries or self.entries[key].reason != MANUAL:
            return False
        del self.entries[key], self.scoped[key]
        return True

    def page(
        self,
        user_id: str,
        *,
        reason: str | None = None,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> tuple[list[Suppression], str | None]:
        own = sorted(
            (e for (scope, rcpt), e in self.entries.items() if scope == f"tenant#{user_id}"), key=lambda e: e.rcpt
        )
        wanted = [
            e
            for e in own
            if (after is None or e.rcpt > after.lower())
            and (prefix is None or e.rcpt.startswith(prefix.lower()))
            and (reason is None or e.reason == reason)
        ]
        page = wanted[:limit]
        return page, page[-1].rcpt if len(wanted) > limit else None
