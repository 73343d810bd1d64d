"""What a tenant (or an operator) can do to its campaigns and its sending: one place for CLI and HTTP.

- pause a campaign: its unsent email is parked off the queue as the drainer meets it
  (chalicelib.send.parking, chalicelib.queueing.parked_email); its other campaigns go on;
- resume: the pause is lifted, then the parked email goes back on the queue at once and a drain starts;
- cancel: unsent email is recorded `cancelled` (scheduled batches now; queued and parked email by the
  sender as it meets it);
- retry-failed: chalicelib.control.retry;
- pause or resume a whole tenant: its queue is not drained while any pause stands (a free-plan tenant's
  email is parked like a paused campaign's). Each pause has an owner (chalicelib.stores.pauses): the
  tenant lifts only its own, and hears whose pauses still hold its email; an operator lifts one owner's or
  all. Nobody lifts SES's pause of a tenant whose SES tenant SES still has paused (its sends would be
  refused): SES's cause is given instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from chalicelib.control.retry import RetryFailed, RetryResult
from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import iso_ms
from chalicelib.jobs.releaser import Releaser
from chalicelib.queueing.parked_email import ParkedEmail
from chalicelib.stores.pauses import OPERATOR, OWNER_NAMES, OWNERS, SES, TENANT, Pause, held_by
from chalicelib.stores.ports.campaigns import CampaignSchedule, ControlSwitch
from chalicelib.stores.ports.schedule import ReleaseStore, StoredBatch
from chalicelib.stores.ports.sending import SesTenantRecords
from chalicelib.stores.ports.tenants import Tenant, TenantRecords
from chalicelib.stores.schedule import BatchMoved, minute_of

TENANT_PAUSE_PREFIX = "paused by the tenant"
# A reschedule that finds its campaign's batches moved by another request reads them again (this many more
# times than its batches).
MOVE_TRIES = 3
# Cancel is final (chalicelib.stores.campaign_control): a cancelled campaign is neither paused nor resumed.
FINAL = "cancelled: a cancelled campaign cannot be paused or resumed (cancel is final)"


@dataclass(frozen=True)
class Done:
    ok: bool
    message: str
    count: int = 0
    pauses: tuple[Pause, ...] = ()  # a tenant's pauses standing after the action (chalicelib.stores.pauses)


@dataclass(frozen=True)
class Rescheduling:
    """A campaign's stored batches and the schedule-store minutes that hold them (kept beside its counters)."""

    batches: ReleaseStore
    minutes: CampaignSchedule


@dataclass(frozen=True)
class TenantPausing:
    """A tenant's pauses, each by its owner, and SES's status of its SES tenant (a resume SES would refuse)."""

    tenants: TenantRecords
    ses_tenants: SesTenantRecords


