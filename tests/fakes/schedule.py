"""The schedule store in memory: what was stored, what removed, parked partitions read back."""

from __future__ import annotations

from chalicelib.stores.schedule import StoredBatch, minute_of


class FakeSchedule:
    def __init__(self):
        self.batches: list[StoredBatch] = []
        self.kept: dict[str, dict] = {}  # item -> what put() was given
        self.removed: list[StoredBatch] = []

    def put(self, *, user_id, campaign_id, plan, queue, due_ms, deadline_ms, emails, bucket=None):
        item = f"{user_id}#{campaign_id}#{len(self.batches)}"
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
        self.batches.append(batch)
        self.kept[item] = {"emails": list(emails), "bucket": batch.bucket}
        return batch

    def emails(self, batch):
        return self.kept[batch.item]["emails"]

    def remove(self, batch, *, keep_body=False):
        self.removed.append(batch)

    def parked(self, bucket):
        gone = {b.item for b in self.removed}
        return [b for b in self.batches if b.bucket == bucket and b.item not in gone]
