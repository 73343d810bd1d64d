"""A tenant's webhook endpoints registered, listed, removed, tested and replayed (the tenant API and the CLI)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chalicelib.core.webhook_contract import parse_endpoint
from chalicelib.feedback.reports import Answer
from chalicelib.stores.webhooks import Parked, ParkedDeliveries, TooManyEndpoints, WebhookEndpoints
from chalicelib.webhooks import url_policy
from chalicelib.webhooks.delivery_queue import SQS_BATCH, DeliveryQueue
from chalicelib.webhooks.signing import new_secret
from chalicelib.webhooks.test_delivery import WebhookTester

NO_ENDPOINT = Answer(404, {"error": "no such webhook endpoint"})
TEST_INTERVAL_S = 10.0


class WebhookRegistration:
    def __init__(
        self,
        endpoints: WebhookEndpoints,
        tester: WebhookTester,
        parked: ParkedDeliveries,
        queue: DeliveryQueue,
        *,
        allow_loopback: bool,
        resolver: url_policy.Resolver = url_policy.resolve,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._endpoints = endpoints
        self._tester = tester
        self._parked = parked
        self._queue = queue
        self._allow_loopback = allow_loopback
        self._resolver = resolver
        self._clock = clock

    def add(self, user_id: str, body: Any) -> Answer:
        """201 with the endpoint and its secret (shown this once), or 400 saying what is wrong."""
        try:
            request = parse_endpoint(body)
            url_policy.check(request.url, allow_loopback=self._allow_loopback, resolver=self._resolver)
            secret = new_secret()
            endpoint = self._endpoints.add(user_id, request, secret, self._clock())
        except (ValueError, TooManyEndpoints) as exc:
            return Answer(400, {"error": str(exc)})
        return Answer(201, {**endpoint.public(), "secret": secret})

    def list(self, user_id: str) -> Answer:
        listed = []
        for e in self._endpoints.list(user_id):
            # Parked deliveries are counted for a disabled endpoint (what a replay would send).
            parked = self._parked.count(user_id, e.id) if not e.enabled else 0
            listed.append({**e.public(), "parked": parked})
        return Answer(200, {"endpoints": listed})

    def remove(self, user_id: str, endpoint_id: str) -> Answer:
        if not self._endpoints.remove(user_id, endpoint_id):
            return NO_ENDPOINT
        for parked in self._parked.parked(user_id, endpoint_id):
            self._parked.remove(user_id, parked)
        return Answer(200, {"removed": endpoint_id})

    def replay(self, user_id: str, endpoint_id: str) -> Answer:
        """Enable the endpoint again and put its parked deliveries back on the queue (each with its own
        webhook-id, so a receiver that had one already drops it)."""
        if not self._endpoints.enable(user_id, endpoint_id):
            return NO_ENDPOINT
        replayed = 0
        page: list[Parked] = []
        for row in self._parked.parked(user_id, endpoint_id):
            page.append(row)
            if len(page) == SQS_BATCH:
                replayed += self._requeue(user_id, page)
                page = []
        replayed += self._requeue(user_id, page)
        endpoint = self._endpoints.get(user_id, endpoint_id)
        return Answer(200, {**(endpoint.public() if endpoint else {"id": endpoint_id}), "replayed": replayed})

    def _requeue(self, user_id: str, rows: list[Parked]) -> int:
        # On the queue first, then off the table: a crash between leaves a copy parked, never none. A row
        # parked again meanwhile (its delivery failed again) is left for the next replay.
        self._queue.put_messages([(user_id, row.body) for row in rows])
        for row in rows:
            self._parked.remove(user_id, row)
        return len(rows)

    def test(self, user_id: str, endpoint_id: str) -> Answer:
        """One signed request now; at most one per endpoint every TEST_INTERVAL_S (429 otherwise), so that the
        API cannot be used to send a stream of requests at someone's server."""
        if self._endpoints.get(user_id, endpoint_id) is None:
            return NO_ENDPOINT
        if not self._endpoints.claim_test(user_id, endpoint_id, self._clock(), TEST_INTERVAL_S):
            return Answer(429, {"error": f"one test request per endpoint every {TEST_INTERVAL_S:g} s: try again soon"})
        result = self._tester.send(user_id, endpoint_id)
        if result is None:
            return NO_ENDPOINT
        return Answer(200, {"ok": result.ok, **result.as_dict()})
