"""The stores' ports of what happened (chalicelib.stores.event_log, recounts): every event a tenant's webhooks
carry, kept for GET /events, and the campaigns due a recount; and the values they speak of."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol


class KeptEvent(Protocol):
    """What the log keeps of an event (chalicelib.webhooks.events.WebhookEvent is one)."""

    @property
    def user_id(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def id(self) -> str: ...

    @property
    def data(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class EventPage:
    events: list[dict[str, Any]]
    next: str | None  # where the next page starts (`after`), None when the log has no more now


class EventRecords(Protocol):
    """The tenants' event log (chalicelib.stores.event_log.EventLog): every event kept (with the epoch ms it was
    recorded at) by webhook_events, and a page of a tenant's events read by the tenant API."""

    def keep(self, events: Iterable[tuple[KeptEvent, int]]) -> int: ...

    def page(
        self,
        user_id: str,
        *,
        after: str | None = None,
        type: str | None = None,
        campaign: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> EventPage: ...


@dataclass(frozen=True)
class RecountNote:
    user_id: str
    campaign_id: str
    changed_ms: int


class RecountNotes(Protocol):
    """The campaigns whose ledger changed since they were recounted (chalicelib.stores.recounts): noted by the
    ledger's stream, read and done by the recount."""

    def note(self, pks: Iterable[str], now_ms: int | None = None) -> None: ...

    def settled(self, before_ms: int) -> Iterator[RecountNote]: ...

    def done(self, note: RecountNote) -> bool: ...
