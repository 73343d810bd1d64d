"""The chain of send_emails invocations that drains one queue: lease, drain, hand on, drop.

A trigger (the alarm, or later the sweeper) takes the queue's lease or returns at once if another
drainer holds it. The holder drains until its Lambda time runs short, then re-invokes itself with the
lease token; the continuation renews the lease and goes on. When the queue is empty the lease is
dropped, so the next trigger starts a new chain. A chain that dies lets its lease expire.
"""

from __future__ import annotations

import time
from typing import Any

from chalicelib.core import log
from chalicelib.send.drainer import DrainResult
from chalicelib.send.triggers import DrainRequest
from chalicelib.stores.lease import Lease

# A lease outlives its holder's Lambda time by this much, so that a re-invocation can renew it.
LEASE_GRACE_MS = 60_000


def run(container: Any, request: DrainRequest, queue: str, context: Any) -> DrainResult | None:
    """One link of the chain. Returns None when another drainer holds the queue."""
    hold = int(context.get_remaining_time_in_millis()) + LEASE_GRACE_MS
    leases = container.leases
    lease: Lease | None
    if request.source == "continue" and request.lease:
        lease = leases.renew(queue, request.lease, hold)
    else:
        lease = leases.acquire(queue, hold)
    if lease is None:
        log.info("queue already being drained", queue=queue, trigger=request.source)
        return None
    if request.start_at_ms is not None:
        _wait_until(request.start_at_ms, context, container.settings.deadline_margin_ms)
    result: DrainResult = container.drainer.drain(queue, remaining_ms=context.get_remaining_time_in_millis)
    if result.unfinished:
        container.reinvoke(context.function_name, queue, request.generation + 1, lease.token)
    else:
        leases.drop(lease)
    return result


def _wait_until(start_at_ms: int, context: Any, margin_ms: int) -> None:
    """A scheduled start: the queue's email becomes visible at `start_at_ms`; begin then, not a poll later.

    The lease is held while waiting (at most the releaser's lead), so no other drain starts meanwhile."""
    wait_ms = start_at_ms - int(time.time() * 1000)
    room_ms = int(context.get_remaining_time_in_millis()) - margin_ms
    if wait_ms > 0:
        time.sleep(max(0, min(wait_ms, room_ms)) / 1000)
