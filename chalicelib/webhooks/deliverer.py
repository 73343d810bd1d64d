"""deliver_webhooks: one attempt of each delivery in a batch, at the same time, and what becomes of it.

- The receiver answered 2xx: delivered, the message is deleted.
- It answered 410 Gone: the endpoint is disabled (the tenant said so), the delivery held for replay.
- Anything else (another status, no answer, an address the URL policy now refuses): tried again after
  the schedule's next wait (`Settings.webhook_retry_s`: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h); a
  delivery that failed every attempt (27 h 35 min) disables its endpoint with the last failure as the
  reason, and is held.
- For an endpoint disabled already, the delivery is held without a request; for one removed, dropped.
- **An endpoint that leaves a request unanswered** (no answer within the client's 10 s read or 15 s in all)
  is quiet for QUIET_S: its deliveries meanwhile make no request, and count as a failed attempt retried
  after the wait (at least the quiet time left). Then one request goes first, alone (`claim_probe`): an
  answer of any status ends the quiet, silence renews it. A tenant whose receivers all hang would otherwise
  hold a delivery's 15 s of deliver_webhooks' time (20 at once, every tenant's) for each of its requests,
  at every retry; quiet, it holds one request per endpoint per QUIET_S.

The attempt is the message's receive count: SQS counts it, so a crash between the answer and its record
costs a retry, never a lost delivery.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from chalicelib.core import log
from chalicelib.stores.webhooks import Endpoint, HeldRequests, WebhookEndpoints
from chalicelib.webhooks import client, url_policy
from chalicelib.webhooks.deliveries import WebhookRequest
from chalicelib.webhooks.delivery_queue import DeliveryQueue
from chalicelib.webhooks.signing import signed_headers

DELIVERED, RETRY, DISABLED, HELD, DROPPED = "delivered", "retry", "disabled", "parked", "dropped"
# How long an endpoint that left a request unanswered is given before one request tries it again.
QUIET_S = 60
UNANSWERED = "TimeoutError"  # the client's error for a request that had no answer in time

Post = Callable[[url_policy.Target, dict[str, str], str], client.Answer]


@dataclass(frozen=True)
class RequestOutcome:
    what: str  # one of the words above
    retry_in_s: int | None = None


class WebhookDeliverer:
    def __init__(
        self,
        endpoints: WebhookEndpoints,
        held: HeldRequests,
        queue: DeliveryQueue,
        retry_s: tuple[int, ...],
        addresses: url_policy.AddressPolicy,
        *,
        post: Post = client.post,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._endpoints = endpoints
        self._held = held
        self._queue = queue
        self._retry_s = retry_s
        self._addresses = addresses
        self._post = post
        self._clock = clock

    def batch(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Lambda's SQS batch: every delivery attempted at once; the answer names those to come back
        (ReportBatchItemFailures), each already hidden until its next attempt."""
        if not records:
            return {"batchItemFailures": []}
        with ThreadPoolExecutor(max_workers=len(records)) as pool:
            outcomes = list(pool.map(self._record, records))
        failures = []
        for record, outcome in zip(records, outcomes, strict=True):
            if outcome.what != RETRY:
                continue
            try:
                self._queue.retry_later(record["receiptHandle"], outcome.retry_in_s or 0)
            except Exception as exc:  # it comes back after the queue's visibility timeout instead
                log.warning("webhook retry not scheduled", error=type(exc).__name__)
            failures.append({"itemIdentifier": record["messageId"]})
        return {"batchItemFailures": failures}

    def _record(self, record: dict[str, Any]) -> RequestOutcome:
        attempt = int(record.get("attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            return self.attempt(record["body"], attempt)
        except Exception as exc:  # a table that failed: try again after the retry waits
            log.warning("webhook delivery raised", error=type(exc).__name__, attempt=attempt)
            if attempt > len(self._retry_s):  # past the retry waits however it failed: kept for replay
                try:
                    self._hold(WebhookRequest.from_message(record["body"]), record["body"])
                    return RequestOutcome(HELD)
                except Exception as again:  # left to the queue's dead-letter queue (20 receives)
                    log.error("webhook delivery not parked", error=type(again).__name__)
            return self._retry(attempt)

    def attempt(self, message: str, attempt: int) -> RequestOutcome:
        try:
            delivery = WebhookRequest.from_message(message)
        except ValueError as exc:
            log.error("webhook delivery dropped", reason=str(exc))
            return RequestOutcome(DROPPED)
        endpoint = self._endpoints.get(delivery.user_id, delivery.endpoint_id)
        if endpoint is None:
            log.info("webhook delivery dropped: endpoint removed", user=delivery.user_id, endpoint=delivery.endpoint_id)
            return RequestOutcome(DROPPED)
        if not endpoint.enabled:
            self._hold(delivery, message)
            return RequestOutcome(HELD)
        if endpoint.quiet_until is not None and not self._may_try(endpoint):
            return self._quiet(delivery, message, attempt, endpoint.quiet_until)
        status, error = self._send(endpoint, delivery)
        self._note_answer(endpoint, status, error)
        if status is not None and 200 <= status < 300:
            return RequestOutcome(DELIVERED)
        if status == 410:
            return self._disable(delivery, message, "the endpoint answered 410 Gone")
        failure = f"HTTP {status}" if status is not None else str(error)
        log.info(
            "webhook delivery failed",
            user=delivery.user_id,
            endpoint=delivery.endpoint_id,
            webhook=delivery.webhook_id,
            attempt=attempt,
            failure=failure,
        )
        if attempt > len(self._retry_s):
            return self._disable(delivery, message, f"{attempt} attempts of a delivery failed; the last: {failure}")
        return self._retry(attempt)

    def _send(self, endpoint: Endpoint, delivery: WebhookRequest) -> tuple[int | None, str | None]:
        try:
            target = self._addresses.check(endpoint.url)
        except ValueError as exc:  # the name resolves elsewhere now than when it was registered
            return None, str(exc)
        headers = signed_headers(endpoint.secret, delivery.webhook_id, int(self._clock()), delivery.payload)
        answer = self._post(target, headers, delivery.payload)
        return answer.status, answer.error

    def _may_try(self, endpoint: Endpoint) -> bool:
        """A quiet endpoint: whether this request is the one that goes first once the quiet is over."""
        now = self._clock()
        if endpoint.quiet_until is not None and now < endpoint.quiet_until:
            return False
        return self._endpoints.claim_probe(endpoint.user_id, endpoint.id, now, now + QUIET_S)

    def _note_answer(self, endpoint: Endpoint, status: int | None, error: str | None) -> None:
        """Quieten an endpoint that left this request unanswered; end the quiet of one that answered."""
        try:
            if status is None and error == UNANSWERED:
                self._endpoints.quieten(endpoint.user_id, endpoint.id, self._clock() + QUIET_S)
            elif status is not None and endpoint.quiet_until is not None:
                self._endpoints.answered(endpoint.user_id, endpoint.id)
        except Exception as exc:  # the delivery's outcome stands; the quiet is a saving, not a promise
            log.warning("webhook endpoint's quiet not written", endpoint=endpoint.id, error=type(exc).__name__)

    def _quiet(self, delivery: WebhookRequest, message: str, attempt: int, until: float) -> RequestOutcome:
        """No request to a quiet endpoint: a failed attempt, tried again once the quiet is over."""
        failure = f"not attempted: the endpoint left a request unanswered, and is given until {int(until)} (epoch s)"
        log.info("webhook delivery waits", user=delivery.user_id, endpoint=delivery.endpoint_id, attempt=attempt)
        if attempt > len(self._retry_s):
            return self._disable(delivery, message, f"{attempt} attempts of a delivery failed; the last: {failure}")
        outcome = self._retry(attempt)
        left = max(0, int(until - self._clock()) + 1)
        return RequestOutcome(RETRY, max(outcome.retry_in_s or 0, left))

    def retry_in_s(self, attempt: int) -> int:
        """The wait before the next attempt of a message that failed its `attempt`th."""
        return self._retry(attempt).retry_in_s or 0

    def _retry(self, attempt: int) -> RequestOutcome:
        waits = self._retry_s
        return RequestOutcome(RETRY, waits[min(attempt, len(waits)) - 1] if waits else 0)

    def _disable(self, delivery: WebhookRequest, message: str, reason: str) -> RequestOutcome:
        if self._endpoints.disable(delivery.user_id, delivery.endpoint_id, reason, self._clock()):
            user, endpoint = delivery.user_id, delivery.endpoint_id
            log.warning("webhook endpoint disabled", user=user, endpoint=endpoint, reason=reason)
        self._hold(delivery, message)
        return RequestOutcome(DISABLED)

    def _hold(self, delivery: WebhookRequest, message: str) -> None:
        self._held.hold(delivery.user_id, delivery.endpoint_id, delivery.webhook_id, message, self._clock())
