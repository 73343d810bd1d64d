"""The tenant registry: each tenant's sender settings and SES keys, keyed by userId (DynamoDB, via pynamodb).

Precompile registers what each message says (`accept`): the latest From, fromName, plan and rate, and
the message's keys. Keys are versioned and never change silently: a tenant's first keys register it,
and a later message's new keys are accepted only when STS says they belong to the same AWS account as
the current ones (a rotation); keys of another account are refused, and moving a tenant to another
account is an operator's action (`replace_keys`, `moonsend tenant move-keys`). Each key version remembers
its account, learned with STS when it is registered, so the tenant's SES events are trusted from it
before its first email goes out. Every write is conditional on the entry's version, so two containers
never overwrite each other's newer settings with older ones.

The drainer reads the keys from here by the version the queued email names, which keeps tenant keys out
of every queued message and every log line. Each secret is stored encrypted with the stage's KMS key
(chalicelib.stores.tenant_secrets), bound to its tenant; `secret_of` decrypts it, which only the roles
of precompile_email (to compare a message's keys with the registered ones) and send_emails (to sign SES
calls) may do. A row written before secrets were encrypted is read as it is and sealed at its next write.
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from typing import Any

from pynamodb.exceptions import DoesNotExist
from pynamodb.expressions.condition import Condition

from chalicelib.core import log
from chalicelib.core.contract import Sender
from chalicelib.core.errors import RegistryConflict, SenderRefused
from chalicelib.stores.pauses import MAX_REASON, OWNERS, Pause, pauses_of, summary
from chalicelib.stores.ports.tenants import AccountOf, KeyVersion, SecretSeal, Tenant
from chalicelib.stores.short_cache import ShortCache
from chalicelib.stores.tables import bound, update_if, warm
from chalicelib.stores.tenant_model import TenantModel, all_sealed, read_keys, tenant_of

# Older key versions are kept for email queued with them (and for their accounts' SES events), up to this
# many (a version, its secret sealed, is about 400 bytes of the entry's 400 KB).
MAX_KEY_VERSIONS = 100
_WRITE_TRIES = 5

# How old a drainer's answer to "is this tenant paused?" may be: a pause (any owner's) reaches every send
# within about this, plus one read (chalicelib.stores.short_cache). The rest of the tenant (its settings
# and keys) is kept `cache_ttl_s`: it changes only with the tenant's own messages.
PAUSE_READ_S = 1.0
_PAUSE_ATTRIBUTES = ["paused_reason", "paused_at", *(f"pause_{o}" for o in OWNERS), *(f"pause_{o}_at" for o in OWNERS)]


@dataclass(frozen=True)
class Standing:
    """What an operator sees of a tenant at a glance."""

    user_id: str
    tenant: Tenant | None  # None before a message registered its settings (an operator's pause, a From assigned)
    pauses: tuple[Pause, ...]
    queue_used_day: str | None  # the last UTC day its own queue was used (chalicelib.stores.queue_activity)


class TenantRegistry:
    """Read and write tenants, with a short per-container cache for the drainer's hot path."""

    def __init__(
        self,
        table_name: str,
        region: str,
        secrets: SecretSeal,
        cache_ttl_s: float = 30.0,
        pause_read_s: float = PAUSE_READ_S,
    ) -> None:
        self._model = bound(TenantModel, table_name, region)
        self._secrets = secrets
        self._cache: dict[str, tuple[float, Tenant]] = {}
        self._ttl = cache_ttl_s
        self._lock = threading.Lock()
        self._pauses: ShortCache[str, str | None] = ShortCache(self._read_pause, pause_read_s)

    def warm(self) -> None:
        """Create the DynamoDB client now, in one thread, rather than in many at first use."""
        warm(self._model)

    def accept(self, user_id: str, plan: str, sender: Sender, account_of: AccountOf) -> KeyVersion | None:
        """Register a message's sender; the key version its email is sent with (None: no keys, the free plan).

        One consistent read per message; a write only when something changed, conditional on the version
        read. Raises SenderRefused for keys of another account than the tenant's current keys."""
        for _ in range(_WRITE_TRIES):
            item = self._item(user_id)
            keys = read_keys(item) if item else ()
            version, keys = self._key_version(user_id, sender, keys, account_of)
            if item is not None and _unchanged(item, plan, sender, keys):
                return version
            if self._write(user_id, item, plan, sender, keys):
                return version
        raise RegistryConflict(f"tenant {user_id}: its registry entry changed {_WRITE_TRIES} times during one write")

    def _key_version(
        self, user_id: str, sender: Sender, keys: tuple[KeyVersion, ...], account_of: AccountOf
    ) -> tuple[KeyVersion | None, tuple[KeyVersion, ...]]:
        """The version of the Sender's keys, registering them (and learning accounts) where needed.

        Keys are accepted only in the account of the current keys: new ones of that account become the
        next version, and known keys of an account the tenant was moved away from are refused too."""
        if not sender.has_own_account:
            return None, keys
        current = keys[-1] if keys else None
        if current is not None and current.account is None:  # registered before accounts were learned
            try:
                current = replace(current, account=account_of(self._as_sender(user_id, current, sender.region)))
                keys = (*keys[:-1], current)
            except SenderRefused:  # deactivated since: no account to hold new keys to, they register afresh
                log.warning("registered keys no longer accepted by AWS, replaced", user=user_id)
                keys, current = keys[:-1], None
        known = next((k for k in reversed(keys) if self._matches(user_id, k, sender)), None)
        if known is not None and (current is None or known.account == current.account):
            return known, keys
        account = known.account if known is not None and known.account else account_of(sender)
        if current is not None and account != current.account:
            raise SenderRefused(
                f"sender.apiKey: these keys belong to AWS account {account}, not to {current.account}, the account "
                "of this tenant's registered keys; moving a tenant to another account is an operator's action "
                "(moonsend tenant move-keys)"
            )
        version = (current.version if current else 0) + 1
        new = KeyVersion(version, sender.api_key or "", self._secrets.seal(user_id, sender.api_secret or ""), account)
        return new, (*keys, new)[-MAX_KEY_VERSIONS:]

    def secret_of(self, user_id: str, keys: KeyVersion) -> str:
        """The secret of one of `user_id`'s key versions, decrypted (once per container: cached).

        SecretUnreadable when KMS will not decrypt it for this tenant (a ciphertext of another row)."""
        if keys.sealed is None:  # a row written before secrets were encrypted, not yet written since
            return keys.plain or ""
        return self._secrets.open(user_id, keys.sealed)

    def _matches(self, user_id: str, keys: KeyVersion, sender: Sender) -> bool:
        """Whether a message's keys are this version's. The key ids first: only a version with the message's
        key id is decrypted (an access key id has one secret), so a message with new keys decrypts nothing."""
        if keys.api_key != sender.api_key or not sender.api_secret:
            return False
        return hmac.compare_digest(self.secret_of(user_id, keys).encode(), sender.api_secret.encode())

    def _as_sender(self, user_id: str, keys: KeyVersion, region: str | None) -> Sender:
        return Sender("", "", region, keys.api_key, self.secret_of(user_id, keys), 0.0)

    def _sealed(self, user_id: str, keys: tuple[KeyVersion, ...]) -> tuple[KeyVersion, ...]:
        """Every version's secret encrypted: a row written before secrets were is sealed by its next write."""
        return tuple(
            k if k.sealed is not None else replace(k, sealed=self._secrets.seal(user_id, k.plain or ""), plain=None)
            for k in keys
        )

    def seal_stored(self, user_id: str) -> bool:
        """Encrypt the secrets a row written before secrets were encrypted holds in the clear (`moonsend
        tenant seal-keys`). False when there was nothing to seal."""
        for _ in range(_WRITE_TRIES):
            item = self._item(user_id)
            keys = read_keys(item) if item else ()
            if item is None or (all_sealed(keys) and item.api_secret is None):
                return False
            tenant = tenant_of(item)
            if tenant is None:  # keys with no settings: nothing reads them; the clear secret is removed
                m = self._model
                if update_if(m(user_id), [m.api_secret.remove()], m.user_id.exists()):
                    return True
                continue
            if self._write(user_id, item, tenant.plan, tenant.sender, keys):
                return True
        raise RegistryConflict(f"tenant {user_id}: its registry entry changed {_WRITE_TRIES} times during one write")

    def unsealed(self) -> list[str]:
        """The user ids of rows still holding a secret in the clear (a scan: for the one-off command)."""
        m = self._model
        rows = m.scan(m.api_secret.exists() | m.key_versions.contains('"apiSecret"'))
        return [t.user_id for t in rows]

    def replace_keys(self, user_id: str, sender: Sender, account_of: AccountOf) -> KeyVersion:
        """Register keys of any account as the tenant's current ones: the explicit move to another account.

        Email already queued keeps going out with the keys (and account) it was queued with."""
        for _ in range(_WRITE_TRIES):
            item = self._item(user_id)
            tenant = tenant_of(item) if item else None
            if item is None or tenant is None:
                raise SenderRefused(f"tenant {user_id} has no registered sender: its first message registers it")
            keys = read_keys(item)
            if keys and self._matches(user_id, keys[-1], sender) and keys[-1].account and all_sealed(keys):
                return keys[-1]
            version = (keys[-1].version if keys else 0) + 1
            sealed = self._secrets.seal(user_id, sender.api_secret or "")
            new = KeyVersion(version, sender.api_key or "", sealed, account_of(sender))
            # Older versions with the same keys stay: email queued with them is still sent with them.
            keys = (*keys, new)[-MAX_KEY_VERSIONS:]
            moved = replace(tenant.sender, region=sender.region or tenant.sender.region)
            if self._write(user_id, item, tenant.plan, moved, keys):
                return new
        raise RegistryConflict(f"tenant {user_id}: its registry entry changed {_WRITE_TRIES} times during one write")

    def _item(self, user_id: str) -> TenantModel | None:
        try:
            return self._model.get(user_id, consistent_read=True)
        except DoesNotExist:
            return None

    def _write(
        self, user_id: str, item: TenantModel | None, plan: str, sender: Sender, keys: tuple[KeyVersion, ...]
    ) -> bool:
        """Write the settings if the entry is still as read; False when another writer came first."""
        m = self._model
        actions = [
            m.plan.set(plan),
            m.email_address.set(sender.email_address),
            m.from_name.set(sender.from_name),
            m.rate_per_second.set(sender.rate_per_second),
            m.updated_at.set(int(time.time() * 1000)),
            m.version.add(1),
        ]
        actions.append(m.region.set(sender.region) if sender.region else m.region.remove())
        if keys:
            keys = self._sealed(user_id, keys)
            actions.append(m.key_versions.set(json.dumps([k.as_dict() for k in keys], separators=(",", ":"))))
            # The current key id and account also where code from before key versions reads them; never the
            # secret in the clear (removed from rows written before secrets were encrypted).
            current = keys[-1]
            actions += [m.api_key.set(current.api_key), m.api_secret.remove()]
            actions.append(m.ses_account_id.set(current.account) if current.account else m.ses_account_id.remove())
        condition: Condition
        if item is None:
            condition = m.user_id.does_not_exist()
        elif item.version is None:
            condition = m.user_id.exists() & m.version.does_not_exist()
        else:
            condition = m.version == item.version
        if not update_if(m(user_id), actions, condition):
            return False
        self._forget(user_id)
        return True

    def pause(self, user_id: str, owner: str, reason: str) -> bool:
        """Hold the tenant's email by `owner`'s pause. False if `owner` has paused it already (its first reason
        stays) or there is no such tenant; another owner's pause changes nothing of it."""
        for _ in range(_WRITE_TRIES):
            item = self._item(user_id)
            if item is None:
                return False
            held = pauses_of(item)
            if any(p.owner == owner for p in held):
                return False
            new = Pause(owner, reason[:MAX_REASON], int(time.time() * 1000))
            # An item from before owners gets its one pause written with the owner it was given.
            if self._write_pauses(user_id, item, (*held, new)):
                return True
        raise RegistryConflict(f"tenant {user_id}: its pauses changed {_WRITE_TRIES} times during one write")

    def resume(self, user_id: str, owners: Collection[str] = OWNERS) -> tuple[Pause, ...]:
        """Lift the pauses of these owners (every owner's by default): the pauses lifted, none if none stood.
        The tenant stays paused while another owner's pause stands."""
        for _ in range(_WRITE_TRIES):
            item = self._item(user_id)
            if item is None:
                return ()
            held = pauses_of(item)
            lifted = tuple(p for p in held if p.owner in owners)
            if not lifted:
                return ()
            if self._write_pauses(user_id, item, tuple(p for p in held if p not in lifted)):
                return lifted
        raise RegistryConflict(f"tenant {user_id}: its pauses changed {_WRITE_TRIES} times during one write")

    def _write_pauses(self, user_id: str, item: TenantModel, pauses: tuple[Pause, ...]) -> bool:
        """Store exactly these pauses if the item's are still as read; False when another writer came first."""
        m = self._model
        standing = {p.owner: p for p in pauses}
        actions: list[Any] = []
        for owner in OWNERS:
            reason, at = getattr(m, f"pause_{owner}"), getattr(m, f"pause_{owner}_at")
            p = standing.get(owner)
            actions += [reason.set(p.reason), at.set(p.at_ms or 0)] if p else [reason.remove(), at.remove()]
        if pauses:
            first = min(p.at_ms or 0 for p in pauses)
            actions += [m.paused_reason.set(summary(pauses) or ""), m.paused_at.set(first)]
        else:
            actions += [m.paused_reason.remove(), m.paused_at.remove()]
        condition = m.user_id.exists()
        for owner in OWNERS:
            attr = getattr(m, f"pause_{owner}")
            read = getattr(item, f"pause_{owner}")
            condition &= attr.does_not_exist() if read is None else attr == read
        legacy = item.paused_reason
        condition &= m.paused_reason.does_not_exist() if legacy is None else m.paused_reason == legacy
        if not update_if(m(user_id), actions, condition):
            return False
        self._forget(user_id)
        return True

    def paused(self) -> list[tuple[str, str]]:
        """(user id, every reason) of every paused tenant (a scan: for status and operators, not hot paths)."""
        return [(user, summary(pauses) or "") for user, pauses in self.pauses()]

    def pauses(self) -> list[tuple[str, tuple[Pause, ...]]]:
        """(user id, its pauses) of every paused tenant (a scan: for status and operators, not hot paths)."""
        m = self._model
        condition = m.paused_reason.exists()
        for owner in OWNERS:
            condition |= getattr(m, f"pause_{owner}").exists()
        return [(t.user_id, pauses_of(t)) for t in m.scan(condition) if pauses_of(t)]

    def every(self) -> Iterator[Standing]:
        """Every tenant's standing, in no order. A scan: for operators, not hot paths; the From claims that share
        the table are no tenant and are left out."""
        for item in self._model.scan():
            if not item.user_id.startswith("_"):  # `_from:<address>` (chalicelib.stores.free_senders)
                yield Standing(item.user_id, tenant_of(item), pauses_of(item), item.queue_used_day)

    def set_api_key_hash(self, user_id: str, digest: str) -> None:
        """A key as the row held it before keys had a table of their own (tests make such a tenant)."""
        m = self._model
        m(user_id).update(actions=[m.api_key_hash.set(digest)], condition=m.user_id.exists())

    def clear_api_key_hash(self, user_id: str) -> None:
        """The row's key revoked (chalicelib.control.api_keys: it now keeps every key in a table of its own)."""
        m = self._model
        m(user_id).update(actions=[m.api_key_hash.remove()])

    def api_key_hash(self, user_id: str) -> str | None:
        try:
            item = self._model.get(user_id, consistent_read=True, attributes_to_get=["api_key_hash"])
        except DoesNotExist:
            return None
        return item.api_key_hash

    def _forget(self, user_id: str) -> None:
        with self._lock:
            self._cache.pop(user_id, None)
        self._pauses.forget(user_id)

    def pause_of(self, user_id: str, *, fresh: bool = False) -> str | None:
        """Why the tenant's email is held now (every owner's reason), or None: at most PAUSE_READ_S old.

        The drainer asks before each send. One strongly consistent GetItem of the pause attributes per tenant
        per second per container, billed by the item's size (DynamoDB charges a projected read for the whole
        item): 1 RCU for a tenant under 4 KB, which is a tenant with fewer than about eight key versions."""
        return self._pauses.get(user_id, fresh=fresh)

    def _read_pause(self, user_id: str) -> str | None:
        try:
            item = self._model.get(user_id, consistent_read=True, attributes_to_get=_PAUSE_ATTRIBUTES)
        except DoesNotExist:
            return None
        return summary(pauses_of(item))

    def get(self, user_id: str, *, fresh: bool = False) -> Tenant | None:
        """The tenant (from the cache unless `fresh`: a decision that must see a pause or resume at once)."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(user_id)
            if hit and now - hit[0] < self._ttl and not fresh:
                return hit[1]
        item = self._item(user_id)
        tenant = tenant_of(item) if item else None
        if tenant is None:
            return None
        with self._lock:
            self._cache[user_id] = (now, tenant)
        return tenant


def _unchanged(item: TenantModel, plan: str, sender: Sender, keys: tuple[KeyVersion, ...]) -> bool:
    """Whether the entry already says all this (written in the current format: legacy keys are rewritten)."""
    return (
        item.version is not None
        and item.plan == plan
        and item.email_address == sender.email_address
        and (item.from_name or "") == sender.from_name
        and item.region == sender.region
        and item.rate_per_second is not None
        and float(item.rate_per_second) == sender.rate_per_second
        and read_keys(item) == keys
        and (not keys or item.key_versions is not None)
        and all_sealed(keys)
        and item.api_secret is None
    )
