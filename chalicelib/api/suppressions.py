"""/suppressions: the tenant's own suppression list (chalicelib.control.suppression_api)."""

from __future__ import annotations

from typing import Any

from chalice import Blueprint

from chalicelib import wiring
from chalicelib.api.edge import Call, Route, blueprint
from chalicelib.api.principal import Role


def list_suppressions(call: Call) -> dict[str, Any]:
    """The tenant's suppression list (`?reason=&prefix=&limit=&after=`)."""
    return wiring.container().suppression_api.list_for(call.tenant, call.query)


def add_suppressions(call: Call) -> dict[str, Any]:
    """Put addresses on the tenant's list (`{"addresses": [...], "reason": "..."}`): never sent to again."""
    return wiring.container().suppression_api.add_for(call.tenant, call.body())


def remove_suppression(call: Call, address: str) -> dict[str, Any]:
    """Lift one of the tenant's own entries; a complaint, an unsubscribe or a bounce stays (409 says why)."""
    return wiring.container().suppression_api.remove_for(call.tenant, address)


ROUTES = (
    Route("/suppressions", list_suppressions),
    Route("/suppressions", add_suppressions, ("POST",), Role.ADMIN),
    Route("/suppressions/{address}", remove_suppression, ("DELETE",), Role.ADMIN),
)


def routes() -> Blueprint:
    return blueprint(__name__, ROUTES)
