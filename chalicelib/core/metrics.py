"""CloudWatch metrics of a drain, in Embedded Metric Format (Powertools EphemeralMetrics).

One EMF record per drain invocation (not per email): Sent, Failed, Throttled, Retried, Duplicates,
and the queue lag (how long the emails of this drain waited between enqueue and send: mean and max).
Dimensions are the stage and the plan only. The tenant, campaign-free queue name and the drain's figures
go in as metadata: searchable in CloudWatch Logs Insights, but not a metric dimension, because every
distinct dimension value is a custom metric billed monthly, and 10,000 tenants times six metrics would
cost more than the email.

`EphemeralMetrics`, not `Metrics`: Powertools' `Metrics` shares one metric set per process, and a process
may run several drains at once, each with figures of its own. On Lambda the record is printed (CloudWatch
Logs turns it into metrics); where `MOONSEND_METRICS_FILE` is set it is appended to that file instead, so
that it does not interleave with a terminal's progress display.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

NAMESPACE = "moonsend"
SERVICE = "moonsend"  # Powertools' `service` dimension, on every record
_file_lock = threading.Lock()


@dataclass
class QueueLag:
    """Enqueue-to-send waits of the emails of one drain, in milliseconds."""

    count: int = 0
    total_ms: int = 0
    max_ms: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, lag_ms: int) -> None:
        lag_ms = max(0, lag_ms)
        with self._lock:
            self.count += 1
            self.total_ms += lag_ms
            self.max_ms = max(self.max_ms, lag_ms)

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.count if self.count else 0.0


def drain_record(
    *,
    stage: str,
    plan: str,
    queue: str,
    tenant: str | None,
    counts: dict[str, int],
    lag: QueueLag,
) -> dict[str, Any]:
    """The EMF record of one drain."""
    m = EphemeralMetrics(namespace=NAMESPACE, service=SERVICE)
    m.add_dimension(name="stage", value=stage)
    m.add_dimension(name="plan", value=plan)
    for name, value in counts.items():
        m.add_metric(name=name, unit=MetricUnit.Count, value=value)
    if lag.count:
        m.add_metric(name="QueueLagMeanMs", unit=MetricUnit.Milliseconds, value=round(lag.mean_ms, 1))
        m.add_metric(name="QueueLagMaxMs", unit=MetricUnit.Milliseconds, value=lag.max_ms)
    m.add_metadata(key="queue", value=queue)
    if tenant:
        m.add_metadata(key="tenant", value=tenant)
    return dict(m.serialize_metric_set())


def emit(record: dict[str, Any]) -> None:
    """Print the record for CloudWatch (Lambda), or append it to `MOONSEND_METRICS_FILE` where that is set."""
    if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() in ("1", "true"):
        return
    line = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    path = os.environ.get("MOONSEND_METRICS_FILE")
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with _file_lock, open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    else:
        print(line, flush=True)
