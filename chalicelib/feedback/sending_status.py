"""SES's word on sending followed: its EventBridge events `Sending Status Disabled` and `Sending Status Enabled`.

SES puts these on the platform account's default event bus when one of its SES tenants' sending status
changes (SES Developer Guide, Tenants, "Setting up EventBridge notifications"): `resources` names the SES
tenant's ARN (`arn:aws:ses:<region>:<account>:tenant/<name>/<id>`) and `detail.data.record` the new status
of one of its two records (`origin` AWS_MANAGED: SES's own; CUSTOMER_MANAGED: the platform's). SES delivers
them best effort and possibly out of order, so an event is a cue and never the word itself: the status acted
on is SES's aggregate, read when the event arrives (GetReputationEntity). A late `Disabled` arriving after
SES enabled the tenant again pauses nothing; a late `Enabled` lifts nothing SES holds again.

- SES says DISABLED: the moonsend tenant is paused with owner SES and SES's cause (its email parked, never
  failed), as when a refused send or the reputation guard finds SES's pause.
- SES says ENABLED or REINSTATED: SES's pause is lifted, and only SES's (pauses have owners: a tenant's,
  an operator's or the guard's stands); once nothing else holds the tenant its parked email goes back on the
  queue and a drain starts. This is the resume an operator's lifting of SES's pause takes.
- Only a free-plan tenant's SES tenant is followed (a paid tenant sends from its own SES account), and
  only in the region its email goes out from. The rule is the stage's, in the stage's region: a free tenant
  sending from another region is not followed there (a refused send or the guard finds SES's pause).
- An event naming no SES tenant of this stage (another stage's, or the account's own status) changes
  nothing and is logged: when SES pauses the whole account the drains stop at SES's first refusal, email
  stays queued, and the sweeper starts them again each minute until SES sends again (docs/operations.md).

A read SES refuses (a throttle) raises, as does parked email SQS did not take back: Lambda retries the
event twice (a retry finds no pause and puts back what is still parked), then keeps it on the on-failure
queue for `moonsend replay-failed`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.core import log
from chalicelib.stores.pauses import SES
from chalicelib.stores.ports.sending import SesTenantRecords
from chalicelib.stores.ports.tenants import TenantRecords
from chalicelib.stores.ses_tenants import tenant_name

SOURCE = "aws.ses"
DISABLED, ENABLED = "Sending Status Disabled", "Sending Status Enabled"
# The rule's pattern on the default event bus (app.py): only these two of SES's events reach the function.
EVENT_PATTERN: dict[str, Any] = {"source": [SOURCE], "detail-type": [DISABLED, ENABLED]}

# What following one event did.
PAUSED, RESUMED, UNCHANGED, IGNORED = "paused", "resumed", "unchanged", "ignored"


class Unreadable(ValueError):
    """Not a sending status event of SES's shape."""


class ParkedLeft(RuntimeError):
    """A resume lifted the pause but SQS did not take all the parked email back: the event is retried."""


@dataclass(frozen=True)
class StatusEvent:
    detail_type: str
    region: str
    tenant: str | None  # the SES tenant's name; None when the event names none (the account's own status)
    origin: str | None  # AWS_MANAGED (SES's) or CUSTOMER_MANAGED (the platform's)
    status: str | None  # what the event says: ENABLED, DISABLED or REINSTATED (a cue; SES is read again)
    cause: str | None


@dataclass(frozen=True)
class Followed:
    what: str  # PAUSED, RESUMED, UNCHANGED or IGNORED
    user_id: str | None
    message: str


def read_event(event: Mapping[str, Any]) -> StatusEvent:
    """The event's parts; Unreadable when it is not SES's sending status event."""
    if event.get("source") != SOURCE or event.get("detail-type") not in (DISABLED, ENABLED):
        raise Unreadable(f"not an SES sending status event: {event.get('source')!r} {event.get('detail-type')!r}")
    region = event.get("region")
    if not isinstance(region, str) or not region:
        raise Unreadable("no region")
    detail = event.get("detail")
    data = detail.get("data") if isinstance(detail, Mapping) else None
    record = data.get("record") if isinstance(data, Mapping) else None
    record = record if isinstance(record, Mapping) else {}
    return StatusEvent(
        str(event["detail-type"]),
        region,
        _tenant_of(event.get("resources")),
        _text(data.get("origin")) if isinstance(data, Mapping) else None,
        _text(record.get("status")),
        _text(record.get("cause")),
    )


