"""The console's campaign pages: the list, one campaign (its progress, rates, chart and recipients), and its
actions (pause, resume, cancel after a confirmation, retry the failed), each as the signed-in role allows.

A page reads through the services the API's routes call (chalicelib.control), with the session's tenant: a
campaign of another tenant is a 404 here as there. `?part=list` and `?part=live` answer only the part of a
page that changes while a campaign sends (the page's script swaps it in every few seconds). An action is a
form with the session's CSRF token, refused by the server to a role that does not reach it, and answered
with a redirect to the campaign's page (a reload never repeats it), which says what was done.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from datetime import datetime
from typing import Any

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers, console_http
from chalicelib.api.console_http import (
    FORMS,
    base_path,
    form,
    page,
    read_notice,
    redirect,
    refused,
    role_refused,
    signed_form,
    signed_notice,
)
from chalicelib.api.principal import Role
from chalicelib.console.charts import MinuteChart, minute_chart
from chalicelib.console.figures import rates
from chalicelib.console.sessions import Session
from chalicelib.control.campaign_reads import STATES
from chalicelib.control.recipient_export import filename_of
from chalicelib.control.tenant_api import TenantApi
from chalicelib.core.errors import Conflict, NotFound, Refused
from chalicelib.stores.ledger_model import STATES as RECIPIENT_STATES

RECIPIENTS_PAGE = 50
LIVE_STATES = ("publishing", "sending", "scheduled")  # while a campaign is in one, its page refreshes its live part
QUIET_S = 180  # a campaign with nothing sent for this long, and none waiting, is followed no more
DONE = {
    "paused": "Paused: its unsent email is held until you resume it. Your other campaigns go on.",
    "resumed": "Resumed: its unsent email goes out again, at your sending rate.",
    "cancelled": "Cancelled: nothing more goes out; its unsent recipients are recorded cancelled.",
}


FOLLOWED = ("state", "address", "after")  # what a refresh asks again: the page's filters, nothing it said


def _refresh_url(request: Request, path: str, part: str) -> str:
    given: dict[str, str] = dict(request.query_params or {})
    query = {k: given[k] for k in FOLLOWED if given.get(k)}
    # `replace`: a parameter no UTF-8 can carry is refused by the page's read; the URL must not crash first.
    return f"{base_path(request)}{path}?{urllib.parse.urlencode({**query, 'part': part}, errors='replace')}"


def _campaign_path(campaign_id: str) -> str:
    return f"/console/campaigns/{urllib.parse.quote(campaign_id, safe='')}"


def _list(request: Request, session: Session) -> Response:
    query = dict(request.query_params or {})
    listed = wiring.container().campaign_reads.list_for(session.tenant_id, query)
    live = any(c["state"] in LIVE_STATES for c in listed["campaigns"])
    return page(
        request,
        "campaigns.html" if query.get("part") != "list" else "_campaign_list.html",
        session=session,
        title="Campaigns",
        active="campaigns",
        campaigns=listed["campaigns"],
        next=listed["next"],
        states=STATES,
        state=query.get("state") if query.get("state") in STATES else None,
        refresh=_refresh_url(request, "/console", "list") if live else None,
    )


def _live(request: Request, session: Session, campaign_id: str) -> dict[str, Any]:
    """What the campaign's live part shows: the campaign as the API shows it, its rates and its chart."""
    shown = wiring.container().campaign_sends.show(session.tenant_id, campaign_id, None)
    timeline = shown["timeline"]
    chart = minute_chart(timeline["minutes"], shown["ratePerSecond"])
    recent = _recent(chart) or _young(shown["createdAt"])
    live = shown["state"] in LIVE_STATES or (shown["progress"]["acceptedMayGrow"] and recent)
    return {
        "campaign": shown,
        "rates": rates(shown["counts"]),
        "chart": chart,
        "following": live,
        "busiest": timeline["busiestSecond"],
        "more_minutes": timeline["next"] is not None,
        "refresh": _refresh_url(request, _campaign_path(campaign_id), "live") if live else None,
    }


def _recent(chart: MinuteChart | None) -> bool:
    """Email went out in the last few minutes. A campaign is `done` whenever every recipient accepted so far
    has an outcome, which a fast drain reaches between two of its producer's messages: its page goes on
    following it, and offers to pause it, until it has been quiet a while."""
    if chart is None or chart.last_sent is None:
        return False
    last = datetime.fromisoformat(chart.last_sent.replace("Z", "+00:00")).timestamp() + 60  # the minute's end
    return time.time() - last < QUIET_S


