"""The schedule store's ports (chalicelib.stores.schedule): email kept until a moment, and released; and the
batch they speak of."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class StoredBatch:
    bucket: str
    item: str
    user_id: str
    campaign_id: str
    plan: str
    queue: str
    due_ms: int
    deadline_ms: int | None
    count: int
    body_key: str


class ParkingStore(Protocol):
    """Email kept until a moment comes: precompile keeps a scheduled batch until it is due, the parking
    (chalicelib.queueing.parked_email) a paused campaign's email in a partition until it is resumed."""

    def put(
        self,
        *,
        user_id: str,
        campaign_id: str,
        plan: str,
        queue: str,
        due_ms: int,
        deadline_ms: int | None,
        emails: list[tuple[str, str]],
        bucket: str | None = None,
    ) -> StoredBatch: ...

    def emails(self, batch: StoredBatch) -> list[tuple[str, str]]: ...

    def remove(self, batch: StoredBatch, *, keep_body: bool = False) -> None: ...

    def parked(self, bucket: str) -> list[StoredBatch]: ...


class ReleaseStore(Protocol):
    """Scheduled email's way out: the releaser's (what is due, and how far it has released; a batch's emails,
    and the batch forgotten once they are on their queue) and the campaign actions' (reschedule: a campaign's
    batches, moved to another time)."""

    def due(self, up_to_ms: int) -> Iterator[StoredBatch]: ...

    def advance(self, up_to_ms: int) -> None: ...

    def set_aside(self, batch: StoredBatch) -> None: ...

    def emails(self, batch: StoredBatch) -> list[tuple[str, str]]: ...

    def remove(self, batch: StoredBatch, *, keep_body: bool = False) -> None: ...

    def of_campaign(self, user_id: str, campaign_id: str, buckets: list[str]) -> list[StoredBatch]: ...

    def move(self, batch: StoredBatch, due_ms: int, deadline_ms: int | None) -> StoredBatch: ...
