"""GET /events: a tenant's recorded events, the objects its webhooks carry, a page at a time, for tenants
that pull rather than receive (as Mailgun's events API).

Oldest first from where the last page stopped (`after`) or from an instant (`since`). The answer's `next`
is always where this page stopped reading: a poller keeps it and asks again later; an empty page means
nothing new yet. `order=newest` reads from the newest back (a person looking at what just happened), `after`
then going on to older ones, and `next` null once the oldest kept was read. Events are kept for the stage's
retention (MOONSEND_EVENTS_RETENTION_DAYS, 30 by default).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from chalicelib.control import params
from chalicelib.control.params import BadParam
from chalicelib.core.fields import is_id
from chalicelib.core.webhook_contract import EVENT_TYPES
from chalicelib.stores.event_log import CURSOR, INSTANT, position_at
from chalicelib.stores.ports.events import EventRecords

MAX_PAGE = 1000
ORDERS = ("oldest", "newest")
LAST_MS = 10**13 - 1  # the log's positions have 13 digits of epoch ms (until the year 2286)
_SINCE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z\Z")


class EventReads:
    def __init__(self, events: EventRecords) -> None:
        self._events = events

    def list_for(self, user: str, query: Mapping[str, str] | None) -> dict[str, Any]:
        """A page of the tenant's events (the API's route and the operator's CLI); BadParam for a query it
        cannot take."""
        kind = params.choice(query, "type", EVENT_TYPES)
        campaign = params.text(query, "campaign")
        if campaign is not None and not is_id(campaign):
            raise BadParam("campaign: not a campaign id")
        limit = params.limit(query, default=100, most=MAX_PAGE)
        newest = params.choice(query, "order", ORDERS) == "newest"
        if newest and params.text(query, "since", max_chars=40) is not None:
            raise BadParam("since: oldest first only (newest first starts from now)")
        after = _start(query)
        page = self._events.page(user, after=after, type=kind, campaign=campaign, limit=limit, newest_first=newest)
        return {"events": page.events, "next": params.encode_cursor(page.next) if page.next else None}


def _start(query: Mapping[str, str] | None) -> str | None:
    """The log's position to read after: a page's `next`, or the instant `since` names."""
    after = params.decode_cursor(query)
    since = params.text(query, "since", max_chars=40)
    if after is not None and since is not None:
        raise BadParam("after, since: give one of them")
    if after is not None and not (CURSOR.match(after) or INSTANT.match(after)):
        raise params.bad_cursor()
    if since is None:
        return after
    if not _SINCE.match(since):
        raise BadParam("since: an instant in UTC, as 2026-11-26T03:00:00Z or 2026-11-26T03:00:00.000Z")
    try:
        at = datetime.strptime(
            since.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z" if "." in since else "%Y-%m-%dT%H:%M:%S%z"
        )
    except ValueError:
        raise BadParam("since: not a date and time that exists") from None
    return position_at(min(max(0, int(at.astimezone(UTC).timestamp() * 1000)), LAST_MS))
