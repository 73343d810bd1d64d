"""What the operator's pages say, as data for their templates: the overview's totals and chart, and what a
confirmation page asks before an action (infra.ops.app renders them)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from chalicelib.console.charts import minute_chart
from infra.ops.overview import Overview

MAX_FIELD = 254


def overview_context(o: Overview) -> dict[str, Any]:
    """The page's figures: the totals over every tenant (the Reader's), the dead letters, the chart."""
    queues = [t.queue for t in o.tenants if t.queue is not None] + ([o.free_queue] if o.free_queue else [])
    shown = {
        "tenants": len(o.tenants) + o.tenants_not_shown,
        "paused": sum(1 for t in o.tenants if t.pauses),
        "holding": sum(1 for q in queues if q.held),
        "drains": sum(q.drains for q in queues),
    }
    totals = {**shown, **o.totals}
    minutes = [
        {"minute": datetime.fromtimestamp(m, UTC).strftime("%Y-%m-%dT%H:%M:00Z"), "sent": n}
        for m, n in o.sends_per_minute
    ]
    return {
        "o": o,
        "totals": totals,
        "dead": sum(q.held for q in o.dead_letters),
        "last_minute": o.sends_per_minute[-2][1] if len(o.sends_per_minute) > 1 else 0,  # the last whole one
        "last_hour": sum(n for _, n in o.sends_per_minute),
        "chart": minute_chart(minutes, None),
    }


def confirmation(q: dict[str, str], actions: Any) -> dict[str, Any] | None:
    """What the confirmation page of `q["action"]` says, and the fields its form carries; None when the
    request names no action, or not what the action needs."""
    action = q.get("action", "")
    tenant, campaign, address = (q.get(k, "")[:MAX_FIELD] for k in ("tenant", "campaign", "address"))
    if action == "pause" and tenant:
        return _shown(
            action,
            f"Pause {tenant}?",
            "Its email is parked off its queue until the pause is lifted; a campaign in flight stops within "
            "two seconds. An operator's pause is lifted only by an operator.",
            "Pause it",
            tenant=tenant,
        )
    if action == "resume" and tenant:
        pauses = actions.pauses_of(tenant)
        if pauses is None:
            return _shown(action, f"No tenant {tenant}", "There is nothing to resume.", "Try anyway", tenant=tenant)
        return {
            **_shown(
                action,
                f"Resume {tenant}?",
                "Its parked email goes back on its queue and out at its rate. SES's own pause is lifted only once "
                "SES has lifted it.",
                "Resume it",
                tenant=tenant,
            ),
            "pauses": pauses,
        }
    if action == "cancel" and tenant and campaign:
        return _shown(
            action,
            f"Cancel {tenant}'s campaign {campaign}?",
            "Nothing of it that has not gone yet will go: every recipient not sent is recorded cancelled. A cancel "
            "cannot be undone.",
            "Cancel the campaign",
            tenant=tenant,
            campaign=campaign,
        )
    if action == "replay":
        return _shown(
            action,
            "Replay the failed invocations?",
            "Each asynchronous event Lambda gave up on is invoked again, once. Each recipient is still sent at "
            "most once (the ledger), however often an event is replayed.",
            "Replay them",
        )
    if action == "assign-from" and tenant and address:
        return _shown(
            action,
            f"Give {address} to {tenant}?",
            "The address becomes this free-plan tenant's From address, whoever had it; any other tenant's email "
            "from it is refused from now on.",
            "Assign it",
            tenant=tenant,
            address=address,
        )
    return None


def _shown(action: str, question: str, consequence: str, verb: str, **fixed: str) -> dict[str, Any]:
    return {
        "action": action,
        "question": question,
        "consequence": consequence,
        "verb": verb,
        "fixed": fixed,
        "pauses": (),
    }
