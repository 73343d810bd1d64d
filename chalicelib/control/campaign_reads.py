"""GET /campaigns and GET /campaigns/{id}: a tenant's campaigns, newest first, and one with its timeline.

A page of the list is one query of the campaigns table's keys-only index (newest first) and one batch read
of the items it names; a filter by state reads on, page after page, up to MAX_READ campaigns, and answers
what it found with a cursor to go on from. A campaign's timeline is one query of its minutes (at most a
day's 1,440 an answer, oldest first, with a cursor for the rest); its busiest second is on its item.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.control import params
from chalicelib.control.campaign_views import STATES, campaign_json, state_of
from chalicelib.core.contract import iso_ms
from chalicelib.core.errors import NotFound
from chalicelib.core.fields import is_id
from chalicelib.stores.ports.campaigns import CampaignPages, TimelineReads
from chalicelib.stores.timeline import KINDS

MAX_PAGE = 200
DEFAULT_PAGE = 50
MAX_READ = 1000  # campaigns one filtered list answer reads at most
TIMELINE_MINUTES = 1440
_MINUTE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}\Z")
_POSITION = re.compile(r"^([0-9]{1,15}):(.+)$", re.DOTALL)


class CampaignReads:
    def __init__(
        self,
        campaigns: CampaignPages,
        timeline: TimelineReads,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._campaigns = campaigns
        self._timeline = timeline
        self._clock = clock

    def list_for(self, user: str, query: Mapping[str, str] | None) -> dict[str, Any]:
        """A page of the tenant's campaigns (the API's route and the operator's CLI); BadParam for a query it
        cannot take."""
        state = params.choice(query, "state", STATES)
        limit = params.limit(query, default=DEFAULT_PAGE, most=MAX_PAGE)
        position = _position(params.decode_cursor(query))
        now_ms = int(self._clock() * 1000)
        out: list[dict[str, Any]] = []
        read = 0
        while len(out) < limit and read < MAX_READ:
            want = limit - len(out) if state is None else min(MAX_PAGE, MAX_READ - read)
            page, more = self._campaigns.newest(user, before=position, limit=want)
            read += want
            taken = 0
            for c in page:
                taken += 1
                if state is None or state_of(c, now_ms) == state:
                    out.append(campaign_json(c, now_ms))
                    if len(out) >= limit:
                        break
            if taken < len(page):  # full inside this page: the next one starts after the last taken
                last = page[taken - 1]
                position = (last.created_ms or 0, last.campaign_id)
                break
            position = more
            if more is None:
                break
        cursor = params.encode_cursor(f"{position[0]}:{position[1]}") if position else None
        return {"campaigns": out, "next": cursor}

    def show_for(self, user: str, campaign_id: str, query: Mapping[str, str] | None) -> dict[str, Any]:
        """One campaign with its timeline; NotFound when the tenant has no such campaign."""
        if not is_id(campaign_id):
            raise NotFound()
        after = params.decode_cursor(query, "timelineAfter")
        if after is not None and not _MINUTE.match(after):
            raise params.bad_cursor("timelineAfter")
        counts = self._campaigns.get(user, campaign_id)
        if counts is None:
            raise NotFound()
        minutes, more = self._timeline.minutes(user, campaign_id, after=after, limit=TIMELINE_MINUTES)
        busiest = (
            {"at": iso_ms(counts.busiest_at_ms), "sent": counts.busiest_sent}
            if counts.busiest_sent and counts.busiest_at_ms
            else None
        )
        timeline = {
            "resolution": "minute",
            "minutes": [
                {"minute": iso_ms(m.start_s * 1000), **{k: m.counts.get(k, 0) for k in KINDS}} for m in minutes
            ],
            "busiestSecond": busiest,
            "next": params.encode_cursor(more) if more else None,
        }
        return {**campaign_json(counts, int(self._clock() * 1000)), "timeline": timeline}


def _position(decoded: str | None) -> tuple[int, str] | None:
    """(created ms, campaign id) from a list cursor's text; BadParam for anything else."""
    if decoded is None:
        return None
    match = _POSITION.match(decoded)
    if match is None or not is_id(match.group(2)):
        raise params.bad_cursor()
    return int(match.group(1)), match.group(2)
