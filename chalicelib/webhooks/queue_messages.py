"""deliver_webhooks' batch: the delivery queue carries deliveries, and now and then events to keep later.

Most messages are deliveries (chalicelib.webhooks.deliverer). A message of events whose event-log write failed
in webhook_events (chalicelib.webhooks.later_events) goes to the fanout, which keeps them and makes their
deliveries; failing, it comes back after the deliveries' retry waits (the last again past them), until the
queue's dead-letter queue takes it after 20 receives, for an operator to replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.core import log
from chalicelib.webhooks.deliverer import WebhookDeliverer
from chalicelib.webhooks.delivery_queue import DeliveryQueue
from chalicelib.webhooks.later_events import LaterEvents


class QueueMessages:
    def __init__(
        self, deliverer: WebhookDeliverer, later: Callable[[LaterEvents], object], queue: DeliveryQueue
    ) -> None:
        self._deliverer = deliverer
        self._later = later
        self._queue = queue

    def batch(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Lambda's SQS batch: its deliveries attempted at once, its events kept; the answer names the
        messages to come back (ReportBatchItemFailures), each hidden until its next attempt."""
        deliveries, failures = [], []
        for record in records:
            try:
                later = LaterEvents.from_message(record["body"])
            except ValueError as exc:  # of that kind, and unreadable: nothing a retry would change
                log.error("webhook queue message dropped", reason=str(exc))
                continue
            if later is None:
                deliveries.append(record)
            elif not self._keep(later, record):
                failures.append({"itemIdentifier": record["messageId"]})
        answer = self._deliverer.batch(deliveries)
        return {"batchItemFailures": [*answer["batchItemFailures"], *failures]}

    def _keep(self, later: LaterEvents, record: dict[str, Any]) -> bool:
        attempt = int(record.get("attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            self._later(later)
            return True
        except Exception as exc:  # kept and delivered on a later receive (both are idempotent)
            log.warning("events kept later: not yet", user=later.user_id, attempt=attempt, error=type(exc).__name__)
        try:
            self._queue.retry_later(record["receiptHandle"], self._deliverer.retry_in_s(attempt))
        except Exception as exc:  # it comes back after the queue's visibility timeout instead
            log.warning("webhook retry not scheduled", error=type(exc).__name__)
        return False
