"""A tenant as the registry stores it (its table item) and as the code reads it: settings and versioned keys.

A key version's secret is stored encrypted (chalicelib.stores.tenant_secrets): `KeyVersion.sealed` is
KMS's ciphertext, and only the registry, asked by a function allowed to decrypt, opens it. Rows written
before secrets were encrypted hold them in the clear (`KeyVersion.plain`): they are read as they are, and
encrypted at the tenant's next write (or by `moonsend tenant seal-keys`)."""

from __future__ import annotations

import json

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from chalicelib.core.contract import Sender
from chalicelib.core.resources import TENANTS_BY_QUEUE_HOUR
from chalicelib.stores.pauses import pauses_of
from chalicelib.stores.ports.tenants import KeyVersion, Tenant


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
