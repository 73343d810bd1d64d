"""GET, POST /suppressions and DELETE /suppressions/{address}: the tenant's own suppression list.

The list is the tenant's partition of the suppressions table (chalicelib.stores.suppression): its
complaints, unsubscribes and own (`manual`) entries, and the platform's bounces of addresses it met. A
tenant adds addresses (`manual`) and lifts only those: a complaint, an unsubscribe or a bounce stays, and
the answer says why. Every address given is checked before anything is written: one bad address is a 400
naming it, and nothing is added.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.control import params
from chalicelib.control.params import BadParam
from chalicelib.control.tenant_api import BodyReader, UnreadableBody
from chalicelib.control.tenant_keys import TenantKeys
from chalicelib.core.contract import MAX_ADDRESS_LENGTH, iso_ms
from chalicelib.core.fields import is_email
from chalicelib.feedback.reports import Answer
from chalicelib.stores.ports import SuppressionList
from chalicelib.stores.suppression import KEPT_BECAUSE, MANUAL, REASONS, Suppression

MAX_ADD = 1000
MAX_PAGE = 1000
MAX_REASON = 200
DEFAULT_REASON = "added by the tenant"
_INVALID_SHOWN = 100
NOT_LISTED = Answer(404, {"error": "the address is not on this tenant's suppression list"})


class SuppressionApi:
    def __init__(self, keys: TenantKeys, suppressions: SuppressionList) -> None:
        self._keys = keys
        self._suppressions = suppressions

    def list(self, authorization: str | None, query: Mapping[str, str] | None) -> Answer:
        user = self._keys.owner(authorization)
        return user if isinstance(user, Answer) else self.list_for(user, query)

    def list_for(self, user: str, query: Mapping[str, str] | None) -> Answer:
        """The list for a tenant already known (the route after its key check, and the operator's CLI)."""
        try:
            reason = params.choice(query, "reason", REASONS)
            prefix = params.text(query, "prefix", max_chars=MAX_ADDRESS_LENGTH)
            limit = params.limit(query, default=100, most=MAX_PAGE)
            after = params.decode_cursor(query)
            if after is not None and (len(after) > MAX_ADDRESS_LENGTH or not after.isprintable()):
                raise params.bad_cursor()
            # DynamoDB refuses a start key outside the query's key condition (a ValidationException: a 500).
            if after is not None and prefix is not None and not after.lower().startswith(prefix.lower()):
                raise params.bad_cursor()
        except BadParam as exc:
            return exc.answer()
        entries, more = self._suppressions.page(user, reason=reason, prefix=prefix, after=after, limit=limit)
        return Answer(
            200,
            {"suppressions": [_shown(e) for e in entries], "next": params.encode_cursor(more) if more else None},
        )

    def add(self, authorization: str | None, body: BodyReader) -> Answer:
        user = self._keys.owner(authorization)
        return user if isinstance(user, Answer) else self.add_for(user, body)

    def add_for(self, user: str, body: BodyReader) -> Answer:
        """`body` is read only here: an anonymous request's body is never parsed."""
        try:
            given = body()
        except UnreadableBody as exc:
            return Answer(400, {"error": f"body: {exc}"})
        addresses = (given or {}).get("addresses")
        if not isinstance(addresses, list) or not 1 <= len(addresses) <= MAX_ADD:
            return Answer(400, {"error": f"addresses: a list of 1 to {MAX_ADD} email addresses"})
        reason = (given or {}).get("reason", DEFAULT_REASON)
        if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON or not reason.isprintable():
            return Answer(400, {"error": f"reason: printable text of 1 to {MAX_REASON} characters"})
        invalid = [
            {"index": i, "address": _quoted(a), "why": _why_invalid(a)}
            for i, a in enumerate(addresses)
            if not _valid(a)
        ]
        if invalid:
            shown = invalid[:_INVALID_SHOWN]
            detail = f"{len(invalid)} of the addresses are not valid email addresses: nothing was added"
            return Answer(400, {"error": detail, "invalid": shown})
        added, already = self._suppressions.add_many(user, [str(a) for a in addresses], reason)
        return Answer(200, {"added": added, "alreadySuppressed": already})

    def remove(self, authorization: str | None, address: str) -> Answer:
        user = self._keys.owner(authorization)
        return user if isinstance(user, Answer) else self.remove_for(user, address)

    def remove_for(self, user: str, address: str) -> Answer:
        if not _valid(address):
            return NOT_LISTED  # nothing that is not an address is on anyone's list
        entry = self._suppressions.entry(user, address)
        if entry is None:
            return NOT_LISTED
        if entry.reason == MANUAL:
            if not self._suppressions.lift(user, address):
                return NOT_LISTED
            # Lifted, but an address that bounced for every tenant is still not sent to: said, not hidden.
            still = self._suppressions.check(user, [address]).get(address.lower())
            return Answer(200, {"email": entry.email, "lifted": True, **({"stillSuppressed": still} if still else {})})
        kept = KEPT_BECAUSE.get(entry.reason, "it was not added by the tenant")
        return Answer(
            409,
            {
                "error": f"{entry.email} stays suppressed: {kept}",
                "reason": entry.reason,
                "scope": "platform" if entry.platform_wide else "tenant",
            },
        )


def _shown(e: Suppression) -> dict[str, Any]:
    return {
        "email": e.email,
        "reason": e.reason,
        "scope": "platform" if e.platform_wide else "tenant",
        "detail": e.detail,
        "createdAt": iso_ms(e.at_ms) if e.at_ms else None,
    }


def _valid(address: object) -> bool:
    return is_email(address) and str(address).isprintable()


def _why_invalid(address: object) -> str:
    if not isinstance(address, str):
        return "not a string"
    if len(address) > MAX_ADDRESS_LENGTH:
        return f"longer than {MAX_ADDRESS_LENGTH} characters"
    if not address.isprintable():
        return "holds control characters"
    return "not an email address"


def _quoted(address: object) -> str:
    """The address as the answer shows it: cut to the longest an address may be (plus a mark), as text."""
    text = address if isinstance(address, str) else repr(address)
    return text if len(text) <= MAX_ADDRESS_LENGTH else text[:MAX_ADDRESS_LENGTH] + "…"
