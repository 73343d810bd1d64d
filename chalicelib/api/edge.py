"""The seam every tenant route goes through: the caller found (chalicelib.api.principal) and its role checked,
the route's one call into the domain made with what it needs of the request, and what comes back (a body,
or a refusal) answered (chalicelib.api.answers). A route declares its path, methods and role (`Route`); it
never sees a header, a cookie or an error class.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chalice import Blueprint, Response

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.principal import Principal, Role, from_authorization, require
from chalicelib.core.errors import Invalid, Refused

# The API's bodies are JSON; `curl -d '{...}'` labels them form-encoded, and a body-less POST may say anything.
API_BODIES = ["application/json", "application/x-www-form-urlencoded", "text/plain"]


@dataclass(frozen=True)
class Call:
    """What a route is given of its request: who asks, the query, and the body (read only when asked for)."""

    principal: Principal
    query: Mapping[str, str]
    raw_body: bytes
    idempotency_key: str | None = None  # the request's Idempotency-Key header

    @property
    def tenant(self) -> str:
        return self.principal.tenant_id

    def body(self) -> dict[str, Any] | None:
        """The request's JSON object, or None (no body, or not a JSON object: the routes' fields are optional).
        JSON nested past what the parser reads is Invalid."""
        try:
            given = json.loads(self.raw_body) if self.raw_body else None
        except ValueError:
            return None
        except RecursionError:
            raise Invalid("body: nested too deeply to read") from None
        return given if isinstance(given, dict) else None

    def object_body(self) -> dict[str, Any]:
        """The request's JSON object, {} when it has no body; Invalid for a body that is not a JSON object (a
        route whose every field is optional takes no other)."""
        if not self.raw_body.strip():
            return {}
        given = self.body()
        if given is None:
            raise Invalid("body: a JSON object")
        return given


View = Callable[..., Any]


@dataclass(frozen=True)
class Route:
    """A tenant route: its path and methods, the role it needs, and `view(call, **path_params) -> body`. A GET's
    body is answered with an ETag (304 when the client has it); any other's is never cached, with `status`
    (201 for a creation, 202 for work started)."""

    path: str
    view: View
    methods: tuple[str, ...] = ("GET",)
    role: Role = Role.VIEWER
    status: int = 200


def blueprint(name: str, routes: tuple[Route, ...]) -> Blueprint:
    """A fresh blueprint of `routes`. Chalice's blueprint can be registered on one app only (registering takes
    its route's arguments out of what it keeps), and a process may build several apps (a test's, and one
    per function where every function shares a process)."""
    bp = Blueprint(name)
    for route in routes:
        _register(bp, route)
    return bp


def _register(bp: Blueprint, r: Route) -> None:
    @functools.wraps(r.view)
    def route(**path_params: str) -> Response:
        request = bp.current_request
        headers = request.headers
        try:
            principal = from_authorization(headers.get("authorization"), wiring.container().api_keys.authenticate)
            require(principal, r.role)
            raw = request.raw_body or b""
            given = raw.encode() if isinstance(raw, str) else raw
            call = Call(principal, dict(request.query_params or {}), given, headers.get("idempotency-key"))
            body = r.view(call, **path_params)
        except Refused as refused:
            return answers.refusal(refused)
        if r.methods == ("GET",):
            return answers.read(body, headers.get("if-none-match"))
        return answers.ok(body, r.status)

    writes = r.methods not in (("GET",), ("DELETE",))
    bp.route(r.path, methods=list(r.methods), **({"content_types": API_BODIES} if writes else {}))(route)
