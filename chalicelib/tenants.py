"""The tenant registry: each tenant's sender settings, keyed by userId (DynamoDB, via pynamodb).

Precompile writes it from the incoming message (only when the settings changed, so a campaign of a
million recipients costs one write per container, not a million), and the sender reads the SES keys
from it. That keeps tenant keys out of every queued message and every log line.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.models import Model

from chalicelib.contract import Sender
from chalicelib.tables import bound, condition_failed, warm


class TenantModel(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)
    plan = UnicodeAttribute(default="paid")
    email_address = UnicodeAttribute()
    from_name = UnicodeAttribute(default="")
    region = UnicodeAttribute(null=True)
    api_key = UnicodeAttribute(null=True)
    api_secret = UnicodeAttribute(null=True)
    rate_per_second = NumberAttribute()
    settings_hash = UnicodeAttribute()
    updated_at = NumberAttribute()
    # The AWS account the tenant's SES keys belong to (STS), so that SES events can be checked against it.
    ses_account_id = UnicodeAttribute(null=True)
    # Set by the reputation guard (or an operator): the sender holds the tenant's email while set.
    paused_reason = UnicodeAttribute(null=True)
    paused_at = NumberAttribute(null=True)
    api_key_hash = UnicodeAttribute(null=True)  # SHA-256 of the tenant's API key (chalicelib.reports)
    # The tenant queue's last UTC day of use and whether it exists (chalicelib.idle_queues).
    queue_used_day = UnicodeAttribute(null=True)
    queue_state = UnicodeAttribute(null=True)
    queue_state_at = NumberAttribute(null=True)


@dataclass(frozen=True)
class Tenant:
    user_id: str
    plan: str
    sender: Sender
    ses_account_id: str | None = None
    paused_reason: str | None = None


def _settings_hash(plan: str, s: Sender) -> str:
    parts = [
        plan,
        s.email_address,
        s.from_name,
        s.region or "",
        s.api_key or "",
        s.api_secret or "",
        repr(s.rate_per_second),
    ]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


class TenantRegistry:
    """Read and write tenants, with a short per-container cache for the sender's hot path."""

    def __init__(self, table_name: str, region: str, cache_ttl_s: float = 30.0) -> None:
        self._model = bound(TenantModel, table_name, region)
        self._cache: dict[str, tuple[float, Tenant]] = {}
        self._written: dict[str, str] = {}
        self._ttl = cache_ttl_s
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Create the DynamoDB client now, in one thread, rather than in many at first use."""
        warm(self._model)

    def remember(self, user_id: str, plan: str, sender: Sender) -> bool:
        """Store the tenant's settings if they changed since this container last wrote them."""
        digest = _settings_hash(plan, sender)
        with self._lock:
            if self._written.get(user_id) == digest:
                return False
        m = self._model
        # An update, not a put: what the sender learned about the tenant (its SES account) stays.
        # The account is cleared when the keys change: new keys may belong to another account.
        actions = [
            m.plan.set(plan),
            m.email_address.set(sender.email_address),
            m.from_name.set(sender.from_name),
            m.rate_per_second.set(sender.rate_per_second),
            m.settings_hash.set(digest),
            m.updated_at.set(int(time.time() * 1000)),
        ]
        for attr, value in ((m.region, sender.region), (m.api_key, sender.api_key), (m.api_secret, sender.api_secret)):
            actions.append(attr.set(value) if value else attr.remove())
        current = self._keys_of(user_id)
        if current != (sender.api_key, sender.api_secret):
            actions.append(m.ses_account_id.remove())
        m(user_id).update(actions=actions)
        with self._lock:
            self._written[user_id] = digest
            self._cache.pop(user_id, None)
        return True

    def _keys_of(self, user_id: str) -> tuple[str | None, str | None] | None:
        try:
            item = self._model.get(user_id, consistent_read=True, attributes_to_get=["api_key", "api_secret"])
        except DoesNotExist:
            return None
        return (item.api_key, item.api_secret)

    def set_ses_account(self, user_id: str, account_id: str) -> None:
        """Remember which AWS account the tenant's SES keys belong to."""
        m = self._model
        m(user_id).update(actions=[m.ses_account_id.set(account_id)], condition=m.user_id.exists())
        with self._lock:
            self._cache.pop(user_id, None)

    def pause(self, user_id: str, reason: str) -> bool:
        """Hold the tenant's email. False if it was paused already (the first reason stays)."""
        m = self._model
        try:
            m(user_id).update(
                actions=[m.paused_reason.set(reason[:500]), m.paused_at.set(int(time.time() * 1000))],
                condition=m.user_id.exists() & m.paused_reason.does_not_exist(),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        self._forget(user_id)
        return True

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
        try:
            item = self._model.get(user_id, consistent_read=True)
        except DoesNotExist:
            return None
        tenant = Tenant(
            user_id=item.user_id,
            plan=item.plan,
            sender=Sender(
                email_address=item.email_address,
                from_name=item.from_name or "",
                region=item.region,
                api_key=item.api_key,
                api_secret=item.api_secret,
                rate_per_second=float(item.rate_per_second),
            ),
            ses_account_id=item.ses_account_id,
            paused_reason=item.paused_reason,
        )
        with self._lock:
            self._cache[user_id] = (now, tenant)
        return tenant
