"""What a drain did: its result, the summary log line and the CloudWatch metrics (embedded metric format)."""

from __future__ import annotations

from dataclasses import dataclass, field

from chalicelib.core import log, metrics
from chalicelib.core.config import Settings
from chalicelib.core.metrics import QueueLag
from chalicelib.core.routing import is_free_queue


@dataclass
class DrainResult:
    queue_name: str
    sent: int = 0
    failed: int = 0
    throttled: int = 0
    retried: int = 0
    duplicates: int = 0
    suppressed: int = 0
    cancelled: int = 0
    expired: int = 0
    dead_lettered: int = 0
    handed_back: int = 0  # left to the drainers its rate needs (this one's slot is above them)
    slot: int = 0  # which of the queue's drainers this was (chalicelib.core.drainer_shares)
    lag: QueueLag = field(default_factory=QueueLag)
    tenants: set[str] = field(default_factory=set)
    unfinished: bool = False  # stopped for the deadline: hand on to a new invocation
    # When the next drainer of this slot may send (epoch ms): a window after this one's last send finished.
    quiet_from_ms: int | None = None
    stopped_reason: str | None = None


def report_drain(settings: Settings, result: DrainResult) -> None:
    _log(result)
    _emit(settings, result)


def _log(result: DrainResult) -> None:
    log.info(
        "drain ended",
        queue=result.queue_name,
        slot=result.slot,
        sent=result.sent,
        failed=result.failed,
        throttled=result.throttled,
        retried=result.retried,
        duplicates=result.duplicates,
        dead_lettered=result.dead_lettered,
        handed_back=result.handed_back,
        lag_mean_ms=round(result.lag.mean_ms),
        lag_max_ms=result.lag.max_ms,
        unfinished=result.unfinished,
        stopped=result.stopped_reason,
    )


def _emit(settings: Settings, result: DrainResult) -> None:
    queue_name = result.queue_name
    free = is_free_queue(settings.resources, queue_name)
    counts = {
        "Sent": result.sent,
        "Failed": result.failed,
        "Throttled": result.throttled,
        "Retried": result.retried,
        "Duplicates": result.duplicates,
        "DeadLettered": result.dead_lettered,
    }
    try:
        metrics.emit(
            metrics.drain_record(
                stage=settings.stage,
                plan="free" if free else "paid",
                queue=queue_name,
                tenant=None if free or len(result.tenants) != 1 else next(iter(result.tenants)),
                counts=counts,
                lag=result.lag,
            )
        )
    except Exception as exc:  # metrics must never fail a drain whose outcomes are recorded
        log.warning("metrics not emitted", queue=queue_name, error=type(exc).__name__)
