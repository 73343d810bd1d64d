"""`moonsend webhook test` and `POST /webhooks/{id}/test`: one signed request to the endpoint, now.

The request is what every delivery is (the URL checked again, the connection made to a checked address,
the Standard Webhooks headers), with the body

    {"type": "moonsend.test", "timestamp": "2026-11-24T21:00:00.000Z", "data": {"endpoint": "ep_..."}}

so that a tenant can check its receiver verifies our signature before any event depends on it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core.contract import iso_ms
from chalicelib.stores.webhooks import WebhookEndpoints
from chalicelib.webhooks import client, url_policy
from chalicelib.webhooks.signing import signed_headers


@dataclass(frozen=True)
class TrialResult:
    message_id: str
    status: int | None
    error: str | None
    took_ms: int
    # What was sent (the Standard Webhooks headers and the body: a receiver's author compares them with what
    # their code saw) and the start of what came back; none when no request was made.
    request: dict[str, Any] | None = None
    excerpt: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def as_dict(self) -> dict[str, Any]:
        return {
            "webhookId": self.message_id,
            "status": self.status,
            "error": self.error,
            "tookMs": self.took_ms,
            "request": self.request,
            "answerExcerpt": self.excerpt if self.status is not None else None,
        }


class WebhookTester:
    def __init__(
        self,
        endpoints: WebhookEndpoints,
        *,
        allow_loopback: bool,
        clock: Callable[[], float] = time.time,
        resolver: url_policy.Resolver = url_policy.resolve,
    ) -> None:
        self._endpoints = endpoints
        self._allow_loopback = allow_loopback
        self._clock = clock
        self._resolver = resolver

    def send(self, user_id: str, endpoint_id: str) -> TrialResult | None:
        """None if the tenant has no such endpoint."""
        endpoint = self._endpoints.get(user_id, endpoint_id)
        if endpoint is None:
            return None
        message_id = f"msg_{uuid.uuid4().hex}"
        try:
            target = url_policy.check(endpoint.url, allow_loopback=self._allow_loopback, resolver=self._resolver)
        except ValueError as exc:  # the name resolves elsewhere now than when it was registered
            return TrialResult(message_id, None, str(exc), 0)
        now = self._clock()
        body = json.dumps(
            {"type": "moonsend.test", "timestamp": iso_ms(int(now * 1000)), "data": {"endpoint": endpoint.id}},
            separators=(",", ":"),
        )
        headers = signed_headers(endpoint.secret, message_id, int(now), body)
        answer = client.post(target, headers, body)
        sent = {"method": "POST", "url": endpoint.url, "headers": {**headers, "user-agent": client.USER_AGENT}}
        return TrialResult(
            message_id, answer.status, answer.error, answer.took_ms, {**sent, "body": body}, answer.excerpt
        )
