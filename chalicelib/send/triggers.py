"""What starts a drain: the CloudWatch alarm's SNS message, or the drainer's own re-invocation.

The alarm message is CloudWatch's (`Trigger.Dimensions` names the queue; see seed 003). Only the
transition to ALARM starts a drain: OK and INSUFFICIENT_DATA messages are ignored. The continuation is
ours, sent as an SNS-shaped event so that one Chalice handler takes both. A queue drained by several
drainers (chalicelib.core.drainer_shares) has each one's slot in its start and its continuations; the
alarm, the sweeper and the writers start slot 0, which starts the others.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

CONTINUE_KIND = "moonsend.drain.continue"
SWEEP_KIND = "moonsend.drain.sweep"


@dataclass(frozen=True)
class DrainRequest:
    queue_name: str
    source: str  # "alarm", "sweep" or "continue"
    generation: int = 0
    lease: str | None = None  # the lease token a continuation carries
    start_at_ms: int | None = None  # a scheduled start: the drain waits until then (epoch ms)
    slot: int = 0  # which of the queue's drainers this is (0 unless its rate needs several)
    failures: int = 0  # drains of this chain that failed in a row (a continuation after one waits longer)


def parse_trigger(message: str) -> DrainRequest | None:
    """The queue to drain, or None for a message that asks for nothing (OK state, not ours)."""
    try:
        d = json.loads(message)
    except ValueError:
        return None
    if not isinstance(d, dict):
        return None
    if d.get("kind") in (CONTINUE_KIND, SWEEP_KIND) and isinstance(d.get("queue"), str):
        slot = _slot(d.get("slot", 0))
        if slot is None:
            return None
        start = d.get("startAt")
        if d["kind"] == CONTINUE_KIND:
            at = start if isinstance(start, int) and not isinstance(start, bool) else None
            failures = d.get("failures", 0)
            failures = failures if isinstance(failures, int) and not isinstance(failures, bool) else 0
            return DrainRequest(
                d["queue"], "continue", int(d.get("generation", 0)), d.get("lease"), at, slot, max(0, failures)
            )
        if isinstance(start, int) and not isinstance(start, bool):
            return DrainRequest(d["queue"], "schedule", start_at_ms=start, slot=slot)
        return DrainRequest(d["queue"], "sweep" if slot == 0 else "helper", slot=slot)
    if d.get("NewStateValue") != "ALARM":
        return None
    trigger = d.get("Trigger") or {}
    for dim in trigger.get("Dimensions") or []:
        name = dim.get("name", dim.get("Name"))
        value = dim.get("value", dim.get("Value"))
        if name == "QueueName" and isinstance(value, str):
            return DrainRequest(value, "alarm")
    return None


# More drainers than any rate needs (SES accounts top out in the thousands a second): a bigger slot in a
# trigger is not ours.
MAX_SLOTS = 1000


def _slot(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_SLOTS:
        return value
    return None


def sweep_event(queue_name: str, topic_arn: str, start_at_ms: int | None = None, slot: int = 0) -> dict[str, Any]:
    """The payload that starts a drain: the sweeper's for a stalled queue, the releaser's for a scheduled one,
    a writer's for a queue with no drainer, slot 0's for another drainer of its queue."""
    message: dict[str, Any] = {"kind": SWEEP_KIND, "queue": queue_name}
    if start_at_ms is not None:
        message["startAt"] = int(start_at_ms)
    if slot:
        message["slot"] = slot
    return _sns_event(json.dumps(message), topic_arn, "sweeper")


def continuation_event(
    queue_name: str,
    generation: int,
    topic_arn: str,
    lease: str,
    slot: int = 0,
    start_at_ms: int | None = None,
    failures: int = 0,
) -> dict[str, Any]:
    """The payload of the drainer's asynchronous self-invocation, in Lambda's SNS event shape.

    `start_at_ms`: when the continuation may send its first email (a window after the last one's).
    `failures`: the drains of the chain that failed in a row before it (chalicelib.send.drain_chain)."""
    message: dict[str, Any] = {"kind": CONTINUE_KIND, "queue": queue_name, "generation": generation, "lease": lease}
    if start_at_ms is not None:
        message["startAt"] = int(start_at_ms)
    if slot:
        message["slot"] = slot
    if failures:
        message["failures"] = failures
    return _sns_event(json.dumps(message), topic_arn, "self-invoke")


def _sns_event(message: str, topic_arn: str, via: str) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": f"{topic_arn}:{via}",
                "Sns": {
                    "Type": "Notification",
                    "MessageId": str(uuid.uuid4()),
                    "TopicArn": topic_arn,
                    "Subject": None,
                    "Message": message,
                    "Timestamp": now,
                    "MessageAttributes": {},
                },
            }
        ]
    }
