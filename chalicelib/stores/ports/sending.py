"""The free plan's and the guard's stores' ports (chalicelib.stores.daily_cap, reputation, free_senders,
platform_identities, ses_tenants): the daily cap, the reputation counts, the free From addresses and what covers
them, the free tenants' SES tenants; and the values they speak of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Share:
    """A batch's share of the day's cap: how many of its emails may be queued."""

    allowed: int
    repeated: bool = False  # the batch was reserved before (a redelivery or retry): the same share


class DailyShare(Protocol):
    """Precompile's, its one consumer: a batch's share of the day's cap, and the cap (for the reason)."""

    @property
    def cap(self) -> int: ...

    def share(self, user_id: str, wanted: int, batch: str, now: float | None = None) -> Share: ...


class DailyUse(Protocol):
    """GET /tenant's: the emails a free-plan tenant queued on the UTC day of `now` (chalicelib.stores.daily_cap)."""

    def used(self, user_id: str, now: float | None = None) -> int: ...


@dataclass(frozen=True)
class Limits:
    bounce_rate: float = 0.05
    complaint_rate: float = 0.001
    window_days: int = 7
    min_sent: int = 200  # below this, one bounce is not a rate


@dataclass(frozen=True)
class Window:
    days: int
    sent: int
    bounced: int
    complained: int

    @property
    def bounce_rate(self) -> float:
        return self.bounced / self.sent if self.sent else 0.0

    @property
    def complaint_rate(self) -> float:
        return self.complained / self.sent if self.sent else 0.0


class ReputationCounts(Protocol):
    """The reputation guard's counts: the drainer counts sends ahead of them (chalicelib.send.sent_ahead); SES's
    events count bounces and complaints and read the window against the limits."""

    @property
    def limits(self) -> Limits: ...

    def add(
        self, user_id: str, *, sent: int = 0, bounced: int = 0, complained: int = 0, now: float | None = None
    ) -> None: ...

    def window(self, user_id: str, now: float | None = None) -> Window: ...

    def count_feedback(
        self, user_id: str, campaign_id: str, address: str, kind: str, now: float | None = None
    ) -> bool: ...


@dataclass(frozen=True)
class Coverage:
    """What covers `address` in the platform's SES account."""

    address: str
    own: bool  # an email-address identity of its own, verified for sending
    domain: bool  # its domain's identity verified (read only when `own` is not)

    @property
    def domain_name(self) -> str:
        return self.address.rpartition("@")[2].lower()

    def describe(self) -> str:
        """For an operator: which identity covers it."""
        if self.own:
            return f"its own verified identity {self.address.lower()}"
        if self.domain:
            return f"only the domain identity {self.domain_name}"
        return "no verified identity (neither the address nor its domain)"


class FreeAddressRecords(Protocol):
    """The free plan's From addresses (chalicelib.stores.free_senders.FreeAddresses): claimed by a free tenant
    with its message (precompile, the digests' intake: SenderRefused when another tenant's), and whose one
    is now (GET /tenant, the drainer: None for nobody's)."""

    def claim(self, user_id: str, address: str, now_ms: int) -> None: ...

    def owner(self, address: str) -> str | None: ...


class IdentityCoverage(Protocol):
    """The free addresses' (chalicelib.stores.free_senders): what covers an address in the platform's SES account."""

    def covering(self, address: str) -> Coverage: ...


@dataclass(frozen=True)
class TenantStatus:
    name: str
    sending: str  # ENABLED, REINSTATED or DISABLED (SES's aggregate)
    cause: str | None  # why, when it may not send
    policy: str | None  # the reputation policy's ARN

    @property
    def paused(self) -> bool:
        return self.sending == "DISABLED"

    @property
    def reason(self) -> str:
        """The moonsend tenant's pause reason when SES paused it."""
        return f"SES paused sending for SES tenant {self.name}: {self.cause or 'no cause given'}"


class SesTenantRecords(Protocol):
    """The free tenants' SES tenants in the platform's account (chalicelib.stores.ses_tenants.SesTenants): set up
    for a tenant's sends and forgotten when SES no longer knows it (the delivery), and SES's view of one
    (None: none; the guard, the campaign actions, GET /tenant)."""

    def ensure(self, user_id: str, from_address: str, region: str) -> str: ...

    def forget(self, user_id: str) -> None: ...

    def name_of(self, user_id: str) -> str: ...

    def status(self, user_id: str, region: str, *, max_age_s: float = ...) -> TenantStatus | None: ...
