"""The chain of send_emails invocations that drains one queue: lease, drain, hand on, drop.

A trigger (the alarm, or later the sweeper) takes the queue's lease or returns at once if another
drainer holds it. The holder drains until its Lambda time runs short, then re-invokes itself with the
lease token; the continuation renews the lease and goes on. When the queue is empty the lease is
dropped, so the next trigger starts a new chain. A chain that dies lets its lease expire. A queue whose
rate needs several drainers has one chain per slot, each with its own lease (chalicelib.core.drainer_shares).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from chalicelib.core import log
from chalicelib.core.drainer_shares import lease_key
from chalicelib.send.drain_report import DrainResult
from chalicelib.send.triggers import DrainRequest
from chalicelib.stores.ports.queues import DrainLeases, Lease

# A lease outlives its holder's Lambda time by this much, so that a re-invocation can renew it.
LEASE_GRACE_MS = 60_000
# A failed drain's continuation waits this long, doubled for each failure in a row, up to the most.
FIRST_FAILURE_WAIT_MS = 2_000
MAX_FAILURE_WAIT_MS = 60_000
# A drain that ran this long before it failed made progress: its failure is the first in a row.
PROGRESS_S = 10.0


@runtime_checkable
class LambdaContext(Protocol):
    """What the chain reads of its invocation's context (Lambda's)."""

    @property
    def function_name(self) -> str: ...

    def get_remaining_time_in_millis(self) -> int: ...


class SlotDrainer(Protocol):
    """The drainer (chalicelib.send.drainer.Drainer): drain one queue's slot until told to stop."""

    def drain(self, queue_name: str, remaining_ms: Callable[[], int], slot: int = 0) -> DrainResult: ...


class HandOn(Protocol):
    """Re-invoke the chain's function with its lease (chalicelib.wiring.Container.reinvoke)."""

    def __call__(
        self,
        function_name: str,
        queue_name: str,
        generation: int,
        lease: str,
        slot: int = 0,
        start_at_ms: int | None = None,
        failures: int = 0,
    ) -> None: ...


@dataclass(frozen=True)
class DrainChain:
    """What one link of the chain uses (chalicelib.wiring builds it)."""

    leases: DrainLeases
    drainer: SlotDrainer
    hand_on: HandOn
    deadline_margin_ms: int


def run(chain: DrainChain, request: DrainRequest, queue: str, context: LambdaContext) -> DrainResult | None:
    """One link of the chain. Returns None when another drainer holds the queue, or when the drain failed and
    was handed on to a continuation."""
    hold = int(context.get_remaining_time_in_millis()) + LEASE_GRACE_MS
    leases = chain.leases
    key = lease_key(queue, request.slot)
    lease: Lease | None
    if request.source == "continue" and request.lease:
        lease = leases.renew(key, request.lease, hold)
    else:
        lease = leases.acquire(key, hold)
    if lease is None:
        log.info("queue already being drained", queue=queue, slot=request.slot, trigger=request.source)
        return None
    starts = [at for at in (request.start_at_ms, lease.quiet_from_ms) if at is not None]
    if starts:
        _wait_until(max(starts), context, chain.deadline_margin_ms)
    started = time.monotonic()
    try:
        result = chain.drainer.drain(queue, remaining_ms=context.get_remaining_time_in_millis, slot=request.slot)
    except Exception as exc:
        # Failures in a row are those of drains that got nowhere: one that drained a while before failing
        # starts the count again, so an occasional error never grows into minute-long waits.
        in_a_row = request.failures + 1 if time.monotonic() - started < PROGRESS_S else 1
        if not _handed_on_after(exc, chain, request, queue, lease, context, in_a_row):
            raise
        return None
    if result.unfinished:
        chain.hand_on(
            context.function_name, queue, request.generation + 1, lease.token, request.slot, result.quiet_from_ms
        )
    else:
        leases.drop(lease, result.quiet_from_ms)
    return result


def _handed_on_after(
    exc: Exception,
    chain: DrainChain,
    request: DrainRequest,
    queue: str,
    lease: Lease,
    context: LambdaContext,
    failures: int,
) -> bool:
    """A drain that failed (an error past the SDK's retries: a throttled delete, a throttled read) hands its
    lease on to a continuation a few seconds later, as a drain that ran out of time does: its queue is drained
    again within seconds, not after the lease's hold (the invocation's time and its grace: 16 minutes on
    AWS), which the retry Lambda makes a minute later, the sweeper and the alarm all respect. The wait doubles
    with each failure in a row (`failures`: drains that failed within PROGRESS_S of their start), up to a
    minute. The error is not raised on then: Lambda's retry of this invocation would renew the same lease
    beside the continuation, two drains sending at one rate. If even the hand-on fails (False), the lease
    is given back, so that Lambda's retry (the error is raised on) or the sweeper starts the next drain."""
    wait_ms = min(MAX_FAILURE_WAIT_MS, FIRST_FAILURE_WAIT_MS * 2 ** (failures - 1))
    start_at_ms = int(time.time() * 1000) + wait_ms
    log.error(
        "drain failed, handed on",
        queue=queue,
        slot=request.slot,
        failures=failures,
        retry_in_ms=wait_ms,
        error=f"{type(exc).__name__}: {exc}"[:300],
    )
    try:
        chain.hand_on(
            context.function_name, queue, request.generation + 1, lease.token, request.slot, start_at_ms, failures
        )
        return True
    except Exception as hand_on_error:
        log.error("drain not handed on, lease given back", queue=queue, error=type(hand_on_error).__name__)
        chain.leases.drop(lease, start_at_ms)
        return False


def _wait_until(start_at_ms: int, context: LambdaContext, margin_ms: int) -> None:
    """A scheduled start: the queue's email becomes visible at `start_at_ms`; begin then, not a poll later.
    A continuation, or a drain after one that ended: the last drain's sends fill a window until then.

    The lease is held while waiting (at most the releaser's lead, or a second), so no other drain starts."""
    wait_ms = start_at_ms - int(time.time() * 1000)
    room_ms = int(context.get_remaining_time_in_millis()) - margin_ms
    if wait_ms > 0:
        time.sleep(max(0, min(wait_ms, room_ms)) / 1000)
