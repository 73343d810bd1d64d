"""/webhooks: the tenant's endpoints registered, listed, removed, tested and replayed
(chalicelib.control.webhook_registration)."""

from __future__ import annotations

from typing import Any

from chalice import Blueprint

from chalicelib import wiring
from chalicelib.api.edge import Call, Route, blueprint
from chalicelib.api.principal import Role


def add_webhook(call: Call) -> dict[str, Any]:
    """Register an endpoint for the tenant's events (201 with its signing secret, shown this once)."""
    return wiring.container().webhook_registration.add(call.tenant, call.body())


def list_webhooks(call: Call) -> dict[str, Any]:
    return wiring.container().webhook_registration.list(call.tenant)


def remove_webhook(call: Call, endpoint_id: str) -> dict[str, Any]:
    return wiring.container().webhook_registration.remove(call.tenant, endpoint_id)


def test_webhook(call: Call, endpoint_id: str) -> dict[str, Any]:
    """One signed test request to the endpoint, and what it answered."""
    return wiring.container().webhook_registration.test(call.tenant, endpoint_id)


def replay_webhook(call: Call, endpoint_id: str) -> dict[str, Any]:
    """Enable the endpoint again and deliver the events held while it was disabled."""
    return wiring.container().webhook_registration.replay(call.tenant, endpoint_id)


ROUTES = (
    Route("/webhooks", add_webhook, ("POST",), Role.ADMIN, status=201),
    Route("/webhooks", list_webhooks),
    Route("/webhooks/{endpoint_id}", remove_webhook, ("DELETE",), Role.ADMIN),
    Route("/webhooks/{endpoint_id}/test", test_webhook, ("POST",), Role.ADMIN),
    Route("/webhooks/{endpoint_id}/replay", replay_webhook, ("POST",), Role.ADMIN),
)


def routes() -> Blueprint:
    return blueprint(__name__, ROUTES)
