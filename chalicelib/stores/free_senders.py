"""Which free-plan tenant a From address belongs to.

Free-plan email goes out through the platform's SES account, where SES cannot tell tenants apart: without
this, one free tenant could send From another's address. An address belongs to the tenant an operator
assigns it to (`moonsend tenant assign-from`), or, when it has a verified identity of its own in the
platform's SES account (chalicelib.stores.platform_identities), to the first tenant that sends from it on
the free plan (claimed with a conditional write). An address covered only by a domain identity of the
platform's account (`billing@`, `security@` of the platform's own domain) is claimed by nobody: it is
refused until an operator assigns it. Another tenant's message From an address is refused with the reason.

Claims live in the tenants table under `_from:<address, lower-cased>`, an id no tenant can have (tenant
ids start with a letter or digit); each address a tenant has is also in a set on the tenant's own row
(`from_addresses`), so that its settings (`GET /tenant`) list them without a scan. Paid tenants send
through their own SES accounts, whose verified identities prove the address is theirs.

A claim is read back, never re-checked, on every message (and by the drainer before each free-plan send,
chalicelib.send.identity): a claim made under the earlier rule (any free tenant claimed any address nobody
had, `security@` of the platform's domain included) would stand for good. `unproven` lists the claims made
by a first send whose address has no verified identity of its own, and `release` drops one (`moonsend
tenant audit-from [--fix]`, docs/operations.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError
from pynamodb.expressions.operand import Path, Value
from pynamodb.models import Model

from chalicelib.core.errors import SenderRefused
from chalicelib.stores.ports.sending import Coverage, IdentityCoverage
from chalicelib.stores.tables import bound, condition_failed

KEY_PREFIX = "_from:"
_ADDRESSES = UnicodeSetAttribute()


class FreeAddressModel(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)  # `_from:<address>`: the tenants table's key
    owner = UnicodeAttribute()
    claimed_at = NumberAttribute(null=True)
    assigned_by = UnicodeAttribute(null=True)  # `operator` when assigned rather than claimed


@dataclass(frozen=True)
class AddressClaim:
    """A free-plan From address and the tenant that has it."""

    address: str  # lower-cased, as keyed
    owner: str
    claimed_at: int | None
    coverage: Coverage


def _key(address: str) -> str:
    return KEY_PREFIX + address.lower()


def unclaimable(user_id: str, coverage: Coverage) -> str:
    """Why a free tenant may not claim an address nobody has: it has no verified identity of its own."""
    fix = f"moonsend tenant assign-from --user {user_id} --address {coverage.address}"
    if coverage.domain:
        return (
            f"sender.emailAddress: {coverage.address} is covered only by the platform's domain identity "
            f"{coverage.domain_name}, not by an identity of its own, so no free tenant claims it by sending: "
            f"an operator assigns it first ({fix})"
        )
    return (
        f"sender.emailAddress: {coverage.address} is not verified in the platform's SES account (neither the "
        "address nor its domain): an operator verifies the address as an identity of its own, or its domain "
        f"and then assigns it ({fix})"
    )


class FreeAddresses:
    def __init__(self, table_name: str, region: str, identities: IdentityCoverage) -> None:
        self._model = bound(FreeAddressModel, table_name, region)
        self._identities = identities

    def owner(self, address: str) -> str | None:
        try:
            return self._model.get(_key(address), consistent_read=True).owner
        except DoesNotExist:
            return None

    def claim(self, user_id: str, address: str, now_ms: int) -> None:
        """The address is `user_id`'s (claimed now if nobody has it and it has a verified identity of its
        own); SenderRefused if it is another's, or nobody's and covered by no identity of its own.

        One consistent read per message (the claim is read, never cached: an operator's reassignment
        applies to the next message). An address nobody has costs the identity look-up (one or two SES
        reads, kept a minute per container) and, when it is claimed, one write: once claimed, a message
        costs no SES request."""
        owner = self.owner(address)
        if owner is None:
            coverage = self._identities.covering(address)
            if not coverage.own:
                raise SenderRefused(unclaimable(user_id, coverage))
            try:
                self._model(_key(address), owner=user_id, claimed_at=now_ms).save(
                    condition=self._model.user_id.does_not_exist()
                )
                self._listed(user_id, address, True)
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
        if previous is not None and previous != user_id:
            self._listed(previous, address, False)
        self._listed(user_id, address, True)
        return previous

    def _listed(self, user_id: str, address: str, has: bool) -> None:
        """The address added to (or taken off) the set on the tenant's own row."""
        path, value = Path("from_addresses"), Value({address.lower()}, attribute=_ADDRESSES)
        self._model(user_id).update(actions=[path.add(value) if has else path.delete(value)])

    def unproven(self) -> list[AddressClaim]:
        """The claims made by a first send (no operator assigned them) whose address has no verified identity
        of its own in the platform's SES account: made under the earlier rule, they prove nothing.

        A scan of the tenants table (an operator's one-off) and one or two SES reads per such claim."""
        m = self._model
        rows = m.scan(m.user_id.startswith(KEY_PREFIX) & m.assigned_by.does_not_exist())
        claims = (
            AddressClaim(address, row.owner, _int(row.claimed_at), self._identities.covering(address))
            for row in rows
            if (address := row.user_id[len(KEY_PREFIX) :])
        )
        return sorted((c for c in claims if not c.coverage.own), key=lambda c: c.address)

    def release(self, claim: AddressClaim) -> bool:
        """Drop a claim made by a first send, if it is still that tenant's and still not assigned (an
        operator's assignment meanwhile stands); the address is then claimed by nobody until assigned."""
        m = self._model
        try:
            m(_key(claim.address)).delete(condition=(m.owner == claim.owner) & m.assigned_by.does_not_exist())
        except DeleteError as exc:
            if condition_failed(exc):
                return False
            raise
        self._listed(claim.owner, claim.address, False)
        return True


def _int(value: float | None) -> int | None:
    return int(value) if value is not None else None
