"""/tenant and /events: the tenant's settings and standing, its own pause, and its recorded events."""

from __future__ import annotations

from typing import Any

from chalice import Blueprint

from chalicelib import wiring
from chalicelib.api.edge import Call, Route, blueprint
from chalicelib.api.principal import Role
from chalicelib.core.errors import NotFound


def show_tenant(call: Call) -> dict[str, Any]:
    """The tenant's settings and standing: plan, rate, From addresses, pauses, SES status, daily cap."""
    return wiring.container().tenant_view.get_for(call.tenant)


def tenant_action(call: Call, action: str) -> dict[str, Any]:
    """`/tenant/pause` keeps all of the tenant's email from going out; `/tenant/resume` lifts a pause of its own."""
    api = wiring.container().tenant_api
    if action == "pause":
        return api.pause_tenant(call.tenant, call.body())
    if action == "resume":
        return api.resume_tenant(call.tenant)
    raise NotFound()


def list_events(call: Call) -> dict[str, Any]:
    """The tenant's recorded events, as its webhooks carry them, oldest first (`?after=&since=&type=&campaign=`)."""
    return wiring.container().event_reads.list_for(call.tenant, call.query)


ROUTES = (
    Route("/tenant", show_tenant),
    Route("/tenant/{action}", tenant_action, ("POST",), Role.SENDER),
    Route("/events", list_events),
)


def routes() -> Blueprint:
    return blueprint(__name__, ROUTES)
