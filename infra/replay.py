"""`moonsend replay-failed`: async invocations that failed for good, invoked again.

Lambda sends an async event that failed every attempt to the function's on-failure destination (the
stage's `failed-invocations` queue) as an invocation record: the function's ARN, the condition, the
attempts and the event itself (`requestPayload`). Replaying a record invokes that function again,
asynchronously, with the same event, and deletes the record once Lambda accepted the invocation. The
pipeline is idempotent per recipient (the ledger), so a replayed precompile or drain sends each
recipient at most once, however often it is replayed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Two empty long polls in a row: SQS's answer to one receive may miss messages that are there.
EMPTY_POLLS_TO_FINISH = 2


@dataclass(frozen=True)
class Replayed:
    function: str
    request_id: str
    condition: str


@dataclass
class ReplayReport:
    replayed: list[Replayed] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # message ids of bodies that are no invocation record


def function_of(record: dict[str, Any]) -> str:
    """The invoked function's name, from the record's ARN (`...:function:name:$LATEST`)."""
    arn = record["requestContext"]["functionArn"]
    return arn.split(":function:", 1)[1].split(":", 1)[0]


def _record(body: str) -> dict[str, Any] | None:
    try:
        record = json.loads(body)
        function_of(record)
        record["requestPayload"]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return record if isinstance(record, dict) else None


def replay_failed(sqs: Any, lam: Any, queue_url: str, *, only: str | None = None, limit: int = 1000) -> ReplayReport:
    """Invoke each recorded event again (`only`: of one function).

    Records of other functions, and bodies that are no invocation record, are left on the queue (made
    visible again at the end) and the latter reported."""
    report = ReplayReport()
    left: list[str] = []
    empty = 0
    while len(report.replayed) < limit and empty < EMPTY_POLLS_TO_FINISH:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=300, WaitTimeSeconds=1
        ).get("Messages", [])
        empty = 0 if messages else empty + 1
        for m in messages:
            record = _record(m["Body"])
            if record is None:
                report.unreadable.append(m.get("MessageId", ""))
                left.append(m["ReceiptHandle"])
                continue
            fn = function_of(record)
            if only is not None and fn != only:
                left.append(m["ReceiptHandle"])
                continue
            lam.invoke(FunctionName=fn, InvocationType="Event", Payload=json.dumps(record["requestPayload"]).encode())
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
            ctx = record["requestContext"]
            report.replayed.append(Replayed(fn, ctx.get("requestId", ""), ctx.get("condition", "")))
    for handle in left:
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=handle, VisibilityTimeout=0)
    return report
