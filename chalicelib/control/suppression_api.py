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
from chalicelib.core.contract import MAX_ADDRESS_LENGTH, iso_ms
from chalicelib.core.errors import Conflict, Invalid, NotFound
from chalicelib.core.fields import is_email
from chalicelib.stores.ports.suppression import KEPT_BECAUSE, MANUAL, REASONS, Suppression, SuppressionList

MAX_ADD = 1000
MAX_PAGE = 1000
MAX_REASON = 200
DEFAULT_REASON = "added by the tenant"
_INVALID_SHOWN = 100
NOT_LISTED = "the address is not on this tenant's suppression list"


class SuppressionApi:
    def __init__(self, suppressions: SuppressionList) -> None:
        self._suppressions = suppressions

    def list_for(self, user: str, query: Mapping[str, str] | None) -> dict[str, Any]:
        """A page of the tenant's list (the API's route and the operator's CLI)."""
        reason = params.choice(query, "reason", REASONS)
        prefix = params.text(query, "prefix", max_chars=MAX_ADDRESS_LENGTH)
        limit = params.limit(query, default=100, most=MAX_PAGE)
        after = params.decode_cursor(query)
        if after is not None and (len(after) > MAX_ADDRESS_LENGTH or not after.isprintable()):
            raise params.bad_cursor()
        # DynamoDB refuses a start key outside the query's key condition (a ValidationException: a 500).
        if after is not None and prefix is not None and not after.lower().startswith(prefix.lower()):
            raise params.bad_cursor()
        entries, more = self._suppressions.page(user, reason=reason, prefix=prefix, after=after, limit=limit)
        return {"suppressions": [_shown(e) for e in entries], "next": params.encode_cursor(more) if more else None}

    def add_for(self, user: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """Add the addresses given (`{"addresses": [...], "reason": "..."}`), all or none."""
        addresses = (given or {}).get("addresses")
        if not isinstance(addresses, list) or not 1 <= len(addresses) <= MAX_ADD:
            raise Invalid(f"addresses: a list of 1 to {MAX_ADD} email addresses")
        reason = (given or {}).get("reason", DEFAULT_REASON)
        if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON or not reason.isprintable():
            raise Invalid(f"reason: printable text of 1 to {MAX_REASON} characters")
        invalid = [
            {"index": i, "address": _quoted(a), "why": _why_invalid(a)}
            for i, a in enumerate(addresses)
            if not _valid(a)
        ]
        if invalid:
            shown = invalid[:_INVALID_SHOWN]
            detail = f"{len(invalid)} of the addresses are not valid email addresses: nothing was added"
            raise Invalid(detail, invalid=shown)
        added, already = self._suppressions.add_many(user, [str(a) for a in addresses], reason)
        return {"added": added, "alreadySuppressed": already}

    def remove_for(self, user: str, address: str) -> dict[str, Any]:
        """Lift one of the tenant's own entries; Conflict (saying why) for one it did not add."""
        if not _valid(address):
            raise NotFound(NOT_LISTED)  # nothing that is not an address is on anyone's list
        entry = self._suppressions.entry(user, address)
        if entry is None:
            raise NotFound(NOT_LISTED)
        if entry.reason == MANUAL:
            if not self._suppressions.lift(user, address):
                raise NotFound(NOT_LISTED)
            # Lifted, but an address that bounced for every tenant is still not sent to: said, not hidden.
            still = self._suppressions.check(user, [address]).get(address.lower())
            return {"email": entry.email, "lifted": True, **({"stillSuppressed": still} if still else {})}
        kept = KEPT_BECAUSE.get(entry.reason, "it was not added by the tenant")
        raise Conflict(
            f"{entry.email} stays suppressed: {kept}",
            reason=entry.reason,
            scope="platform" if entry.platform_wide else "tenant",
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
