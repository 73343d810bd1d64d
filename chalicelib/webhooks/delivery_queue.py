"""The webhook delivery queue: deliveries put on it ten to a request, and a failed one hidden until its retry.

One queue for every tenant: a delivery is a message, and deliver_webhooks takes them in batches and makes
each batch's requests at the same time, so a slow receiver holds only its own request. Each message
carries its tenant as `MessageGroupId`, which makes the standard queue an SQS fair queue: a tenant with a
backlog (a campaign's worth of events for an endpoint that is down) is served after the others' few,
rather than before them. A delivery that
failed is not deleted; it is made invisible for the wait before its next attempt (SQS allows up to 12 h),
and comes back as the same message, with the same `webhook-id`, and a receive count that is its attempt.

Every message is made safe for SQS on its way (`sqs_safe`), a held one made before that included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chalicelib.core.errors import DeliveryNotQueued
from chalicelib.webhooks.deliveries import WebhookRequest, sqs_safe

SQS_BATCH = 10
# What one SendMessageBatch carries at most, its messages' bodies together, in UTF-8 bytes (SQS's limit,
# 1 MiB, for a message and for a batch; a larger batch is refused whole with BatchRequestTooLong).
MAX_REQUEST_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Unqueued:
    """A message SQS did not take."""

    index: int  # its place among the messages given
    code: str  # SQS's code for it, or the name of the exception its request raised
    permanent: bool  # SQS said the message itself is at fault (SenderFault): sent again, it is refused again


class DeliveryQueue:
    def __init__(self, sqs: Any, queue_name: str) -> None:
        self._sqs = sqs
        self._name = queue_name
        self._url: str | None = None

    def url(self) -> str:
        if self._url is None:
            self._url = str(self._sqs.get_queue_url(QueueName=self._name)["QueueUrl"])
        return self._url

    def put(self, deliveries: list[WebhookRequest]) -> list[Unqueued]:
        """Each delivery on the queue; those SQS did not take, by their place in `deliveries`."""
        return self.put_each([(d.user_id, d.to_message()) for d in deliveries])

    def put_messages(self, messages: list[tuple[str, str]]) -> None:
        """Every (tenant, body) on the queue, or DeliveryNotQueued naming what SQS refused (what it took stays
        taken: a delivery put twice carries one webhook-id, which the receiver drops the second time)."""
        unqueued = self.put_each(messages)
        if unqueued:
            codes = sorted({u.code for u in unqueued})
            raise DeliveryNotQueued(f"SQS refused {len(unqueued)} webhook deliveries: {', '.join(codes)}")

    def put_each(self, messages: list[tuple[str, str]]) -> list[Unqueued]:
        """Every (tenant, body) on the queue, ten to a request; those SQS did not take, by their place. Once a
        request raises (the queue unreachable, after the SDK's retries), the rest are not tried."""
        unqueued: list[Unqueued] = []
        offset = 0
        down: str | None = None
        for batch in _requests([(user, sqs_safe(body)) for user, body in messages]):
            if down is None:
                try:
                    unqueued += self._send(batch, offset)
                except Exception as exc:  # the caller decides what becomes of them
                    down = type(exc).__name__
            if down is not None:
                unqueued += [Unqueued(offset + n, down, False) for n in range(len(batch))]
            offset += len(batch)
        return unqueued

    def _send(self, batch: list[tuple[str, str]], offset: int) -> list[Unqueued]:
        entries = [{"Id": str(n), "MessageBody": body, "MessageGroupId": user} for n, (user, body) in enumerate(batch)]
        answer = self._sqs.send_message_batch(QueueUrl=self.url(), Entries=entries)
        return [
            Unqueued(offset + int(f["Id"]), str(f.get("Code")), bool(f.get("SenderFault")))
            for f in answer.get("Failed") or []
        ]

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
        n = len(body) if body.isascii() else len(body.encode("utf-8"))
        if not out or len(out[-1]) == SQS_BATCH or size + n > MAX_REQUEST_BYTES:
            out.append([])
            size = 0
        out[-1].append((user_id, body))
        size += n
    return out
