"""/digests: the tenant's digests, a digest's status, and a run of it now (chalicelib.control.tenant_api)."""

from __future__ import annotations

from typing import Any

from chalice import Blueprint

from chalicelib import wiring
from chalicelib.api.edge import Call, Route, blueprint
from chalicelib.api.principal import Role


def list_digests(call: Call) -> dict[str, Any]:
    """The tenant's digests (`?limit=&after=`), each with its schedule, last and next run."""
    return wiring.container().tenant_api.digests(call.tenant, call.query)


def digest_status(call: Call, digest_id: str) -> dict[str, Any]:
    """The digest's schedule, last and next run, and the recipients and items the next run would mail."""
    return wiring.container().tenant_api.digest_status(call.tenant, digest_id)


def run_digest_now(call: Call, digest_id: str) -> dict[str, Any]:
    """Run the digest now (asynchronously: 202), for the current minute's period."""
    return wiring.container().tenant_api.run_digest(call.tenant, digest_id)


ROUTES = (
    Route("/digests", list_digests),
    Route("/digests/{digest_id}", digest_status),
    Route("/digests/{digest_id}/run", run_digest_now, ("POST",), Role.SENDER, status=202),
)


def routes() -> Blueprint:
    return blueprint(__name__, ROUTES)
