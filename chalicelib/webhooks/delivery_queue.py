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
        for i in range(0, len(messages), SQS_BATCH):
            entries = [
                {"Id": str(n), "MessageBody": body, "MessageGroupId": user_id}
                for n, (user_id, body) in enumerate(messages[i : i + SQS_BATCH])
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
