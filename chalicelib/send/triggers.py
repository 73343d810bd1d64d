"""What starts a drain: the CloudWatch alarm's SNS message, or the sender's own re-invocation.

The alarm message is CloudWatch's (`Trigger.Dimensions` names the queue; see seed 003). Only the
transition to ALARM starts a drain: OK and INSUFFICIENT_DATA messages are ignored. The continuation is
ours, sent as an SNS-shaped event so that one Chalice handler takes both.
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


def parse_trigger(message: str) -> DrainRequest | None:
    """The queue to drain, or None for a message that asks for nothing (OK state, not ours)."""
    try:
        d = json.loads(message)
    except ValueError:
        return None
    if not isinstance(d, dict):
        return None
    if d.get("kind") == CONTINUE_KIND and isinstance(d.get("queue"), str):
        return DrainRequest(d["queue"], "continue", int(d.get("generation", 0)), d.get("lease"))
    if d.get("kind") == SWEEP_KIND and isinstance(d.get("queue"), str):
        start = d.get("startAt")
        if isinstance(start, int) and not isinstance(start, bool):
            return DrainRequest(d["queue"], "schedule", start_at_ms=start)
        return DrainRequest(d["queue"], "sweep")
    if d.get("NewStateValue") != "ALARM":
        return None
    trigger = d.get("Trigger") or {}
    for dim in trigger.get("Dimensions") or []:
        name = dim.get("name", dim.get("Name"))
        value = dim.get("value", dim.get("Value"))
        if name == "QueueName" and isinstance(value, str):
            return DrainRequest(value, "alarm")
    return None


def sweep_event(queue_name: str, topic_arn: str, start_at_ms: int | None = None) -> dict[str, Any]:
    """The payload with which the sweeper starts a drain of a stalled queue (or the releaser a scheduled one)."""
    message: dict[str, Any] = {"kind": SWEEP_KIND, "queue": queue_name}
    if start_at_ms is not None:
        message["startAt"] = int(start_at_ms)
    return _sns_event(json.dumps(message), topic_arn, "sweeper")


def continuation_event(queue_name: str, generation: int, topic_arn: str, lease: str) -> dict[str, Any]:
    """The payload of the sender's asynchronous self-invocation, in Lambda's SNS event shape."""
    message = json.dumps({"kind": CONTINUE_KIND, "queue": queue_name, "generation": generation, "lease": lease})
    return _sns_event(message, topic_arn, "self-invoke")


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