def _young(created_at: str | None) -> bool:
    """The campaign began in the last few minutes: its first sends may not be on its timeline yet (the
    timeline's write follows the counters'), and a page opened then must offer to pause it all the same."""
    if not created_at:
        return False
    return time.time() - datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp() < QUIET_S


def _recipients(session: Session, campaign_id: str, query: dict[str, str]) -> dict[str, Any]:
    asked = {
        "state": query.get("state", ""),
        "prefix": query.get("address", "").strip(),
        "after": query.get("after", ""),
        "limit": str(RECIPIENTS_PAGE),
    }
    c = wiring.container()
    try:
        listed = c.tenant_api.recipients(session.tenant_id, campaign_id, asked)
    except NotFound:
        if c.uploads.send(session.tenant_id, campaign_id) is None:
            raise
        listed = {"recipients": [], "next": None}  # being published: precompile has recorded none of it yet
    return {
        "recipients": listed["recipients"],
        "next": listed["next"],
        "state": asked["state"] if asked["state"] in RECIPIENT_STATES else "",
        "address": asked["prefix"],
        "states": RECIPIENT_STATES,
        "read_on": bool(asked["state"] or asked["prefix"]) and not listed["recipients"] and listed["next"],
    }


SAID = ("done", "n", "of", "nocopy", "later")  # what an action's redirect says, in this order


def _count(value: str | None) -> int:
    return int(value) if value and value.isascii() and value.isdigit() and len(value) <= 9 else 0


def _done_message(session: Session, campaign_id: str, query: dict[str, str]) -> str | None:
    query = read_notice(session, campaign_id, SAID, query)
    if not query:
        return None
    if query.get("done") != "retried":
        return DONE.get(query.get("done", ""))
    n, of, nocopy, later = (_count(query.get(k)) for k in ("n", "of", "nocopy", "later"))
    said = f"Queued again: {n} of the {of} failed recipients asked for, each sent at most once."
    if nocopy:
        said += f" {nocopy} cannot be retried: no copy of their email was kept."
    if later:
        said += f" {later} could not be queued now: retry again to take them."
    return said


def _campaign(request: Request, session: Session, campaign_id: str) -> Response:
    query = dict(request.query_params or {})
    part = query.get("part")
    if part == "recipients":  # while followed: one ledger page, not the campaign's counters and timeline again
        recipients = _recipients(session, campaign_id, query)
        return page(
            request, "_recipients.html", session=session, **recipients, **_recipient_frame(request, campaign_id)
        )
    live = _live(request, session, campaign_id)
    if part == "live":
        return page(request, "_campaign_live.html", session=session, **live)
    return page(
        request,
        "campaign.html",
        session=session,
        title=live["campaign"]["subject"] or live["campaign"]["id"],
        active="campaigns",
        done=_done_message(session, campaign_id, query),
        can_act=session.role >= Role.SENDER,
        **live,
        **_recipients(session, campaign_id, query),
        **_recipient_frame(request, campaign_id, following=live["following"]),
    )


def _recipient_frame(request: Request, campaign_id: str, *, following: bool = True) -> dict[str, Any]:
    """What the recipients' part needs beside its rows: where it is, and where it refreshes from."""
    refresh = _refresh_url(request, _campaign_path(campaign_id), "recipients") if following else None
    return {"campaign_id": campaign_id, "page_size": RECIPIENTS_PAGE, "recipients_refresh": refresh}


def _act(request: Request, campaign_id: str, doing: str, act: Callable[[str], dict[str, str | int]]) -> Response:
    """An action on a campaign (role SENDER or above): checked, done, answered with a redirect saying so."""

    def done(session: Session, _fields: dict[str, str]) -> Response:
        try:
            said = act(session.tenant_id)
        except NotFound:
            return refused(request, 404, "Not found", "This tenant has no such campaign.", session)
        except Conflict as conflict:
            return refused(request, 409, "Not done", conflict.detail, session)
        except Refused as other:
            return refused(request, answers.status_of(other), "Not done", other.detail, session)
        notice = signed_notice(session, campaign_id, SAID, said)
        return redirect(f"{base_path(request)}{_campaign_path(campaign_id)}?{notice}")

    return signed_form(request, Role.SENDER, doing, done)


