"""The tenant queues' registry and their last-used days, in memory."""

from __future__ import annotations

from collections.abc import Iterable


class FakeQueues:
    """TenantQueues.ensure: every queue exists; which were asked for is kept."""

    def __init__(self) -> None:
        self.ensured: list[tuple[str, str]] = []

    def ensure(self, queue_name: str, user_id: str) -> str:
        self.ensured.append((queue_name, user_id))
        return f"https://sqs/{queue_name}"


class FakeQueueActivity:
    """QueueActivity.touch: True (recreate the queue) the first time a `retired` tenant's queue is used."""

    def __init__(self, retired: Iterable[str] = ()) -> None:
        self.retired = set(retired)
        self.touched: list[tuple[str, str]] = []

    def touch(self, user_id: str, day: str, hour: str | None = None) -> bool:
        self.touched.append((user_id, day))
        if user_id in self.retired:
            self.retired.discard(user_id)
            return True
        return False
