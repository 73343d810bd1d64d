"""The tenant API's answers as an operator reads them: Rich tables of campaigns, a campaign's timeline, a
suppression list, events and a tenant's standing (`moonsend campaign list|show`, `suppression list`,
`events`, `tenant show`).

Each takes the JSON body the API answers (chalicelib.control: the same objects, built by the same code),
so the terminal shows what a tenant's client reads. Every value a tenant or a recipient wrote (subjects,
addresses, reasons, errors) goes through infra.terminal's `cell`: shown, never obeyed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from infra.terminal import cell

TIMELINE_KINDS = ("sent", "delivered", "bounced", "complained", "opened", "clicked")


def when(iso: object) -> str:
    """An API instant (`2026-11-22T14:05:00.000Z`) to the second, or `-`."""
    if not isinstance(iso, str) or len(iso) < 19:
        return "-"
    return f"{iso[:10]} {iso[11:19]}Z"


def _number(value: object, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


def _percent(fraction: object) -> str:
    return f"{fraction * 100:.1f}%" if isinstance(fraction, int | float) else "-"


def campaigns_table(campaigns: Sequence[Mapping[str, Any]]) -> Table:
    """One row a campaign: id, state, subject, created, sent/accepted, progress, rate achieved (asked)."""
    t = Table(title="campaigns, newest first")
    for name in ("id", "state", "subject", "created", "sent/accepted", "progress", "rate/s (asked)"):
        t.add_column(name, justify="right" if name in ("sent/accepted", "progress") else "left")
    for c in campaigns:
        progress = c.get("progress") or {}
        grows = "+" if progress.get("acceptedMayGrow") and c.get("state") != "done" else ""
        rate = f"{_number(c.get('achievedRatePerSecond'))} ({_number(c.get('ratePerSecond'), 0)})"
        t.add_row(
            cell(c.get("id")),
            cell(c.get("state")),
            cell(c.get("subject") or "-"),
            when(c.get("createdAt")),
            f"{c.get('counts', {}).get('sent', 0)}/{progress.get('accepted', 0)}{grows}",
            _percent(progress.get("fraction")),
            rate,
        )
    return t


def campaign_summary(c: Mapping[str, Any]) -> Table:
    """The campaign as listed, one field a line, with every count."""
    t = Table(show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    sender = c.get("sender") or {}
    shown_sender = f"{sender.get('fromName') or ''} <{sender.get('emailAddress')}>" if sender else "-"
    progress = c.get("progress") or {}
    may_grow = " (producers may still add recipients)" if progress.get("acceptedMayGrow") else ""
    rows: list[tuple[str, RenderableType]] = [
        ("campaign", cell(c.get("id"))),
        ("state", cell(c.get("state"))),
        ("subject", cell(c.get("subject") or "-")),
        ("plan", cell(c.get("plan") or "-")),
        ("sender", cell(shown_sender)),
        ("region", cell(sender.get("region") or "-")),
        ("created", Text(when(c.get("createdAt")))),
        ("scheduled", Text(when(c.get("scheduledAt")))),
        (
            "progress",
            Text(
                f"{progress.get('final', 0)} of {progress.get('accepted', 0)} with an outcome "
                f"({_percent(progress.get('fraction'))}){may_grow}"
            ),
        ),
        (
            "rate/s",
            Text(f"{_number(c.get('achievedRatePerSecond'))} achieved, {_number(c.get('ratePerSecond'), 0)} asked"),
        ),
        ("counts", Text(", ".join(f"{k} {v}" for k, v in (c.get("counts") or {}).items() if v) or "none yet")),
    ]
    if c.get("lastError"):
        rows.append(("last error", cell(c["lastError"])))
    for name, value in rows:
        t.add_row(name, value)
    return t


def timeline_table(timeline: Mapping[str, Any]) -> Table:
    """The minutes with any count, oldest first, one row each (minutes with nothing are not stored)."""
    minutes = timeline.get("minutes") or []
    t = Table(title=f"timeline per minute (UTC): {len(minutes)} minute(s) with counts")
    t.add_column("minute")
    for kind in TIMELINE_KINDS:
        t.add_column(kind, justify="right")
    for m in minutes:
        t.add_row(when(m.get("minute"))[:-4] + "Z", *(str(m.get(k, 0)) for k in TIMELINE_KINDS))
    return t


def campaign_view(body: Mapping[str, Any]) -> Group:
    timeline = body.get("timeline") or {}
    busiest = timeline.get("busiestSecond")
    said = (
        f"busiest second: {busiest.get('sent')} sent at {when(busiest.get('at'))}" if busiest else "busiest second: -"
    )
    return Group(campaign_summary(body), timeline_table(timeline), Text(said))


def suppressions_table(entries: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="suppression list, by address")
    for name in ("email", "reason", "scope", "since", "detail"):
        t.add_column(name)
    for e in entries:
        t.add_row(
            cell(e.get("email")),
            cell(e.get("reason")),
            cell(e.get("scope")),
            when(e.get("createdAt")),
            cell(e.get("detail") or ""),
        )
    return t


def events_table(events: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="events, oldest first")
    for name in ("timestamp", "type", "campaign", "recipient", "reason / detail", "id"):
        t.add_column(name)
    for e in events:
        why = " ".join(str(e[k]) for k in ("reason", "detail") if e.get(k))
        t.add_row(
            when(e.get("timestamp")),
            cell(e.get("type")),
            cell(e.get("campaignId")),
            cell(e.get("recipient")),
            cell(why),
            cell(e.get("id")),
        )
    return t


def tenant_view(body: Mapping[str, Any]) -> Table:
    """GET /tenant's answer: plan, rate, From addresses, pauses and who lifts them, SES status, daily cap."""
    t = Table(show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    sender = body.get("sender") or {}
    t.add_row("tenant", cell(body.get("id")))
    t.add_row("plan", cell(body.get("plan") or "- (no message yet)"))
    t.add_row("rate/s", Text(_number(body.get("ratePerSecond"), 0)))
    t.add_row("sender", cell(f"{sender.get('fromName') or ''} <{sender.get('emailAddress')}>" if sender else "-"))
    t.add_row("from addresses", cell(", ".join(body.get("fromAddresses") or []) or "-"))
    pauses = body.get("pauses") or []
    t.add_row("paused", Text("yes" if body.get("paused") else "no"))
    for p in pauses:
        t.add_row(
            "  pause",
            cell(f"by {p.get('by')} since {when(p.get('since'))}: {p.get('reason')} (lifted by {p.get('liftedBy')})"),
        )
    ses = body.get("ses")
    if ses:
        cause = f" ({ses['cause']})" if ses.get("cause") else ""
        t.add_row("SES tenant", cell(f"{ses.get('tenant')}: {ses.get('sending')}{cause}"))
    cap = body.get("dailyCap")
    if cap:
        t.add_row(
            "daily cap", Text(f"{cap.get('usedToday')} of {cap.get('limit')} used; resets {when(cap.get('resetsAt'))}")
        )
    return t
