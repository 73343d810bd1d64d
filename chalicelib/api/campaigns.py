"""/campaigns: the tenant's campaigns read, reported on and controlled (chalicelib.control)."""

from __future__ import annotations

from typing import Any

from chalice import Blueprint

from chalicelib import wiring
from chalicelib.api.edge import Call, Route, blueprint
from chalicelib.api.principal import Role


def list_campaigns(call: Call) -> dict[str, Any]:
    """The tenant's campaigns, newest first, with counts, state and progress (`?state=&limit=&after=`)."""
    return wiring.container().campaign_reads.list_for(call.tenant, call.query)


def show_campaign(call: Call, campaign_id: str) -> dict[str, Any]:
    """One campaign as listed, with its timeline per minute and its busiest second (`?timelineAfter=`), and
    its publication when moonsend sends it from an upload."""
    return wiring.container().campaign_sends.show(call.tenant, campaign_id, call.query)


def send_campaign(call: Call) -> dict[str, Any]:
    """A campaign composed here, sent to an upload's recipients or up to 1,000 given (`Idempotency-Key`)."""
    return wiring.container().campaign_sends.create(call.tenant, call.object_body(), call.idempotency_key)


def test_campaign(call: Call) -> dict[str, Any]:
    """One email of the campaign as composed, to one of the tenant's people (`to`): a campaign of its own."""
    return wiring.container().campaign_sends.test(call.tenant, call.object_body(), call.idempotency_key)


def preview_campaign(call: Call) -> dict[str, Any]:
    """The subject and body rendered for one recipient, as precompile renders them (a template's error shown)."""
    return wiring.container().campaign_sends.preview(call.tenant, call.object_body())


def campaign_report(call: Call, campaign_id: str) -> dict[str, Any]:
    """A campaign's counts."""
    return wiring.container().reports.report_for(call.tenant, campaign_id)


def campaign_recipients(call: Call, campaign_id: str) -> dict[str, Any]:
    """Each recipient's state, reason and times, a page at a time (`?state=&limit=&after=`)."""
    return wiring.container().tenant_api.recipients(call.tenant, campaign_id, call.query)


def pause_campaign(call: Call, campaign_id: str) -> dict[str, Any]:
    """Hold the campaign's unsent email until it is resumed (the tenant's other campaigns go on)."""
    return wiring.container().tenant_api.pause(call.tenant, campaign_id)


def resume_campaign(call: Call, campaign_id: str) -> dict[str, Any]:
    return wiring.container().tenant_api.resume(call.tenant, campaign_id)


def cancel_campaign(call: Call, campaign_id: str) -> dict[str, Any]:
    """Stop the campaign: nothing more goes out; its unsent recipients are recorded cancelled."""
    return wiring.container().tenant_api.cancel(call.tenant, campaign_id)


def retry_failed(call: Call, campaign_id: str) -> dict[str, Any]:
    """Queue the failed recipients again (`{"reasonContains": "..."}` to pick some); each is sent at most once."""
    return wiring.container().tenant_api.retry_failed(call.tenant, campaign_id, call.body())


ROUTES = (
    Route("/campaigns", list_campaigns),
    Route("/campaigns", send_campaign, ("POST",), Role.SENDER, status=201),
    Route("/campaigns/preview", preview_campaign, ("POST",), Role.SENDER),
    Route("/campaigns/test", test_campaign, ("POST",), Role.SENDER, status=201),
    Route("/campaigns/{campaign_id}", show_campaign),
    Route("/campaigns/{campaign_id}/report", campaign_report),
    Route("/campaigns/{campaign_id}/recipients", campaign_recipients),
    Route("/campaigns/{campaign_id}/pause", pause_campaign, ("POST",), Role.SENDER),
    Route("/campaigns/{campaign_id}/resume", resume_campaign, ("POST",), Role.SENDER),
    Route("/campaigns/{campaign_id}/cancel", cancel_campaign, ("POST",), Role.SENDER),
    Route("/campaigns/{campaign_id}/retry-failed", retry_failed, ("POST",), Role.SENDER),
)


def routes() -> Blueprint:
    return blueprint(__name__, ROUTES)
