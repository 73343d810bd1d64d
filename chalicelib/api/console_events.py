"""The console's events page: what the tenant's webhooks carry, as `GET /events` answers it, newest first
(or oldest first, and from an instant), filtered by type and campaign, a page at a time (its `next` is where
the page stopped: "Older events" or "Later events" reads on). Every field is shown as text.
"""

from __future__ import annotations

import urllib.parse

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.console_http import base_path, page, refused, signed_in
from chalicelib.console.sessions import Session
from chalicelib.core.errors import Refused
from chalicelib.core.webhook_contract import EVENT_TYPES

PAGE = 50
ASKED = ("type", "campaign", "since", "order", "after")  # what the page's filters and paging carry
SHOWN = ("id", "type", "timestamp", "campaignId", "recipient")  # each event's columns; the rest are details


def _events_page(request: Request, session: Session) -> Response:
    given: dict[str, str] = dict(request.query_params or {})
    query = {k: given[k] for k in ASKED if given.get(k)}
    # A person looks at what just happened: newest first, unless they ask from an instant on.
    query.setdefault("order", "oldest" if query.get("since") else "newest")
    try:
        listed = wiring.container().event_reads.list_for(session.tenant_id, {**query, "limit": str(PAGE)})
    except Refused as why:
        return refused(request, answers.status_of(why), "That cannot be shown", why.detail, session)
    events = [{**e, "details": sorted((k, str(v)) for k, v in e.items() if k not in SHOWN)} for e in listed["events"]]
    filters: dict[str, str] = {k: query[k] for k in ("type", "campaign", "since", "order") if k in query}
    later = None
    if listed["next"]:
        onward: dict[str, str] = {**filters, "after": str(listed["next"])}
        later = f"{base_path(request)}/console/events?{urllib.parse.urlencode(onward)}"
    return page(
        request,
        "events.html",
        session=session,
        title="Events",
        active="events",
        events=events,
        types=EVENT_TYPES,
        asked=filters,
        later=later,
        read_on=bool(query.get("after")),
    )


def routes() -> Blueprint:
    """A fresh blueprint of the events page (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/console/events", methods=["GET"])
    def events() -> Response:
        request = bp.current_request
        return signed_in(request, lambda session: _events_page(request, session))

    return bp
