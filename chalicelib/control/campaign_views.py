"""A campaign as the tenant API shows it: its summary, its state and its progress, from its counters item.

Pure: every figure comes from the one item (chalicelib.stores.campaign_stats), so a page of campaigns costs
one read each and no more.

State, in this order: `cancelled` and `paused` are the tenant's decisions (the campaign's control);
`scheduled` waits for its time; `done` has an outcome recorded for every recipient accepted so far;
`sending` is anything else, a campaign whose first recipients are not counted yet among them (for an
hour). Progress is the recipients with an outcome over the recipients accepted so far: producers publish a
campaign's recipients in as many messages as they like, and moonsend cannot know whether more will come, so
`acceptedMayGrow` says so (false only once nothing more can be sent: cancelled, or past its deadline).
"""

from __future__ import annotations

import json
from typing import Any

from chalicelib.core.contract import iso_ms
from chalicelib.stores.campaign_stats import COUNTERS
from chalicelib.stores.ports.campaigns import CampaignCounts

STATES = ("scheduled", "sending", "paused", "done", "cancelled")
# A campaign with no recipient counted yet is starting for this long after its first message, then done with
# none (its producer's messages all failed before they were counted, say): never sending for ever.
STARTING_MS = 3_600_000
_FINAL = ("sent", "failed", "rejected", "suppressed", "cancelled", "expired")


def final_count(c: CampaignCounts) -> int:
    """Recipients with an outcome (sent, failed, rejected, suppressed, cancelled, expired)."""
    return sum(c[name] for name in _FINAL)


def accepted_count(c: CampaignCounts) -> int:
    """Recipients accepted so far: queued at once, scheduled (waiting for their time or released since), or
    refused or suppressed before queueing; never fewer than those with an outcome. A released recipient is
    counted in `queued` as well as in `scheduled`: `released` says how many were."""
    before_queue = c["rejected"] + c["suppressed"]
    if c.counts_releases or c["scheduled"] == 0:
        accepted = c["queued"] - c["released"] + c["scheduled"] + before_queue
    else:  # begun before releases were counted, and not yet counted (`moonsend count-released`): a guess
        accepted = max(c["queued"], c["scheduled"]) + before_queue
    return max(final_count(c), accepted)


def state_of(c: CampaignCounts, now_ms: int) -> str:
    if c.control == "cancelled":
        return "cancelled"
    if c.control == "paused":
        return "paused"
    if accepted_count(c) == 0 and c.created_ms and now_ms - c.created_ms < STARTING_MS:
        return "sending"  # begun (its Sender fixed), its first recipients not yet counted: not done with none
    waiting = final_count(c) < accepted_count(c)  # a campaign whose every recipient was refused waits for nothing
    if c.scheduled_at_ms and c.scheduled_at_ms > now_ms and c["sent"] == 0 and waiting:
        return "scheduled"
    if c["scheduled"] > c["queued"] and waiting and c["sent"] == 0:
        return "scheduled"  # its time has come; the releaser has not put it all on the queue yet
    return "done" if final_count(c) >= accepted_count(c) else "sending"


def _sender(c: CampaignCounts) -> dict[str, Any] | None:
    if not c.sender_snapshot:
        return None
    s = json.loads(c.sender_snapshot)
    return {"emailAddress": s.get("email_address"), "fromName": s.get("from_name"), "region": s.get("region")}


def campaign_json(c: CampaignCounts, now_ms: int) -> dict[str, Any]:
    """The campaign as GET /campaigns lists it."""
    final, accepted = final_count(c), accepted_count(c)
    snapshot = json.loads(c.sender_snapshot) if c.sender_snapshot else {}
    rate = c.achieved_rate
    past_deadline = bool(c.deadline_ms and c.deadline_ms <= now_ms)
    return {
        "id": c.campaign_id,
        "subject": c.subject,
        "plan": snapshot.get("plan"),
        "sender": _sender(c),
        "ratePerSecond": snapshot.get("rate_per_second"),
        "createdAt": iso_ms(c.created_ms) if c.created_ms else None,
        "scheduledAt": iso_ms(c.scheduled_at_ms) if c.scheduled_at_ms else None,
        "state": state_of(c, now_ms),
        "counts": {name: c[name] for name in COUNTERS},
        "progress": {
            "final": final,
            "accepted": accepted,
            "fraction": round(final / accepted, 4) if accepted else None,
            "acceptedMayGrow": c.control != "cancelled" and not past_deadline,
        },
        "achievedRatePerSecond": round(rate, 3) if rate else None,
        "lastError": c.last_error,
    }
