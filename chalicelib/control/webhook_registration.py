"""A tenant's webhook endpoints registered, listed, removed and tested (the tenant API and the CLI)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chalicelib.core.webhook_contract import parse_endpoint
from chalicelib.feedback.reports import Answer
from chalicelib.stores.webhooks import TooManyEndpoints, WebhookEndpoints
from chalicelib.webhooks import url_policy
from chalicelib.webhooks.signing import new_secret
from chalicelib.webhooks.test_delivery import WebhookTester

NO_ENDPOINT = Answer(404, {"error": "no such webhook endpoint"})


class WebhookRegistration:
    def __init__(
        self,
        endpoints: WebhookEndpoints,
        tester: WebhookTester,
        *,
        allow_loopback: bool,
        resolver: url_policy.Resolver = url_policy.resolve,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._endpoints = endpoints
        self._tester = tester
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
        return Answer(200, {"endpoints": [e.public() for e in self._endpoints.list(user_id)]})

    def remove(self, user_id: str, endpoint_id: str) -> Answer:
        if not self._endpoints.remove(user_id, endpoint_id):
            return NO_ENDPOINT
        return Answer(200, {"removed": endpoint_id})

    def test(self, user_id: str, endpoint_id: str) -> Answer:
        result = self._tester.send(user_id, endpoint_id)
        if result is None:
            return NO_ENDPOINT
        return Answer(200, {"ok": result.ok, **result.as_dict()})
