"""The drain leases in memory: `held` queues have a live drainer (FakeLeases), or the store's rules (MemoryLeases)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable

from chalicelib.stores.ports.queues import Lease


class FakeLeases:
    def __init__(self, held: Iterable[str] = ()) -> None:
        self.held = set(held)
        self.reads = 0

    def holder(self, queue: str) -> Lease | None:
        self.reads += 1
        return Lease(queue, "token", 2**62) if queue in self.held else None


class MemoryLeases:
    """Leases with the DynamoDB store's conditions (absent or expired to take; the token to renew or drop)."""

    def __init__(self) -> None:
        self._items: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self.taken: list[str] = []  # lease keys, each time one was taken

    def acquire(self, queue: str, hold_ms: int) -> Lease | None:
        now = time.time() * 1000
        with self._lock:
            held = self._items.get(queue)
            if held is not None and held.expires_ms >= now:
                return None
            quiet = held.quiet_from_ms if held is not None and (held.quiet_from_ms or 0) > now else None
            lease = self._items[queue] = Lease(queue, uuid.uuid4().hex, int(now + hold_ms), quiet)
            self.taken.append(queue)
            return lease

    def renew(self, queue: str, token: str, hold_ms: int) -> Lease | None:
        """Under a new token, as the store renews: a continuation delivered twice renews once."""
        with self._lock:
            held = self._items.get(queue)
            if held is None or held.token != token:
                return None
            expires = int(time.time() * 1000 + hold_ms)
            lease = self._items[queue] = Lease(queue, uuid.uuid4().hex, expires, held.quiet_from_ms)
            return lease

    def drop(self, lease: Lease, quiet_from_ms: int | None = None) -> None:
        with self._lock:
            if self._items.get(lease.queue, lease).token == lease.token:
                self._items[lease.queue] = Lease(lease.queue, "released", 0, quiet_from_ms)

    def holder(self, queue: str) -> Lease | None:
        with self._lock:
            held = self._items.get(queue)
        return held if held is not None and held.expires_ms >= time.time() * 1000 else None
