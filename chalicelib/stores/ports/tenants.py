"""The tenant registry's ports (chalicelib.stores.tenants, api_keys): a tenant, its keys and pauses; its API
keys; the sealing of its secrets; and the values they speak of."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from chalicelib.core.contract import Sender
from chalicelib.stores.pauses import Pause, summary


@dataclass(frozen=True)
class KeyVersion:
    """One registered pair of SES keys and the AWS account STS said they belong to.

    The secret is `sealed` (KMS's ciphertext, bound to the tenant), or `plain` in a row written before
    secrets were encrypted, until its next write seals it."""

    version: int
    api_key: str
    sealed: str | None
    account: str | None
    plain: str | None = None

    def __repr__(self) -> str:  # the secret never reaches a log line through repr()
        return f"KeyVersion(version={self.version}, account={self.account!r}, ...)"

    def as_dict(self) -> dict[str, object]:
        """As stored: never the secret in the clear (a version is sealed before it is written)."""
        assert self.sealed is not None, "a key version is sealed before it is written"
        return {"version": self.version, "apiKey": self.api_key, "sealedSecret": self.sealed, "account": self.account}


@dataclass(frozen=True)
class Tenant:
    user_id: str
    plan: str
    sender: Sender  # the latest registered settings, with the current key id (no secret)
    keys: tuple[KeyVersion, ...] = ()
    pauses: tuple[Pause, ...] = ()  # each owner's standing pause (chalicelib.stores.pauses)
    from_addresses: tuple[str, ...] = ()  # the free-plan From addresses it has (claimed or assigned)

    @property
    def paused_reason(self) -> str | None:
        """Why its email is held (every owner's reason), or None when no pause stands."""
        return summary(self.pauses)

    @property
    def current_keys(self) -> KeyVersion | None:
        return self.keys[-1] if self.keys else None

    @property
    def ses_account_id(self) -> str | None:
        """The AWS account of the tenant's current keys."""
        current = self.current_keys
        return current.account if current else None

    @property
    def accounts(self) -> frozenset[str]:
        """Every account the tenant's registered keys belong to: its SES events are trusted from these."""
        return frozenset(k.account for k in self.keys if k.account)

    def sending_keys(self, version: int | None) -> KeyVersion | None:
        """The keys to send an email queued with key version `version` (None: queued before versions).

        The newest keys of the same AWS account: a rotation within the account applies to email already
        queued (the old keys may be deactivated by now), a move to another account does not."""
        if version is None:
            return self.current_keys
        named = next((k for k in self.keys if k.version == version), None)
        if named is None:
            return None
        same = [k for k in self.keys if k.account == named.account] if named.account else [named]
        return same[-1]


# The AWS account a Sender's keys belong to (STS GetCallerIdentity with those keys).
AccountOf = Callable[[Sender], str]


@dataclass(frozen=True)
class StoredKey:
    user_id: str
    digest: str
    key_id: str
    shown: str
    label: str | None
    created_at: float
    created_by: str


class TenantRecords(Protocol):
    """The tenant registry (chalicelib.stores.tenants.TenantRegistry) as every stage uses it: a tenant's settings
    and keys (cached unless `fresh`), the secret of one of its key versions, decrypted (the sending
    identity), a message's sender registered (precompile, the digests' intake), and its pauses: why its email
    is held now (the drainer, before each send: at most a second old), held by one owner's pause
    (chalicelib.stores.pauses: False if that owner holds it already or there is no such tenant), and some
    owners' pauses lifted (the others' stand)."""

    def get(self, user_id: str, *, fresh: bool = False) -> Tenant | None: ...

    def secret_of(self, user_id: str, keys: KeyVersion) -> str: ...

    def accept(self, user_id: str, plan: str, sender: Sender, account_of: AccountOf) -> KeyVersion | None: ...

    def pause_of(self, user_id: str, *, fresh: bool = False) -> str | None: ...

    def pause(self, user_id: str, owner: str, reason: str) -> bool: ...

    def resume(self, user_id: str, owners: Collection[str] = ...) -> tuple[Pause, ...]: ...


class ApiKeyRecords(Protocol):
    """A tenant's API keys by their digest (chalicelib.stores.api_keys), for chalicelib.control.api_keys."""

    def get(self, user_id: str, digest: str) -> StoredKey | None: ...

    def of_tenant(self, user_id: str) -> list[StoredKey]: ...

    def put(self, key: StoredKey) -> None: ...

    def delete(self, user_id: str, digest: str) -> bool: ...


class LegacyKeyHash(Protocol):
    """The digest of the one key a tenant row held before keys had their own table (chalicelib.control.api_keys
    still takes it, lists it and revokes it)."""

    def api_key_hash(self, user_id: str) -> str | None: ...

    def clear_api_key_hash(self, user_id: str) -> None: ...


class SecretSeal(Protocol):
    """The registry's own collaborator (chalicelib.stores.tenant_secrets): a secret encrypted for a tenant's row,
    and opened again for that tenant only."""

    def seal(self, user_id: str, secret: str) -> str: ...

    def open(self, user_id: str, sealed: str) -> str: ...
