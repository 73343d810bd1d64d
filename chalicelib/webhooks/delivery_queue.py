"""The webhook delivery queue: deliveries put on it ten to a request, and a failed one hidden until its retry.

One queue for every tenant: a delivery is a message, and deliver_webhooks takes them in batches and makes
each batch's requests at the same time, so a slow receiver holds only its own request. Each message
carries its tenant as `MessageGroupId`, which makes the standard queue an SQS fair queue: a tenant with a
backlog (a campaign's worth of events for an endpoint that is down) is served after the others' few,
rather than before them. A delivery that
failed is not deleted; it is made invisible for the wait before its next attempt (SQS allows up to 12 h),
and comes back as the same message, with the same `webhook-id`, and a receive count that is its attempt.
"""

from __future__ import annotations

from typing import Any

from chalicelib.core.errors import DeliveryNotQueued
from chalicelib.webhooks.deliveries import Delivery

SQS_BATCH = 10
# What one SendMessageBatch carries at most, all its messages together (SQS's classic limit; a larger
# batch is refused whole with BatchRequestTooLong).
MAX_REQUEST_BYTES = 256 * 1024


class DeliveryQueue:
    def __init__(self, sqs: Any, queue_name: str) -> None:
        self._sqs = sqs
        self._name = queue_name
        self._url: str | None = None

    def url(self) -> str:
        if self._url is None:
            self._url = str(self._sqs.get_queue_url(QueueName=self._name)["QueueUrl"])
        return self._url

    def put(self, deliveries: list[Delivery]) -> None:
        self.put_messages([(d.user_id, d.to_message()) for d in deliveries])

    def put_messages(self, messages: list[tuple[str, str]]) -> None:
        """Every (tenant, body) on the queue, or DeliveryNotQueued naming what SQS refused (what it took stays
        taken: a delivery put twice carries one webhook-id, which the receiver drops the second time)."""
        for batch in _requests(messages):
            entries = [
                {"Id": str(n), "MessageBody": body, "MessageGroupId": user} for n, (user, body) in enumerate(batch)
            ]
            answer = self._sqs.send_message_batch(QueueUrl=self.url(), Entries=entries)
            failed = answer.get("Failed") or []
            if failed:
                codes = sorted({str(f.get("Code")) for f in failed})
                raise DeliveryNotQueued(f"SQS refused {len(failed)} webhook deliveries: {', '.join(codes)}")

    def retry_later(self, receipt_handle: str, wait_s: int) -> None:
        """Hide a delivery until its next attempt."""
        self._sqs.change_message_visibility(
            QueueUrl=self.url(), ReceiptHandle=receipt_handle, VisibilityTimeout=max(0, min(wait_s, 43200))
        )


def _requests(messages: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The messages in SendMessageBatch requests: at most ten, and MAX_REQUEST_BYTES, each."""
    out: list[list[tuple[str, str]]] = []
    size = 0
    for user_id, body in messages:
        n = len(body.encode("utf-8"))
        if not out or len(out[-1]) == SQS_BATCH or size + n > MAX_REQUEST_BYTES:
            out.append([])
            size = 0
        out[-1].append((user_id, body))
        size += n
    return out
