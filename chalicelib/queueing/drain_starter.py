"""Whoever puts email on a queue with no drainer starts one: the first email goes out in seconds.

On AWS a queue's alarm fires on SQS's metrics, which SQS publishes once a minute, and up to 15 minutes
late for a queue idle more than six hours: a tenant idle for days would wait that long for its first
email. The writer knows the queue has work the moment it is put there, so precompile (and retry-failed)
start a drain themselves when no drainer holds the queue's lease. The lease makes a second start
harmless (the late one finds the lease taken and returns at once); the alarm and the sweeper stay as
the backstops for anything this misses (a start that fails, a drain that ends as email arrives).

Each container remembers the queues it saw drained or started a drain for in the last few seconds, so a
campaign's burst of messages costs one lease read per queue, not one per message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from chalicelib.core import log
from chalicelib.stores.lease import Leases

# How long a queue seen with a drainer (or given one) is taken to still have it. A drain ends only after
# two empty long polls, so email put on its queue within this is received by it.
RECENTLY_S = 5.0


class DrainStarter:
    def __init__(
        self,
        leases: Leases,
        start_drain: Callable[[str, int | None], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leases = leases
        self._start_drain = start_drain
        self._clock = clock
        self._seen: dict[str, float] = {}  # queue -> when it was last seen drained or given a drain
        self._lock = threading.Lock()

    def ensure(self, queue: str, start_at_ms: int | None = None) -> bool:
        """Start a drain of `queue` (at `start_at_ms`, for email delayed until then) unless one holds it.

        True when a drain was started. Never raises: the alarm and the sweeper start it otherwise."""
        now = self._clock()
        with self._lock:
            if now - self._seen.get(queue, float("-inf")) < RECENTLY_S:
                return False
            self._seen[queue] = now  # concurrent writers in this container: one of them asks
        try:
            if self._leases.holder(queue) is not None:
                return False
            self._start_drain(queue, start_at_ms)
        except Exception as exc:  # the email is on the queue: its alarm or the sweeper starts the drain
            with self._lock:
                self._seen.pop(queue, None)
            log.warning("drain not started; the alarm or the sweeper will", queue=queue, error=type(exc).__name__)
            return False
        log.info("drain started by its writer", queue=queue)
        return True
