"""A tenant's people who sign in to the console, each with a role (chalicelib.console.people keeps the rules).

One item per tenant and address. The index by address answers which tenants an address belongs to (an
agency's address belongs to several): keys only, as every index here (chalicelib.core.resources.IndexDef),
so a role is read from the item itself, consistently, when it matters.
"""

from __future__ import annotations

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from chalicelib.core.resources import PEOPLE_BY_ADDRESS
from chalicelib.stores.ports.console import Person
from chalicelib.stores.tables import bound, condition_failed

# The most people one tenant lists (a page of the console); more are refused at invitation.
MAX_PEOPLE = 200
# The most tenants one address is read for at sign-in: an agency's few dozen clients, not thousands.
MAX_TENANTS_PER_ADDRESS = 100


class _ByAddress(GlobalSecondaryIndex["PersonModel"]):
    class Meta:
        index_name = PEOPLE_BY_ADDRESS
        projection = KeysOnlyProjection()

    address = UnicodeAttribute(hash_key=True)
    user_id = UnicodeAttribute(range_key=True)


class PersonModel(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)  # the tenant
    address = UnicodeAttribute(range_key=True)  # lower case
    role = NumberAttribute()  # chalicelib.api.principal.Role's value
    invited_by = UnicodeAttribute()  # an admin's address, `api-key`, or `operator`
    invited_at = NumberAttribute()  # epoch seconds
    # Sessions started before this (epoch seconds) are over: an admin signed the person out everywhere.
    signed_out_at = NumberAttribute(null=True)
    by_address = _ByAddress()


class PeopleStore:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(PersonModel, table_name, region)

    def get(self, tenant_id: str, address: str) -> Person | None:
        try:
            # Consistent: a person removed or demoted a moment ago has lost their rights already.
            return _person(self._model.get(tenant_id, address, consistent_read=True))
        except DoesNotExist:
            return None

    def of_tenant(self, tenant_id: str) -> list[Person]:
        """The tenant's people by address, at most MAX_PEOPLE."""
        return [_person(row) for row in self._model.query(tenant_id, limit=MAX_PEOPLE, consistent_read=True)]

    def tenants_of(self, address: str) -> list[str]:
        """The tenants `address` belongs to, by id (the index lags a write by a moment)."""
        rows = self._model.by_address.query(address, limit=MAX_TENANTS_PER_ADDRESS)
        return [str(row.user_id) for row in rows]

    def put(self, p: Person) -> None:
        """Add a person, or change an existing one's role (the first invitation is kept)."""
        m = self._model
        m(p.tenant_id, p.address).update(
            actions=[
                m.role.set(p.role),
                m.invited_by.set(m.invited_by | p.invited_by),
                m.invited_at.set(m.invited_at | p.invited_at),
            ]
        )

    def signed_out(self, tenant_id: str, address: str, at: float) -> bool:
        """Every session of the person started before `at` ends; False when there is no such person."""
        m = self._model
        try:
            m(tenant_id, address).update(actions=[m.signed_out_at.set(at)], condition=m.address.exists())
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def remove(self, tenant_id: str, address: str) -> None:
        self._model(tenant_id, address).delete()


def _person(row: PersonModel) -> Person:
    out = row.signed_out_at
    return Person(
        str(row.user_id),
        str(row.address),
        int(row.role),
        str(row.invited_by),
        float(row.invited_at),
        float(out) if out is not None else None,
    )
