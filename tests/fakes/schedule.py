"""The schedule store in memory: what was stored, what removed, parked partitions read back."""

from __future__ import annotations

import hashlib

from chalicelib.stores.ports.schedule import StoredBatch
from chalicelib.stores.schedule import minute_of


class FakeSchedule:
    def __init__(self) -> None:
        self.batches: list[StoredBatch] = []
        self.kept: dict[str, list[tuple[str, str]]] = {}  # item -> the emails put() was given
        self.removed: list[StoredBatch] = []
        self._gone: set[tuple[str, str]] = set()  # (bucket, item) of the batches removed since last stored

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
    ) -> StoredBatch:
        # Keyed as the store keys a batch (its tenant, campaign and addresses): the same batch stored twice is one.
        digest = hashlib.sha256("\n".join([user_id, campaign_id, *sorted(e.lower() for e, _ in emails)]).encode())
        item = f"{user_id}#{campaign_id}#{digest.hexdigest()[:32]}"
        batch = StoredBatch(
            bucket or minute_of(due_ms),
            item,
            user_id,
            campaign_id,
            plan,
            queue,
            due_ms,
            deadline_ms,
            len(emails),
            "key",
        )
        self.batches = [b for b in self.batches if (b.bucket, b.item) != (batch.bucket, item)] + [batch]
        self._gone.discard((batch.bucket, item))
        self.kept[item] = list(emails)
        return batch

    def emails(self, batch: StoredBatch) -> list[tuple[str, str]]:
        return self.kept[batch.item]

    def remove(self, batch: StoredBatch, *, keep_body: bool = False) -> None:
        self.removed.append(batch)
        self._gone.add((batch.bucket, batch.item))

    def parked(self, bucket: str) -> list[StoredBatch]:
        return [b for b in self.batches if b.bucket == bucket and (b.bucket, b.item) not in self._gone]
