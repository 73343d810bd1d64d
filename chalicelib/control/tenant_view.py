"""GET /tenant: the tenant's own settings and standing, as moonsend holds them.

Its plan, rate and From identity as its latest message registered them; its free-plan From addresses;
whether its email is held and by whom (its own pause, an operator's, the reputation guard's, SES's: each
with its reason, and who may lift it); its SES tenant's status on the platform's account; and the free
plan's daily cap with today's use. Never a key or a secret.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core import log
from chalicelib.core.contract import iso_ms
from chalicelib.stores.ports.sending import DailyUse, FreeAddressRecords, SesTenantRecords, TenantStatus
from chalicelib.stores.ports.tenants import TenantRecords

SES_STATUS_MAX_AGE_S = 300.0
# SES's non-send calls are limited to about one a second for the platform's account, which the reputation
# guard and free tenants' first sends also need: a status SES could not give (throttled, unavailable) is
# asked again only after this, per API container, as a tenant with no SES tenant yet is after the above.
SES_STATUS_ERROR_RETRY_S = 60.0


@dataclass(frozen=True)
class PlatformTerms:
    """What the platform applies to free-plan tenants: its shared queue's rate and the daily cap (0: none)."""

    region: str
    free_rate_per_second: float
    free_daily_cap: int


class TenantView:
    def __init__(
        self,
        tenants: TenantRecords,
        usage: DailyUse,
        ses: SesTenantRecords,
        addresses: FreeAddressRecords,
        terms: PlatformTerms,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._tenants = tenants
        self._usage = usage
        self._ses = ses
        self._addresses = addresses
        self._terms = terms
        self._clock = clock
        # (user, region) -> (until when it stands, what SES said: its status, or None for no SES tenant yet
        # or a read that failed). The store keeps found statuses only, for the guard, which must see a new one.
        self._ses_seen: dict[tuple[str, str], tuple[float, TenantStatus | None]] = {}

    def get_for(self, user: str) -> dict[str, Any]:
        """The tenant's settings and standing (the API's route and the operator's CLI)."""
        tenant = self._tenants.get(user, fresh=True)
        if tenant is None:  # a key issued before the tenant's first message registered its settings
            return {
                "id": user,
                "plan": None,
                "ratePerSecond": None,
                "sender": None,
                "fromAddresses": [],
                "paused": False,
                "pauses": [],
                "ses": None,
                "dailyCap": None,
            }
        free = tenant.plan == "free"
        sender = tenant.sender
        ses = self._ses_status(user, sender.region or self._terms.region) if free else None
        addresses = sorted(self._from_addresses(user, tenant.from_addresses, sender.email_address, free))
        return {
            "id": user,
            "plan": tenant.plan,
            # The free plan's queue is drained at the platform's rate, whatever a message asks for.
            "ratePerSecond": self._terms.free_rate_per_second if free else sender.rate_per_second,
            "sender": {"emailAddress": sender.email_address, "fromName": sender.from_name, "region": sender.region},
            "fromAddresses": addresses,
            "paused": bool(tenant.pauses),
            "pauses": [p.as_dict() for p in tenant.pauses],
            "ses": {"tenant": ses.name, "sending": ses.sending, "cause": ses.cause} if ses else None,
            "dailyCap": self._daily_cap(user) if free and self._terms.free_daily_cap else None,
        }

    def _from_addresses(self, user: str, listed: tuple[str, ...], sender: str, free: bool) -> set[str]:
        """The From addresses the tenant may send from: those on its row, and its Sender's. A free tenant's
        Sender may name an address an operator has since given to another tenant (`moonsend tenant
        assign-from`) or an audit dropped: it is listed only while it is still this tenant's (one read, and
        only when the row does not list it already)."""
        own = sender.lower()
        if not free or own in listed or self._addresses.owner(own) == user:
            return {*listed, own}
        return set(listed)

    def _ses_status(self, user: str, region: str) -> TenantStatus | None:
        """SES's status of the tenant's SES tenant; None when it has none yet or SES cannot give it now (a
        throttled read is no reason to fail the answer, whose `pauses` already hold any pause SES set). Every
        answer is kept: a found status or a miss five minutes, a failed read a minute, so that a tenant
        polling its settings from many API containers does not spend the account's SES calls."""
        key, now = (user, region), self._clock()
        seen = self._ses_seen.get(key)
        if seen is not None and now < seen[0]:
            return seen[1]
        try:
            status = self._ses.status(user, region, max_age_s=SES_STATUS_MAX_AGE_S)
            until = now + SES_STATUS_MAX_AGE_S
        except Exception as exc:
            log.warning("SES tenant status unknown for GET /tenant", user=user, error=type(exc).__name__)
            status, until = None, now + SES_STATUS_ERROR_RETRY_S
        self._ses_seen[key] = (until, status)
        return status

    def _daily_cap(self, user: str) -> dict[str, Any]:
        now = self._clock()
        day = time.gmtime(now)
        midnight = calendar.timegm((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0)) + 86400
        return {
            "limit": self._terms.free_daily_cap,
            "usedToday": self._usage.used(user, now),
            "resetsAt": iso_ms(midnight * 1000),
        }
