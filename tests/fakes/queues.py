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


class Said:
    """Queues said to be in use (chalicelib.jobs.queues_in_use's port), for a sweeper of queues a test made
    itself, which no tenant's sends marked."""

    def __init__(self, queues: set[str]) -> None:
        self.queues = set(queues)

    def at(self, _now: float) -> set[str]:
        return set(self.queues)

    def keep(self, queue: str, _now: float) -> None:
        self.queues.add(queue)
