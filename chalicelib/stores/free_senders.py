"""Which free-plan tenant a From address belongs to.

Free-plan email goes out through the platform's SES account, where SES cannot tell tenants apart: without
this, one free tenant could send From another's address. An address belongs to the first tenant that
sends from it on the free plan (claimed with a conditional write), or to the tenant an operator assigns
it to (`moonsend tenant assign-from`); another tenant's message From it is refused with the reason.

Claims live in the tenants table under `_from:<address, lower-cased>`, an id no tenant can have (tenant
ids start with a letter or digit). Paid tenants send through their own SES accounts, whose verified
identities prove the address is theirs.
"""

from __future__ import annotations

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, PutError
from pynamodb.models import Model

from chalicelib.core.errors import SenderRefused
from chalicelib.stores.tables import bound, condition_failed

KEY_PREFIX = "_from:"


class FreeAddressModel(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)  # `_from:<address>`: the tenants table's key
    owner = UnicodeAttribute()
    claimed_at = NumberAttribute(null=True)
    assigned_by = UnicodeAttribute(null=True)  # `operator` when assigned rather than claimed


def _key(address: str) -> str:
    return KEY_PREFIX + address.lower()


class FreeAddresses:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(FreeAddressModel, table_name, region)

    def owner(self, address: str) -> str | None:
        try:
            return self._model.get(_key(address), consistent_read=True).owner
        except DoesNotExist:
            return None

    def claim(self, user_id: str, address: str, now_ms: int) -> None:
        """The address is `user_id`'s (claimed now if nobody has it); SenderRefused if it is another's.

        One consistent read per message (the claim is read, never cached: an operator's reassignment
        applies to the next message), and one write the first time."""
        owner = self.owner(address)
        if owner is None:
            try:
                self._model(_key(address), owner=user_id, claimed_at=now_ms).save(
                    condition=self._model.user_id.does_not_exist()
                )
                return
            except PutError as exc:
                if not condition_failed(exc):
                    raise
            owner = self.owner(address)
        if owner != user_id:
            raise SenderRefused(
                f"sender.emailAddress: {address} is the From address of another tenant on the free plan "
                "(an operator can assign it: moonsend tenant assign-from)"
            )

    def assign(self, user_id: str, address: str, now_ms: int) -> str | None:
        """Give the address to `user_id` whoever had it (an operator's decision); the previous owner."""
        previous = self.owner(address)
        self._model(_key(address), owner=user_id, claimed_at=now_ms, assigned_by="operator").save()
        return previous
