"""Whoever puts email on a queue with no drainer starts one: the first email goes out in seconds.

On AWS a queue's alarm fires on SQS's metrics, which SQS publishes once a minute, and up to 15 minutes
late for a queue idle more than six hours: a tenant idle for days would wait that long for its first
email. The writer knows the queue has work the moment it is put there, so precompile (and retry-failed)
start a drain themselves when no drainer holds the queue's lease. The lease makes a second start
harmless (the late one finds the lease taken and returns at once); the alarm and the sweeper stay as
the backstops for anything this misses (a start that fails, a drain that ends as email arrives).

Each container remembers the queues it saw drained or started a drain for in the last few seconds, so a
campaign's burst of messages costs one lease read per queue, not one per message. A queue's first drainer
starts the others its rate needs the same way, one slot at a time (chalicelib.core.drainer_shares).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from chalicelib.core import log
from chalicelib.core.drainer_shares import lease_key
from chalicelib.stores.ports.queues import LeaseHolders

# How long a queue seen with a drainer (or given one) is taken to still have it, at most. A drain ends only
# after EMPTY_POLLS_TO_FINISH empty long polls, so email put on its queue within those is received by it.
RECENTLY_S = 5.0
EMPTY_POLLS_TO_FINISH = 2


def trusted_for_s(long_poll_seconds: int) -> float:
    """How long a drain asked for is taken to receive what comes after: no longer than its last empty polls
    (1 s each on the local stage, where a 5 s trust let a campaign sent 3 s after the last one's drain ended
    wait for the sweeper's minute)."""
    return min(RECENTLY_S, EMPTY_POLLS_TO_FINISH * long_poll_seconds)


class StartDrain(Protocol):
    """Invoke send_emails for a queue's drainer `slot` (the container's `start_drain`)."""

    def __call__(self, queue_name: str, start_at_ms: int | None = None, slot: int = 0) -> None: ...


class DrainStarter:
    def __init__(
        self,
        leases: LeaseHolders,
        start_drain: StartDrain,
        clock: Callable[[], float] = time.monotonic,
        *,
        trusted_s: float = RECENTLY_S,
    ) -> None:
        self._leases = leases
        self._start_drain = start_drain
        self._clock = clock
        self._trusted_s = trusted_s  # trusted_for_s(the stage's long poll)
        self._seen: dict[str, float] = {}  # lease key -> when it was last seen held or given a drain
        self._lock = threading.Lock()

    def ensure(self, queue: str, start_at_ms: int | None = None, slot: int = 0) -> bool:
        """Start drainer `slot` of `queue` (at `start_at_ms`, for email delayed until then) unless one holds it.

        True when a drain was started. Never raises: the alarm and the sweeper start slot 0 otherwise, and
        slot 0 asks again for the others."""
        key = lease_key(queue, slot)
        now = self._clock()
        with self._lock:
            if now - self._seen.get(key, float("-inf")) < self._trusted_s:
                return False
            self._seen[key] = now  # concurrent writers in this container: one of them asks
        try:
            if self._leases.holder(key) is not None:
                return False
            self._start_drain(queue, start_at_ms, slot=slot)
        except Exception as exc:  # the email is on the queue: its alarm or the sweeper starts the drain
            with self._lock:
                self._seen.pop(key, None)
            log.warning("drain not started; the alarm or the sweeper will", queue=queue, error=type(exc).__name__)
            return False
        log.info("drain started", queue=queue, slot=slot)
        return True
