"""Who is asking: the tenant a request's credentials name, and the role it acts in.

An API key (`Authorization: Bearer msk_...`) is the tenant's own: it may do everything (admin). The console
that follows will sign people in, each a tenant's viewer, sender or admin: its session becomes a Principal
here too, so that no route and no service reads a header or a cookie.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from chalicelib.core.errors import NotFound, Refused

MISSING_KEY = "an API key is required: Authorization: Bearer <key>"


class Role(IntEnum):
    """What a caller may do, each role all the one before it may: read; pause, resume, cancel and retry;
    change webhooks, suppressions, people and keys."""

    VIEWER = 1
    SENDER = 2
    ADMIN = 3


@dataclass(frozen=True)
class Principal:
    tenant_id: str
    role: Role
    person: str | None = None  # a signed-in person's address; None for an API key


class Unauthenticated(Refused):
    """No credentials at all (a wrong key is NotFound: the same as another tenant's campaign)."""


class Forbidden(Refused):
    """Known, but the caller's role does not reach what the route needs."""


def from_authorization(authorization: str | None, authenticate: Callable[[str | None], str | None]) -> Principal:
    """The tenant a bearer key belongs to (chalicelib.feedback.reports checks it), as its admin. Another scheme
    (`Basic ...`) is no key at all: 401, as none."""
    if not authorization or authorization.partition(" ")[0].lower() != "bearer":
        raise Unauthenticated(MISSING_KEY)
    tenant = authenticate(authorization)
    if tenant is None:
        raise NotFound()
    return Principal(tenant, Role.ADMIN)


def require(principal: Principal, role: Role) -> None:
    if principal.role < role:
        raise Forbidden(f"this needs the {role.name.lower()} role; you are a {principal.role.name.lower()}")
