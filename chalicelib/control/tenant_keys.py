"""Who is asking: the tenant a request's bearer key belongs to, or the answer to give instead.

Every tenant route answers 401 without a key and the same 404 for a wrong key as for another tenant's
campaign, so that a key reveals nothing about other tenants (chalicelib.feedback.reports)."""

from __future__ import annotations

from collections.abc import Callable

from chalicelib.feedback.reports import NOT_FOUND, UNAUTHORIZED, Answer


class TenantKeys:
    def __init__(self, authenticate: Callable[[str | None], str | None]) -> None:
        self._authenticate = authenticate

    def owner(self, authorization: str | None) -> str | Answer:
        if not authorization:
            return UNAUTHORIZED
        user_id = self._authenticate(authorization)
        return NOT_FOUND if user_id is None else user_id