class CampaignActions:
    def __init__(
        self,
        settings: Settings,
        control: ControlSwitch,
        releaser: Releaser,
        parked: ParkedEmail,
        retry: RetryFailed,
        pausing: TenantPausing,
        rescheduling: Rescheduling,
    ) -> None:
        self._settings = settings
        self._control = control
        self._releaser = releaser
        self._parked = parked
        self._retry = retry
        self._tenants = pausing.tenants
        self._ses_tenants = pausing.ses_tenants
        self._store = rescheduling.batches
        self._stats = rescheduling.minutes

    def reschedule(self, user_id: str, campaign_id: str, at_s: float) -> Done:
        """Move a scheduled campaign's waiting email to another time (its deadline moves with it)."""
        now = time.time()
        lead = self._settings.schedule_lead_s
        if at_s < now + 2 * lead:
            return Done(False, f"choose a time at least {2 * lead:g} s from now")
        buckets = self._stats.schedule_buckets(user_id, campaign_id)
        batches = self._store.of_campaign(user_id, campaign_id, buckets)
        if not batches:
            return Done(
                False, "nothing of this campaign is waiting for its time (released already, or never scheduled)"
            )
        if min(b.due_ms for b in batches) <= (now + 2 * lead) * 1000:
            return Done(False, "too late: the campaign is about to start")
        due_ms = int(at_s * 1000)
        # Each try that finds a batch moved by another request leaves one more batch moved: enough tries for
        # every batch to have been taken once by the other.
        for _ in range(2 * len(batches) + MOVE_TRIES):
            try:
                n = self._move_all(user_id, campaign_id, batches, due_ms)
                return Done(True, f"rescheduled: {n} recipient(s) now due at {iso_ms(due_ms)}", n)
            except BatchMoved:  # another reschedule (a double click, a client's retry) moved one meanwhile
                buckets = self._stats.schedule_buckets(user_id, campaign_id)
                batches = self._store.of_campaign(user_id, campaign_id, buckets)
        return Done(False, "the campaign is being rescheduled by another request at the same time: try again")

    def _move_all(self, user_id: str, campaign_id: str, batches: list[StoredBatch], due_ms: int) -> int:
        """Each batch moved to `due_ms` (one that is there already stays: a retried request's); how many
        recipients they hold. BatchMoved when another move took one between its read and this move."""
        for b in batches:
            if b.due_ms == due_ms:
                continue
            deadline_ms = b.deadline_ms + (due_ms - b.due_ms) if b.deadline_ms is not None else None
            # Noted first: a request that reads the campaign's batches meanwhile finds the new minute too.
            self._stats.note_schedule(user_id, campaign_id, due_ms, deadline_ms, minute_of(due_ms))
            self._store.move(b, due_ms, deadline_ms)
        return sum(b.count for b in batches)

    def pause(self, user_id: str, campaign_id: str) -> Done:
        if not self._control.pause(user_id, campaign_id):
            return Done(False, FINAL)
        return Done(True, "paused: its unsent email is parked until resumed")

    def resume(self, user_id: str, campaign_id: str) -> Done:
        if not self._control.resume(user_id, campaign_id):  # first: see ParkedEmail.unpark
            return Done(False, FINAL)
        n = self._parked.unpark(user_id, campaign_id)
        return Done(True, f"resumed: {n} parked email(s) back on the queue, sent at the tenant's rate", n)

    def cancel(self, user_id: str, campaign_id: str) -> Done:
        self._control.cancel(user_id, campaign_id)
        n = self._releaser.cancel_scheduled(user_id, campaign_id)
        # Parked email goes back to the drainer, which records it cancelled as it meets it.
        parked = self._parked.unpark(user_id, campaign_id)
        return Done(
            True,
            f"cancelled: {n} scheduled recipient(s) recorded cancelled now; queued and parked email "
            f"({parked} parked) is recorded cancelled as the sender meets it",
            n,
        )

    def retry_failed(self, user_id: str, campaign_id: str, reason_contains: str | None = None) -> RetryResult:
        return self._retry.run(user_id, campaign_id, reason_contains)

    def pause_tenant(self, user_id: str, reason: str, *, by_tenant: bool, owner: str | None = None) -> Done:
        """The tenant's own pause (`by_tenant`), or an operator's: its own by default, or the tenant's at its
        request (`owner`). Another owner's pause standing already changes nothing of this one."""
        owner = TENANT if by_tenant else owner or OPERATOR
        if owner not in (TENANT, OPERATOR):
            return Done(False, f"an operator pauses as the tenant or as an operator, not as {OWNER_NAMES[owner]}")
        why = f"{TENANT_PAUSE_PREFIX}: {reason}" if owner == TENANT else f"paused by an operator: {reason}"
        if self._tenants.get(user_id, fresh=True) is None:
            return Done(False, f"no tenant {user_id!r}")
        paused = self._tenants.pause(user_id, owner, why)
        held = self._pauses(user_id)
        if not paused:
            return Done(True, f"paused already by {OWNER_NAMES[owner]}{_also(held, owner)}", pauses=held)
        return Done(True, f"paused: its email is parked until resumed{_also(held, owner)}", pauses=held)

    def _ses_pause(self, tenant: Tenant) -> str | None:
        """Why SES keeps a free-plan tenant's SES tenant paused, if it does (a paid tenant sends from its own
        account, and a status SES cannot give now does not hold a resume: a refused send pauses it again)."""
        if tenant.plan != "free":
            return None
        region = tenant.sender.region or self._settings.region
        try:
            status = self._ses_tenants.status(tenant.user_id, region, max_age_s=0)
        except Exception as exc:
            log.warning("SES tenant status unknown at resume", user=tenant.user_id, error=type(exc).__name__)
            return None
        return status.reason if status is not None and status.paused else None

    def resume_tenant(self, user_id: str, *, by_tenant: bool, owner: str | None = None) -> Done:
        """Lift the tenant's own pause (`by_tenant`), or as an operator one owner's pause (`owner`) or all.

        The tenant stays paused while another owner's pause stands, and the answer says whose. SES's pause
        is lifted only once SES has lifted its own; SES's status is read when its pause would be lifted or
        nothing else would hold the tenant (a pause SES set without us knowing is then recorded as SES's)."""
        tenant = self._tenants.get(user_id, fresh=True)
        if tenant is None:
            return Done(False, f"no tenant {user_id!r}")
        if not tenant.pauses:
            # A resume killed between its lift and its unparking is repeated: what it parked goes back now.
            n = self._parked.unpark(user_id)
            return Done(True, f"not paused ({n} parked email put back)" if n else "not paused", n)
        owners = {TENANT} if by_tenant else set(OWNERS) if owner is None else {owner}
        lifting = [p for p in tenant.pauses if p.owner in owners]
        if not lifting:
            return _not_paused_by(tenant.pauses, by_tenant, owner)
        ses_held = None
        if any(p.owner == SES for p in lifting) or len(lifting) == len(tenant.pauses):
            ses_held = self._ses_pause(tenant)
        if ses_held:
            owners.discard(SES)
            self._tenants.pause(user_id, SES, ses_held)
        lifted = self._tenants.resume(user_id, owners) if owners else ()
        held = self._pauses(user_id)
        if not held:
            n = self._parked.unpark(user_id)
            return Done(
                True, f"resumed: parked email goes out within a minute ({n} parked from the free plan's queue)", n
            )
        if ses_held and not by_tenant and (owner is None or owner == SES):
            return Done(False, f"not resumed: {ses_held}{_lifted(lifted)}", pauses=held)
        if by_tenant:
            why = f"your pause is lifted, but your email stays held: paused by {held_by(held)}; ask support to resume"
        else:
            why = f"{_names(lifted)} pause lifted, but its email stays held: paused by {held_by(held)}"
        return Done(True, why, pauses=held)

    def _pauses(self, user_id: str) -> tuple[Pause, ...]:
        tenant = self._tenants.get(user_id, fresh=True)
        return tenant.pauses if tenant else ()


def _not_paused_by(held: tuple[Pause, ...], by_tenant: bool, owner: str | None) -> Done:
    if by_tenant:
        return Done(
            False,
            f"not paused by you: your email is held, paused by {held_by(held)}; ask support to resume",
            pauses=held,
        )
    name = OWNER_NAMES.get(owner or "", owner)
    return Done(True, f"not paused by {name}; its email stays held: paused by {held_by(held)}", pauses=held)


def _also(held: tuple[Pause, ...], owner: str) -> str:
    others = [p for p in held if p.owner != owner]
    return f" (also paused by {held_by(others)})" if others else ""


def _names(lifted: tuple[Pause, ...]) -> str:
    """`the reputation guard's and the tenant's`"""
    return " and ".join(f"{OWNER_NAMES[p.owner]}'s" for p in lifted) or "no"


def _lifted(lifted: tuple[Pause, ...]) -> str:
    return f" ({_names(lifted)} pause lifted)" if lifted else ""