# The actions that take nothing but the campaign: the path's verb, what the page then says was done, what the
# refusal to a viewer names, and the service's call.
CONTROLS: dict[str, tuple[str, str, Callable[[TenantApi, str, str], object]]] = {
    "pause": ("paused", "pause campaigns", TenantApi.pause),
    "resume": ("resumed", "resume campaigns", TenantApi.resume),
    "cancel": ("cancelled", "cancel campaigns", TenantApi.cancel),
}


def _control(bp: Blueprint, verb: str, done: str, doing: str, action: Callable[[TenantApi, str, str], object]) -> None:
    def view(campaign_id: str) -> Response:
        def act(tenant: str) -> dict[str, str | int]:
            action(wiring.container().tenant_api, tenant, campaign_id)
            return {"done": done}

        return _act(bp.current_request, campaign_id, doing, act)

    view.__name__ = verb  # Chalice names a route's view by its function
    bp.route(f"/console/campaigns/{{campaign_id}}/{verb}", methods=["POST"], content_types=FORMS)(view)


def routes() -> Blueprint:
    """A fresh blueprint of the campaign pages (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    def signed_in(show: Callable[[Request, Session], Response]) -> Response:
        request = bp.current_request

        def shown(session: Session) -> Response:
            try:
                return show(request, session)
            except NotFound:
                return refused(request, 404, "Not found", "This tenant has no such campaign.", session)
            except Refused as refusal:
                return refused(request, answers.status_of(refusal), "That cannot be shown", refusal.detail, session)

        return console_http.signed_in(request, shown)

    @bp.route("/console", methods=["GET"])
    def campaigns() -> Response:
        return signed_in(_list)

    @bp.route("/console/campaigns/{campaign_id}", methods=["GET"])
    def campaign(campaign_id: str) -> Response:
        return signed_in(lambda request, session: _campaign(request, session, campaign_id))

    @bp.route("/console/campaigns/{campaign_id}/cancel", methods=["GET"])
    def confirm_cancel(campaign_id: str) -> Response:
        def confirm(request: Request, session: Session) -> Response:
            shown = wiring.container().campaign_reads.show_for(session.tenant_id, campaign_id, None)
            refusal = role_refused(request, session, Role.SENDER, "cancel campaigns")
            progress = shown["progress"]
            return refusal or page(
                request,
                "cancel.html",
                session=session,
                title=f"Cancel {shown['subject'] or campaign_id}?",
                active="campaigns",
                campaign=shown,
                unsent=max(0, progress["accepted"] - progress["final"]),
            )

        return signed_in(confirm)

    for verb, (done, doing, action) in CONTROLS.items():
        _control(bp, verb, done, doing, action)

    @bp.route("/console/campaigns/{campaign_id}/export", methods=["POST"], content_types=FORMS)
    def console_export(campaign_id: str) -> Response:
        request = bp.current_request

        def export(session: Session, _fields: dict[str, str]) -> Response:
            try:
                done = wiring.container().recipient_export.export(session.tenant_id, campaign_id)
            except NotFound:
                return refused(request, 404, "Not found", "This tenant has no such campaign.", session)
            except Refused as other:
                return refused(request, answers.status_of(other), "Not exported", other.detail, session)
            shown: dict[str, Any] = {"export": done, "campaign_id": campaign_id, "filename": filename_of(campaign_id)}
            return page(request, "export.html", session=session, title="Export ready", active="campaigns", **shown)

        # A page with the link, not a redirect to it: the console's `form-action 'self'` holds on redirects.
        return signed_form(request, Role.VIEWER, "export recipients", export)

    @bp.route("/console/campaigns/{campaign_id}/retry-failed", methods=["POST"], content_types=FORMS)
    def retry_failed(campaign_id: str) -> Response:
        request = bp.current_request
        needle = form(request).get("reasonContains", "").strip()

        def act(tenant: str) -> dict[str, str | int]:
            done = wiring.container().tenant_api.retry_failed(tenant, campaign_id, {"reasonContains": needle or None})
            return {
                "done": "retried",
                "n": int(done.get("requeued", 0)),
                "of": int(done.get("matched", 0)),
                "nocopy": int(done.get("noCopyKept", 0)),
                "later": int(done.get("notQueued", 0)),
            }

        return _act(request, campaign_id, "retry failed recipients", act)

    return bp
