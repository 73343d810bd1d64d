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
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Replayed:
    function: str
    request_id: str
    condition: str


def function_of(record: dict[str, Any]) -> str:
    """The invoked function's name, from the record's ARN (`...:function:name:$LATEST`)."""
    arn = record["requestContext"]["functionArn"]
    return arn.split(":function:", 1)[1].split(":", 1)[0]


def replay_failed(sqs: Any, lam: Any, queue_url: str, *, only: str | None = None, limit: int = 1000) -> list[Replayed]:
    """Invoke each recorded event again (`only`: of one function); returns what was replayed.

    Records of other functions are received and made visible again at the end, untouched."""
    done: list[Replayed] = []
    skipped: list[str] = []
    while len(done) < limit:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=300).get(
            "Messages", []
        )
        if not messages:
            break
        for m in messages:
            record = json.loads(m["Body"])
            fn = function_of(record)
            if only is not None and fn != only:
                skipped.append(m["ReceiptHandle"])
                continue
            lam.invoke(FunctionName=fn, InvocationType="Event", Payload=json.dumps(record["requestPayload"]).encode())
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
            ctx = record["requestContext"]
            done.append(Replayed(fn, ctx.get("requestId", ""), ctx.get("condition", "")))
    for handle in skipped:
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=handle, VisibilityTimeout=0)
    return done