def _tenant_of(resources: Any) -> str | None:
    """The SES tenant's name from `arn:aws:ses:<region>:<account>:tenant/<name>/<id>` (None: no tenant named)."""
    for arn in resources if isinstance(resources, list) else []:
        if not isinstance(arn, str) or not arn.startswith("arn:aws:ses:"):
            continue
        parts = arn.split(":", 5)[-1].split("/")
        if len(parts) == 3 and parts[0] == "tenant" and parts[1]:
            return parts[1]
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class SendingStatus:
    def __init__(
        self,
        tenants: TenantRecords,
        ses_tenants: SesTenantRecords,
        resume_ses: Callable[[str], tuple[bool, str]],
        every_tenant: Callable[[], Iterable[str]],
        prefix: str,
        region: str,
    ) -> None:
        self._tenants = tenants
        self._ses_tenants = ses_tenants
        self._resume_ses = resume_ses  # lift SES's pause of a tenant: (whether lifted, what it answered)
        self._every_tenant = every_tenant  # every tenant's id (a scan: for a digest name only)
        self._prefix = prefix
        self._region = region  # the stage's: a tenant's email goes out there unless its Sender names another

    def follow(self, event: Mapping[str, Any]) -> Followed:
        try:
            said = read_event(event)
        except Unreadable as exc:
            return _ignored(None, f"unreadable: {exc}")
        if said.tenant is None:
            return _ignored(None, f"{said.detail_type} names no SES tenant (the account's own status?): {said.cause}")
        user = self._user_of(said.tenant)
        if user is None:
            return _ignored(None, f"SES tenant {said.tenant} is no tenant of this stage")
        tenant = self._tenants.get(user, fresh=True)
        if tenant is None or tenant.plan != "free":
            return _ignored(user, "not a free-plan tenant: it sends from its own SES account")
        region = tenant.sender.region or self._region
        if said.region != region:  # an SES tenant it no longer sends through: SES's status there holds nothing
            return _ignored(user, f"its email goes out in {region}, not {said.region}")
        status = self._ses_tenants.status(user, region, max_age_s=0)
        if status is None:
            return _ignored(user, f"SES has no tenant {said.tenant} in {region}")
        if status.paused:
            if not self._tenants.pause(user, SES, status.reason):
                return Followed(UNCHANGED, user, f"paused by SES already: {status.reason}")
            log.warning("tenant paused: SES's event followed", user=user, reason=status.reason)
            # SES may have enabled the tenant between that read and this pause, and its Enabled event been
            # followed meanwhile (finding no pause to lift): read again, and lift what SES no longer holds.
            again = self._ses_tenants.status(user, region, max_age_s=0)
            if again is not None and not again.paused:
                _lifted, message = self._resume_ses(user)
                return Followed(UNCHANGED, user, f"SES enabled it again meanwhile: {message}")
            return Followed(PAUSED, user, status.reason)
        held_by_ses = any(p.owner == SES for p in tenant.pauses)
        if tenant.pauses and not held_by_ses:
            return Followed(UNCHANGED, user, f"SES says {status.sending}; no pause of SES's stands")
        # With no pause standing the resume is still taken: a try killed after lifting SES's pause and
        # before putting the parked email back is retried, and this retry puts it back.
        lifted, message = self._resume_ses(user)
        log.info("SES's pause lifted: SES's event followed", user=user, lifted=lifted, answer=message)
        return Followed(RESUMED if lifted and held_by_ses else UNCHANGED, user, message)

    def _user_of(self, name: str) -> str | None:
        """The tenant an SES tenant of this stage is (chalicelib.stores.ses_tenants.tenant_name)."""
        head = f"{self._prefix}-"
        if not name.startswith(head):
            return None
        rest = name[len(head) :]
        if not rest.startswith("_"):
            return rest
        # A digest name: ids too long for SES's names, or not of its alphabet. Rare, and SES's status events
        # are rarer: every tenant is looked at.
        return next((u for u in self._every_tenant() if tenant_name(self._prefix, u) == name), None)


def _ignored(user: str | None, why: str) -> Followed:
    log.info("SES sending status event changed nothing", user=user, why=why)
    return Followed(IGNORED, user, why)
