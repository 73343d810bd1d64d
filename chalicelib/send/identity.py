"""Who an email goes out as, with which keys, and at what rate.

The Sender is the campaign's, fixed by its first message and carried in every queued email
(chalicelib.stores.campaign_sender): From, name, region and rate come from the queued email, never from
the registry as it is now, so a later message can not change how queued email goes out. The keys are
the newest of the account the campaign was queued with (a rotation within that account is followed;
a move to another account is not).
"""

from __future__ import annotations

import math

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail, Sender
from chalicelib.core.routing import is_free_queue
from chalicelib.send.ports import SesQuota
from chalicelib.stores.ports.sending import FreeAddressRecords
from chalicelib.stores.ports.tenants import Tenant, TenantRecords
from chalicelib.stores.short_cache import ShortCache
from chalicelib.stores.tenant_secrets import SecretUnreadable

# Why email on a tenant's own queue without keys fails rather than going out through the platform's account.
NO_KEYS_REASON = (
    "no SES keys for this email: it was queued for the tenant's own SES account, whose keys are no longer "
    "registered (or whose stored secret KMS does not decrypt for this tenant); email on a tenant's queue is "
    "never sent through the platform's account"
)


# How old the drainer's answer to "whose is this free-plan From address?" may be: an operator's
# `assign-from` or `audit-from --fix` holds for email already accepted within about this.
FROM_OWNER_READ_S = 5.0


class SendingIdentity:
    def __init__(
        self, settings: Settings, tenants: TenantRecords, ses: SesQuota, addresses: FreeAddressRecords
    ) -> None:
        self._settings = settings
        self._tenants = tenants
        self._ses = ses
        self._owners: ShortCache[str, str | None] = ShortCache(addresses.owner, FROM_OWNER_READ_S)

    def from_withdrawn(self, email: QueuedEmail, sender: Sender) -> str | None:
        """Why a free-plan email may no longer go out From its address (None: the address is still its
        tenant's). Checked where the email is sent, not only where it was accepted: an operator may have given
        the address to another tenant, or dropped the claim, while the email waited (scheduled, parked,
        retried). Read per address, not per email: once per FROM_OWNER_READ_S per container."""
        address = sender.email_address.lower()
        owner = self._owners.get(address)
        if owner == email.user_id:
            return None
        whose = (
            "another tenant's (an operator assigned it: moonsend tenant assign-from)"
            if owner
            else "claimed by nobody (an operator dropped its claim: moonsend tenant audit-from --fix)"
        )
        return (
            f"not sent: its From address {address} is no longer this tenant's but {whose} since the email was "
            "accepted; email is never sent From an address of another tenant. Send it again From an address "
            "of yours, or ask an operator to assign this one to you"
        )

    def sender_for(self, email: QueuedEmail, tenant: Tenant, free: bool) -> Sender | None:
        """The Sender this email goes out with: its campaign's (in the queued email) and the keys it names.

        None for email on a tenant's queue without keys to send it with: it is never sent through the
        platform's account, whatever the tenant's plan is now. Email queued before senders were fixed per
        campaign carries no key version and takes the tenant's registered settings where it says nothing."""
        s, registered = email.sender, tenant.sender
        from_address = str(s.get("emailAddress") or registered.email_address)
        from_name = str(s["fromName"]) if isinstance(s.get("fromName"), str) else registered.from_name
        region = s.get("region", registered.region)
        region = region if isinstance(region, str) and region else None
        rate = _positive(s.get("ratePerSecond")) or registered.rate_per_second
        if free:
            return Sender(from_address, from_name, region, None, None, rate)
        version = key_version(email)
        keys = tenant.sending_keys(version)
        if keys is None and version is not None:  # registered after this container's cached read
            fresh = self._tenants.get(email.user_id, fresh=True)
            keys = fresh.sending_keys(version) if fresh else None
        if keys is None:
            return None
        try:  # decrypted once per tenant key version and container (chalicelib.stores.tenant_secrets)
            secret = self._tenants.secret_of(email.user_id, keys)
        except SecretUnreadable as exc:
            log.error("tenant's SES secret unreadable", user=email.user_id, reason=str(exc))
            return None
        return Sender(from_address, from_name, region, keys.api_key, secret, rate)

    def newer_keys(self, email: QueuedEmail, used: Sender) -> bool:
        """Whether the registry (read afresh) has other keys for this email than the ones AWS just refused."""
        tenant = self._tenants.get(email.user_id, fresh=True)
        keys = tenant.sending_keys(key_version(email)) if tenant else None
        return keys is not None and keys.api_key != used.api_key

    def rate_for(self, queue_name: str, sender: Sender) -> float:
        """The free queue's platform rate, or the campaign's rate within the tenant's SES account's own."""
        if is_free_queue(self._settings.resources, queue_name):
            return self._settings.free_rate_per_second
        rate = min(sender.rate_per_second, self._settings.max_rate_per_second)
        try:
            rate = min(rate, self._ses.quota(sender).max_send_rate)
        except Exception as exc:
            log.warning("quota unavailable", queue=queue_name, error=type(exc).__name__)
        return rate


def key_version(email: QueuedEmail) -> int | None:
    """The version of the tenant's keys the email was queued with (None: queued before versions)."""
    version = email.sender.get("keyVersion")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _positive(value: object) -> float | None:
    """A rate from a queued email, or None when it has none (or a value no rate can be)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and math.isfinite(value):
        return float(value)
    return None
