"""A tenant's people: who may sign in to its console, with which role (viewer, sender, admin).

Invited by an admin of the tenant, by the tenant's API key (signed in with it, as an admin) or by the
operator (`moonsend tenant invite`); an admin changes a role, removes a person, or signs one out
everywhere. Removal and a sign-out everywhere hold at the person's next request, since every request of a
person's session reads its membership again (chalicelib.console.sessions).

Nobody changes their own role or removes themselves: an admin who could would lock themselves out by a
slip, and another admin (or the API key) can always do it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from chalicelib.core.fields import is_email
from chalicelib.stores.people import MAX_PEOPLE
from chalicelib.stores.ports.console import PeopleRecords, Person


class PersonRefused(Exception):
    """A change to a tenant's people that cannot be made; its message says why, to whoever asked."""


@dataclass(frozen=True)
class Invited:
    person: Person
    new: bool  # False: the address was already one of the tenant's people (its role is now the one given)


def address_of(given: str) -> str:
    """An address as the people table keys it (case does not tell two mailboxes apart in practice)."""
    return given.strip().lower()


class People:
    def __init__(self, store: PeopleRecords, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    def of_tenant(self, tenant_id: str) -> list[Person]:
        return self._store.of_tenant(tenant_id)

    def memberships(self, address: str) -> list[Person]:
        """Every tenant `address` belongs to, with its role there (each read from its item)."""
        found = (self._store.get(t, address) for t in self._store.tenants_of(address))
        return [p for p in found if p is not None]

    def invite(self, tenant_id: str, address: str, role: int, by: str) -> Invited:
        """Add `address` to the tenant's people with `role` (chalicelib.api.principal.Role's value), or give it
        that role if it is one already."""
        address = address_of(address)
        if not is_email(address):
            raise PersonRefused(f"{address!r} is not an email address")
        if address == by:
            raise PersonRefused("you cannot change your own role: ask another admin of this tenant")
        was = self._store.get(tenant_id, address)
        if was is None and len(self._store.of_tenant(tenant_id)) >= MAX_PEOPLE:
            raise PersonRefused(f"a tenant has at most {MAX_PEOPLE} people: remove someone first")
        person = Person(tenant_id, address, int(role), by, self._clock())
        self._store.put(person)
        return Invited(person if was is None else dataclasses.replace(was, role=int(role)), was is None)

    def remove(self, tenant_id: str, address: str, by: str) -> bool:
        """Whether the address was one of the tenant's people; its sessions end at their next request."""
        address = address_of(address)
        if address == by:
            raise PersonRefused("you cannot remove yourself: sign out, or ask another admin of this tenant")
        if not is_email(address) or self._store.get(tenant_id, address) is None:
            return False
        self._store.remove(tenant_id, address)
        return True

    def sign_out_everywhere(self, tenant_id: str, address: str) -> bool:
        """End every session the person has now; False when there is no such person."""
        address = address_of(address)
        return is_email(address) and self._store.signed_out(tenant_id, address, self._clock())
