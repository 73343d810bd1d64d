"""What `moonsend status` shows: per-tenant queue depth and per-campaign counts."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from chalicelib.core.config import Settings
from chalicelib.core.queue_listing import queue_urls
from chalicelib.stores.campaign_stats import CampaignStats
from chalicelib.stores.pauses import LIFTED_BY, OWNER_NAMES, Pause
from chalicelib.stores.ports.campaigns import CampaignCounts
from chalicelib.stores.tenant_secrets import TenantSecrets
from chalicelib.stores.tenants import TenantRegistry
from infra.terminal import cell, plain


@dataclass(frozen=True)
class QueueDepth:
    name: str
    visible: int
    in_flight: int
    delayed: int


@dataclass(frozen=True)
class Snapshot:
    queues: list[QueueDepth]
    campaigns: list[CampaignCounts]
    paused: list[tuple[str, Pause]] = field(default_factory=list)  # (tenant, one of its pauses)


def queue_depths(settings: Settings, sqs: Any) -> list[QueueDepth]:
    """Every queue of this stage, with its counts."""
    r = settings.resources
    queues: list[QueueDepth] = []
    for url in queue_urls(sqs, r.prefix):
        name = url.rsplit("/", 1)[-1]
        a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        queues.append(
            QueueDepth(
                name,
                int(a["ApproximateNumberOfMessages"]),
                int(a["ApproximateNumberOfMessagesNotVisible"]),
                int(a["ApproximateNumberOfMessagesDelayed"]),
            )
        )
    return queues


def snapshot(settings: Settings, sqs: Any, user: str | None = None) -> Snapshot:
    r = settings.resources
    queues = queue_depths(settings, sqs)
    stats = CampaignStats(r.campaigns_table.name, settings.region)
    campaigns = [c for c in stats.all() if user is None or c.user_id == user]
    campaigns.sort(key=lambda c: (c.user_id, c.campaign_id))
    secrets = TenantSecrets.of(r.tenant_secrets_alias, settings.region)  # never used: pauses only
    paused = TenantRegistry(r.tenants_table.name, settings.region, secrets).pauses()
    rows = [(u, p) for u, pauses in paused for p in pauses if user is None or u == user]
    return Snapshot(sorted(queues, key=lambda q: q.name), campaigns, sorted(rows, key=lambda r: r[0]))


def paused_table(s: Snapshot) -> Table:
    """Every pause of every paused tenant: its email is held while any stands (each lifted by its owner)."""
    t = Table(
        title="Paused tenants (their email is parked while any pause stands: `moonsend tenant resume --user ...`)"
    )
    for column in ("tenant", "paused by", "since", "why", "lifted by"):
        t.add_column(column)
    for user, p in s.paused:
        since = time.strftime("%Y-%m-%d %H:%M", time.gmtime(p.at_ms / 1000)) if p.at_ms else ""
        t.add_row(cell(user), OWNER_NAMES[p.owner], since, cell(p.reason), LIFTED_BY[p.owner])
    return t


def done_count(c: CampaignCounts) -> int:
    return c["sent"] + c["failed"] + c["rejected"] + c["suppressed"] + c["cancelled"] + c["expired"]


def total_count(c: CampaignCounts) -> int:
    # Released scheduled email counts as queued too; expired or cancelled ones may never have been queued.
    return max(done_count(c), c["queued"] + c["rejected"], c["scheduled"] + c["rejected"])


def campaign_state(c: CampaignCounts) -> str:
    """paused / cancelled / `at <time>` while it waits for its time / blank."""
    if c.control:
        return c.control
    if c.scheduled_at_ms and c.scheduled_at_ms > time.time() * 1000:
        return "at " + time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(c.scheduled_at_ms / 1000))
    return ""


def queue_table(s: Snapshot) -> Table:
    t = Table(title="Queues")
    for col in ("queue", "visible", "in flight", "delayed"):
        t.add_column(col, justify="left" if col == "queue" else "right")
    for q in s.queues:
        t.add_row(cell(q.name), str(q.visible), str(q.in_flight), str(q.delayed))
    failed = next((q for q in s.queues if q.name.endswith("-failed-invocations")), None)
    if failed is not None and failed.visible + failed.in_flight:
        t.caption = (
            f"{failed.visible + failed.in_flight} failed invocation(s): `moonsend replay-failed` runs them again"
        )
    return t


def campaign_table(s: Snapshot) -> Table:
    t = Table(title="Campaigns")
    cols = (
        "tenant",
        "campaign",
        "state",
        "scheduled",
        "queued",
        "sent",
        "failed",
        "cancelled",
        "expired",
        "rejected",
        "suppressed",
        "delivered",
        "bounced",
        "complained",
        "unsubscribed",
        "opened",
        "clicked",
        "machines' opens",
        "machines' clicks",
        "rate/s",
        "last error",
    )
    for col in cols:
        t.add_column(col, justify="right" if col not in ("tenant", "campaign", "state", "last error") else "left")
    for c in s.campaigns:
        rate = c.achieved_rate
        t.add_row(
            cell(c.user_id),
            cell(c.campaign_id),
            cell(campaign_state(c)),
            str(c["scheduled"]),
            str(c["queued"]),
            str(c["sent"]),
            str(c["failed"]),
            str(c["cancelled"]),
            str(c["expired"]),
            str(c["rejected"]),
            str(c["suppressed"]),
            str(c["delivered"]),
            str(c["bounced"]),
            str(c["complained"]),
            str(c["unsubscribed"]),
            str(c["opened"]),
            str(c["clicked"]),
            str(c["machine_opened"]),
            str(c["machine_clicked"]),
            f"{rate:.1f}" if rate else "-",
            cell((c.last_error or "")[:60]),
        )
    return t


def progress_view(s: Snapshot) -> Progress:
    p = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        auto_refresh=False,
    )
    for c in s.campaigns:
        p.add_task(plain(f"{c.user_id}/{c.campaign_id}"), total=max(1, total_count(c)), completed=done_count(c))
    return p


def outbox_summary(outbox: Path) -> dict[str, dict[str, Any]]:
    """Per tenant, from sends.jsonl: emails sent, unique recipients, achieved rate, busiest second."""
    sends = outbox / "sends.jsonl"
    per_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if sends.exists():
        for line in sends.read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                per_user[d["userId"]].append(d)
    out: dict[str, dict[str, Any]] = {}
    for user, rows in per_user.items():
        ts = sorted(r["ts"] for r in rows)
        span = (ts[-1] - ts[0]) / 1000.0 if len(ts) > 1 else 0.0
        out[user] = {
            "emails": len(rows),
            "unique": len({(r["campaignId"], str(r["to"]).lower()) for r in rows}),
            "rate": (len(ts) - 1) / span if span > 0 else None,
            "max_per_second": max_in_window(ts, 1000),
        }
    return out


def max_in_window(ts_ms: list[int], window_ms: int) -> int:
    """The largest number of timestamps in any half-open window [t, t + window_ms)."""
    best, lo = 0, 0
    for hi in range(len(ts_ms)):
        while ts_ms[hi] - ts_ms[lo] >= window_ms:
            lo += 1
        best = max(best, hi - lo + 1)
    return best
