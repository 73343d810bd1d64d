"""What a tenant (or an operator) can do to its campaigns and its sending: one place for CLI and HTTP.

- pause a campaign: its unsent email is parked off the queue as the sender meets it
  (chalicelib.send.parking, chalicelib.queueing.parked_email); its other campaigns go on;
- resume: the pause is lifted, then the parked email goes back on the queue at once and a drain starts;
- cancel: unsent email is recorded `cancelled` (scheduled batches now; queued and parked email by the
  sender as it meets it);
- retry-failed: chalicelib.control.retry;
- pause or resume a whole tenant: its queue is not drained while paused (a free-plan tenant's email is
  parked like a paused campaign's). A tenant may resume only a pause of its own: a pause by the reputation
  guard or an operator is lifted by an operator. Nobody resumes a tenant whose SES tenant SES still has
  paused (its sends would be refused): SES's cause is given instead.
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
from chalicelib.stores.campaign_control import CANCELLED, PAUSED
from chalicelib.stores.ports import CampaignSchedule, ControlSwitch, RescheduleStore
from chalicelib.stores.ses_tenants import SesTenants
from chalicelib.stores.tenant_model import Tenant
from chalicelib.stores.tenants import TenantRegistry

TENANT_PAUSE_PREFIX = "paused by the tenant"


@dataclass(frozen=True)
class Done:
    ok: bool
    message: str
    count: int = 0


class CampaignActions:
    def __init__(
        self,
        settings: Settings,
        control: ControlSwitch,
        releaser: Releaser,
        parked: ParkedEmail,
        retry: RetryFailed,
        tenants: TenantRegistry,
        store: RescheduleStore,
        stats: CampaignSchedule,
        ses_tenants: SesTenants,
    ) -> None:
        self._settings = settings
        self._control = control
        self._releaser = releaser
        self._parked = parked
        self._retry = retry
        self._tenants = tenants
        self._store = store
        self._stats = stats
        self._ses_tenants = ses_tenants

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
        deadline_ms = None
        for b in batches:
            deadline_ms = b.deadline_ms + (due_ms - b.due_ms) if b.deadline_ms is not None else None
            moved = self._store.move(b, due_ms, deadline_ms)
            self._stats.note_schedule(user_id, campaign_id, due_ms, deadline_ms, moved.bucket)
        n = sum(b.count for b in batches)
        return Done(True, f"rescheduled: {n} recipient(s) now due at {iso_ms(due_ms)}", n)

    def pause(self, user_id: str, campaign_id: str) -> Done:
        self._control.set(user_id, campaign_id, PAUSED)
        return Done(True, "paused: its unsent email is parked until resumed")

    def resume(self, user_id: str, campaign_id: str) -> Done:
        if self._control.state(user_id, campaign_id, fresh=True) == CANCELLED:
            return Done(False, "cancelled: a cancelled campaign cannot be resumed")
        self._control.set(user_id, campaign_id, None)  # first: see ParkedEmail.unpark
        n = self._parked.unpark(user_id, campaign_id)
        return Done(True, f"resumed: {n} parked email(s) back on the queue, sent at the tenant's rate", n)

    def cancel(self, user_id: str, campaign_id: str) -> Done:
        self._control.set(user_id, campaign_id, CANCELLED)
        n = self._releaser.cancel_scheduled(user_id, campaign_id)
        # Parked email goes back to the sender, which records it cancelled as it meets it.
        parked = self._parked.unpark(user_id, campaign_id)
        return Done(
            True,
            f"cancelled: {n} scheduled recipient(s) recorded cancelled now; queued and parked email "
            f"({parked} parked) is recorded cancelled as the sender meets it",
            n,
        )

    def retry_failed(self, user_id: str, campaign_id: str, reason_contains: str | None = None) -> RetryResult:
        return self._retry.run(user_id, campaign_id, reason_contains)

    def pause_tenant(self, user_id: str, reason: str, *, by_tenant: bool) -> Done:
        why = f"{TENANT_PAUSE_PREFIX}: {reason}" if by_tenant else f"paused by an operator: {reason}"
        if self._tenants.get(user_id, fresh=True) is None:
            return Done(False, f"no tenant {user_id!r}")
        if not self._tenants.pause(user_id, why):
            return Done(True, "paused already")
        return Done(True, "paused: its email is parked until resumed")

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

    def resume_tenant(self, user_id: str, *, by_tenant: bool) -> Done:
        tenant = self._tenants.get(user_id, fresh=True)
        if tenant is None:
            return Done(False, f"no tenant {user_id!r}")
        if not tenant.paused_reason:
            return Done(True, "not paused")
        if by_tenant and not tenant.paused_reason.startswith(TENANT_PAUSE_PREFIX):
            return Done(False, f"paused by moonsend ({tenant.paused_reason}): ask support to resume")
        held = self._ses_pause(tenant)
        if held:
            return Done(False, f"not resumed: {held}")
        self._tenants.resume(user_id)
        n = self._parked.unpark(user_id)
        return Done(True, f"resumed: parked email goes out within a minute ({n} parked from the free plan's queue)", n)
