"""The suppression list's port (chalicelib.stores.suppression), and the entry it speaks of."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

BOUNCE, COMPLAINT, UNSUBSCRIBE, MANUAL = "bounce", "complaint", "unsubscribe", "manual"
REASONS = (BOUNCE, COMPLAINT, UNSUBSCRIBE, MANUAL)
# Why each reason but `manual` stays when a tenant asks to lift it.
KEPT_BECAUSE = {
    BOUNCE: "the address bounced permanently: it does not exist, and every send to it costs the sending "
    "account's reputation; it stays suppressed for every tenant",
    COMPLAINT: "the recipient marked this tenant's email as spam: sending to it again would harm the tenant's "
    "reputation and may be unlawful; it stays",
    UNSUBSCRIBE: "the recipient unsubscribed from this tenant's email: only the recipient can undo that, by "
    "subscribing again through the tenant",
}


@dataclass(frozen=True)
class Suppression:
    rcpt: str  # the address lower-cased: the list's order and its cursor
    email: str
    reason: str  # bounce | complaint | unsubscribe | manual
    detail: str
    at_ms: int | None

    @property
    def platform_wide(self) -> bool:
        return self.reason == BOUNCE


class SuppressionList(Protocol):
    """The tenant API's: the tenant's suppression list, read a page at a time, added to, lifted from."""

    def page(
        self,
        user_id: str,
        *,
        reason: str | None = None,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> tuple[list[Suppression], str | None]: ...

    def add_many(self, user_id: str, emails: Iterable[str], reason: str) -> tuple[int, int]: ...

    def entry(self, user_id: str, email: str) -> Suppression | None: ...

    def lift(self, user_id: str, email: str) -> bool: ...

    def check(self, user_id: str, emails: Iterable[str]) -> dict[str, str]: ...

    def add(self, user_id: str | None, email: str, source: str, reason: str) -> bool: ...
