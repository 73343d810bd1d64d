"""A tenant as the registry stores it (its table item) and as the code reads it: settings and versioned keys.

A key version's secret is stored encrypted (chalicelib.stores.tenant_secrets): `KeyVersion.sealed` is
KMS's ciphertext, and only the registry, asked by a function allowed to decrypt, opens it. Rows written
before secrets were encrypted hold them in the clear (`KeyVersion.plain`): they are read as they are, and
encrypted at the tenant's next write (or by `moonsend tenant seal-keys`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from chalicelib.core.contract import Sender
from chalicelib.core.resources import TENANTS_BY_QUEUE_HOUR
from chalicelib.stores.pauses import Pause, pauses_of, summary


class _ByQueueHour(GlobalSecondaryIndex["TenantModel"]):
    """The tenants whose queue was last used in a UTC hour (keys only: see chalicelib.core.resources.IndexDef)."""

    class Meta:
        index_name = TENANTS_BY_QUEUE_HOUR
        projection = KeysOnlyProjection()

    queue_used_hour = UnicodeAttribute(hash_key=True)
    user_id = UnicodeAttribute(range_key=True)


class TenantModel(Model):
    class Meta:
        table_name = "unbound"

    by_queue_hour = _ByQueueHour()
    user_id = UnicodeAttribute(hash_key=True)
    plan = UnicodeAttribute(default="paid")
    email_address = UnicodeAttribute(null=True)
    from_name = UnicodeAttribute(default="")
    region = UnicodeAttribute(null=True)
    rate_per_second = NumberAttribute(null=True)
    # Every registered key version: [{"version", "apiKey", "sealedSecret", "account"}], oldest first (rows
    # written before secrets were encrypted: "apiSecret" in the clear instead of "sealedSecret").
    key_versions = UnicodeAttribute(null=True)
    version = NumberAttribute(null=True)  # bumped by every settings write, the condition of the next
    updated_at = NumberAttribute(null=True)
    # Before key versions: one pair of keys and the account learned for it (read as version 1). The secret
    # is removed by the first write since secrets are encrypted; the key id stays (it is no secret).
    api_key = UnicodeAttribute(null=True)
    api_secret = UnicodeAttribute(null=True)
    ses_account_id = UnicodeAttribute(null=True)
    # Each owner's pause, its reason and since when (chalicelib.stores.pauses): the tenant's email is held
    # while any is set. `paused_reason` has every standing reason, for code from before owners.
    pause_tenant = UnicodeAttribute(null=True)
    pause_tenant_at = NumberAttribute(null=True)
    pause_operator = UnicodeAttribute(null=True)
    pause_operator_at = NumberAttribute(null=True)
    pause_guard = UnicodeAttribute(null=True)
    pause_guard_at = NumberAttribute(null=True)
    pause_ses = UnicodeAttribute(null=True)
    pause_ses_at = NumberAttribute(null=True)
    paused_reason = UnicodeAttribute(null=True)
    paused_at = NumberAttribute(null=True)
    api_key_hash = UnicodeAttribute(null=True)  # SHA-256 of its one key of before (chalicelib.control.api_keys)
    # The tenant queue's last UTC day of use and whether it exists (chalicelib.jobs.idle_queues), and its last
    # hour of use (`2026-11-29T19`: the sweeper's, chalicelib.jobs.queues_in_use).
    queue_used_day = UnicodeAttribute(null=True)
    queue_used_hour = UnicodeAttribute(null=True)
    queue_state = UnicodeAttribute(null=True)
    queue_state_at = NumberAttribute(null=True)
    # The free-plan From addresses the tenant has (chalicelib.stores.free_senders), lower-cased.
    from_addresses = UnicodeSetAttribute(null=True)


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


def read_keys(item: TenantModel) -> tuple[KeyVersion, ...]:
    if item.key_versions:
        return tuple(_key_version(k) for k in json.loads(item.key_versions))
    if item.api_key and item.api_secret:
        return (KeyVersion(1, item.api_key, None, item.ses_account_id, plain=item.api_secret),)
    return ()


def _key_version(k: dict[str, object]) -> KeyVersion:
    sealed, plain = k.get("sealedSecret"), k.get("apiSecret")
    return KeyVersion(
        int(str(k["version"])),
        str(k["apiKey"]),
        str(sealed) if sealed else None,
        str(k["account"]) if k.get("account") else None,
        plain=str(plain) if plain and not sealed else None,
    )


def all_sealed(keys: tuple[KeyVersion, ...]) -> bool:
    """Whether no key version holds its secret in the clear (a row to seal at its next write otherwise)."""
    return all(k.sealed is not None for k in keys)


def tenant_of(item: TenantModel) -> Tenant | None:
    if not item.email_address or item.rate_per_second is None:
        return None  # an entry other modules wrote (a queue's use) before any message registered settings
    keys = read_keys(item)
    current = keys[-1] if keys else None
    return Tenant(
        user_id=item.user_id,
        plan=item.plan,
        # The registered settings, with the current key id but never the secret: the functions allowed to
        # decrypt it ask the registry for it (TenantRegistry.secret_of).
        sender=Sender(
            email_address=item.email_address,
            from_name=item.from_name or "",
            region=item.region,
            api_key=current.api_key if current else None,
            api_secret=None,
            rate_per_second=float(item.rate_per_second),
        ),
        keys=keys,
        pauses=pauses_of(item),
        from_addresses=tuple(sorted(item.from_addresses or ())),
    )
