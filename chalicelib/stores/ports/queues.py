"""The queues' stores' ports (chalicelib.stores.lease, queue_activity): each queue's drain lease, and each
tenant queue's activity; and the lease they speak of."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Lease:
    queue: str
    token: str
    expires_ms: int
    quiet_from_ms: int | None = None  # when taken: wait until then before sending (the last drain's window)


class LeaseHolders(Protocol):
    """Whether a queue has a live drainer: the drain starter, the sweeper and the idle-queue job ask only this."""

    def holder(self, queue: str) -> Lease | None: ...


class DrainLeases(LeaseHolders, Protocol):
    """The drain chain's (chalicelib.send.drain_chain): take, hand on and give up a queue's lease."""

    def acquire(self, queue: str, hold_ms: int) -> Lease | None: ...

    def renew(self, queue: str, token: str, hold_ms: int) -> Lease | None: ...

    def drop(self, lease: Lease, quiet_from_ms: int | None = None) -> None: ...


class QueuesDrained(Protocol):
    """The queues a drain held since a time (chalicelib.stores.lease)."""

    def drained(self, since_ms: int) -> set[str]: ...


class QueueTouch(Protocol):
    """The queue's writer (chalicelib.queueing.tenant_queues): mark a queue used today (and this hour, the
    sweeper's); True when it was retired."""

    def touch(self, user_id: str, day: str, hour: str | None = None) -> bool: ...


class QueuesUsedIn(Protocol):
    """The tenants whose queue was last used in given UTC hours, and a queue marked in use for an hour
    (chalicelib.stores.queue_activity)."""

    def used_in(self, hours: Iterable[str]) -> set[str]: ...

    def mark_hour(self, user_id: str, hour: str) -> None: ...


class QueueRetirement(Protocol):
    """The idle-queue job's: which queues are idle, and claiming, finishing or retrying their removal."""

    def idle(self, before_day: str) -> Iterator[tuple[str, str]]: ...

    def stale_retirements(self) -> Iterator[str]: ...

    def retire(self, user_id: str, day: str) -> int | None: ...

    def reclaim(self, user_id: str) -> int | None: ...

    def still_claimed(self, user_id: str, claimed_ms: int) -> bool: ...

    def gone(self, user_id: str) -> None: ...
