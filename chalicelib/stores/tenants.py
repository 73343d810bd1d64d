"""The tenant registry: each tenant's sender settings and SES keys, keyed by userId (DynamoDB, via pynamodb).

Precompile registers what each message says (`accept`): the latest From, fromName, plan and rate, and
the message's keys. Keys are versioned and never change silently: a tenant's first keys register it,
and a later message's new keys are accepted only when STS says they belong to the same AWS account as
the current ones (a rotation); keys of another account are refused, and moving a tenant to another
account is an operator's action (`replace_keys`, `moonsend tenant move-keys`). Each key version remembers
its account, learned with STS when it is registered, so the tenant's SES events are trusted from it
before its first email goes out. Every write is conditional on the entry's version, so two containers
never overwrite each other's newer settings with older ones.

The sender reads the keys from here by the version the queued email names, which keeps tenant keys out
of every queued message and every log line.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.models import Model

from chalicelib.core import log
from chalicelib.core.contract import Sender
from chalicelib.core.errors import RegistryConflict, SenderRefused
from chalicelib.stores.tables import bound, update_if, warm

# Older key versions are kept for email queued with them (and for their accounts' SES events), up to this
# many (a version is about 150 bytes of the entry's 400 KB).
MAX_KEY_VERSIONS = 100
_WRITE_TRIES = 5

# The AWS account a sender's keys belong to (STS GetCallerIdentity with those keys).
AccountOf = Callable[[Sender], str]


class TenantModel(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)
    plan = UnicodeAttribute(default="paid")
    email_address = UnicodeAttribute(null=True)
    from_name = UnicodeAttribute(default="")
    region = UnicodeAttribute(null=True)
    rate_per_second = NumberAttribute(null=True)
    # Every registered key version: [{"version", "apiKey", "apiSecret", "account"}], oldest first.
    key_versions = UnicodeAttribute(null=True)
    version = NumberAttribute(null=True)  # bumped by every settings write, the condition of the next
    updated_at = NumberAttribute(null=True)
    # Before key versions: one pair of keys and the account learned for it (read as version 1).
    api_key = UnicodeAttribute(null=True)
    api_secret = UnicodeAttribute(null=True)
    ses_account_id = UnicodeAttribute(null=True)
    # Set by the reputation guard (or an operator): the sender holds the tenant's email while set.
    paused_reason = UnicodeAttribute(null=True)
    paused_at = NumberAttribute(null=True)
    api_key_hash = UnicodeAttribute(null=True)  # SHA-256 of the tenant's API key (chalicelib.feedback.reports)
    # The tenant queue's last UTC day of use and whether it exists (chalicelib.jobs.idle_queues).
    queue_used_day = UnicodeAttribute(null=True)
    queue_state = UnicodeAttribute(null=True)
    queue_state_at = NumberAttribute(null=True)


@dataclass(frozen=True)
class KeyVersion:
    """One registered pair of SES keys and the AWS account STS said they belong to."""

    version: int
    api_key: str
    api_secret: str
    account: str | None

    def __repr__(self) -> str:  # the secret never reaches a log line through repr()
        return f"KeyVersion(version={self.version}, account={self.account!r}, ...)"

    def matches(self, sender: Sender) -> bool:
        return self.api_key == sender.api_key and self.api_secret == sender.api_secret

    def as_dict(self) -> dict[str, object]:
        return {"version": self.version, "apiKey": self.api_key, "apiSecret": self.api_secret, "account": self.account}


@dataclass(frozen=True)
class Tenant:
    user_id: str
    plan: str
    sender: Sender  # the latest registered settings, with the current keys
    keys: tuple[KeyVersion, ...] = ()
    paused_reason: str | None = None

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


def _read_keys(item: TenantModel) -> tuple[KeyVersion, ...]:
    if item.key_versions:
        return tuple(
            KeyVersion(int(k["version"]), str(k["apiKey"]), str(k["apiSecret"]), k.get("account"))
            for k in json.loads(item.key_versions)
        )
    if item.api_key and item.api_secret:
        return (KeyVersion(1, item.api_key, item.api_secret, item.ses_account_id),)
    return ()


def _tenant(item: TenantModel) -> Tenant | None:
    if not item.email_address or item.rate_per_second is None:
        return None  # an entry other modules wrote (a queue's use) before any message registered settings
    keys = _read_keys(item)
    current = keys[-1] if keys else None
    return Tenant(
        user_id=item.user_id,
        plan=item.plan,
        sender=Sender(
            email_address=item.email_address,
            from_name=item.from_name or "",
            region=item.region,
            api_key=current.api_key if current else None,
            api_secret=current.api_secret if current else None,
            rate_per_second=float(item.rate_per_second),
        ),
        keys=keys,
        paused_reason=item.paused_reason,
    )


class TenantRegistry:
    """Read and write tenants, with a short per-container cache for the sender's hot path."""

    def __init__(self, table_name: str, region: str, cache_ttl_s: float = 30.0) -> None:
        self._model = bound(TenantModel, table_name, region)
        self._cache: dict[str, tuple[float, Tenant]] = {}
        self._ttl = cache_ttl_s
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Create the DynamoDB client now, in one thread, rather than in many at first use."""
        warm(self._model)

    def accept(self, user_id: str, plan: str, sender: Sender, account_of: AccountOf) -> KeyVersion | None:
        """Register a message's sender; the key version its email is sent with (None: no keys, the free plan).

        One consistent read per message; a write only when something changed, conditional on the version
        read. Raises SenderRefused for keys of another account than the tenant's current keys."""
        for _ in range(_WRITE_TRIES):
            item = self._item(user_id)
            keys = _read_keys(item) if item else ()
            version, keys = self._key_version(user_id, sender, keys, account_of)
            if item is not None and _unchanged(item, plan, sender, keys):
                return version
            if self._write(user_id, item, plan, sender, keys):
                return version
        raise RegistryConflict(f"tenant {user_id}: its registry entry changed {_WRITE_TRIES} times during one write")

    def _key_version(
        self, user_id: str, sender: Sender, keys: tuple[KeyVersion, ...], account_of: AccountOf
    ) -> tuple[KeyVersion | None, tuple[KeyVersion, ...]]:
        """The version of the sender's keys, registering them (and learning accounts) where needed.

        Keys are accepted only in the account of the current keys: new ones of that account become the
        next version, and known keys of an account the tenant was moved away from are refused too."""
        if not sender.has_own_account:
            return None, keys
        current = keys[-1] if keys else None
        if current is not None and current.account is None:  # registered before accounts were learned
            try:
                current = replace(current, account=account_of(_as_sender(current, sender.region)))
                keys = (*keys[:-1], current)
            except SenderRefused:  # deactivated since: no account to hold new keys to, they register afresh
                log.warning("registered keys no longer accepted by AWS, replaced", user=user_id)
                keys, current = keys[:-1], None
        known = next((k for k in reversed(keys) if k.matches(sender)), None)
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
        new = KeyVersion(version, sender.api_key or "", sender.api_secret or "", account)
        return new, (*keys, new)[-MAX_KEY_VERSIONS:]

    def replace_keys(self, user_id: str, sender: Sender, account_of: AccountOf) -> KeyVersion:
        """Register keys of any account as the tenant's current ones: the explicit move to another account.

        Email already queued keeps going out with the keys (and account) it was queued with."""
        for _ in range(_WRITE_TRIES):
            item = self._item(user_id)
            tenant = _tenant(item) if item else None
            if item is None or tenant is None:
                raise SenderRefused(f"tenant {user_id} has no registered sender: its first message registers it")
            keys = _read_keys(item)
            if keys and keys[-1].matches(sender) and keys[-1].account:
                return keys[-1]
            version = (keys[-1].version if keys else 0) + 1
            new = KeyVersion(version, sender.api_key or "", sender.api_secret or "", account_of(sender))
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
            actions.append(m.key_versions.set(json.dumps([k.as_dict() for k in keys], separators=(",", ":"))))
            # The current keys also where code from before key versions reads them, so that a rollback (or
            # a container of the previous release during a deploy) still sends a paid tenant's email with
            # its own keys, never through the platform's account.
            current = keys[-1]
            actions += [m.api_key.set(current.api_key), m.api_secret.set(current.api_secret)]
            actions.append(m.ses_account_id.set(current.account) if current.account else m.ses_account_id.remove())
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

    def pause(self, user_id: str, reason: str) -> bool:
        """Hold the tenant's email. False if it was paused already (the first reason stays)."""
        m = self._model
        paused = update_if(
            m(user_id),
            [m.paused_reason.set(reason[:500]), m.paused_at.set(int(time.time() * 1000))],
            m.user_id.exists() & m.paused_reason.does_not_exist(),
        )
        if paused:
            self._forget(user_id)
        return paused

    def resume(self, user_id: str) -> None:
        m = self._model
        m(user_id).update(actions=[m.paused_reason.remove(), m.paused_at.remove()], condition=m.user_id.exists())
        self._forget(user_id)

    def paused(self) -> list[tuple[str, str]]:
        """(user id, reason) of every paused tenant (a scan: for status and operators, not hot paths)."""
        m = self._model
        return [(t.user_id, t.paused_reason or "") for t in m.scan(m.paused_reason.exists())]

    def set_api_key_hash(self, user_id: str, digest: str) -> None:
        m = self._model
        m(user_id).update(actions=[m.api_key_hash.set(digest)], condition=m.user_id.exists())

    def api_key_hash(self, user_id: str) -> str | None:
        try:
            item = self._model.get(user_id, consistent_read=True, attributes_to_get=["api_key_hash"])
        except DoesNotExist:
            return None
        return item.api_key_hash

    def _forget(self, user_id: str) -> None:
        with self._lock:
            self._cache.pop(user_id, None)

    def get(self, user_id: str, *, fresh: bool = False) -> Tenant | None:
        """The tenant (from the cache unless `fresh`: a decision that must see a pause or resume at once)."""
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(user_id)
            if hit and now - hit[0] < self._ttl and not fresh:
                return hit[1]
        item = self._item(user_id)
        tenant = _tenant(item) if item else None
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
        and _read_keys(item) == keys
        and (not keys or item.key_versions is not None)
    )


def _as_sender(keys: KeyVersion, region: str | None) -> Sender:
    return Sender("", "", region, keys.api_key, keys.api_secret, 0.0)
