"""A campaign's timeline: its sends and its feedback per minute, and its sends per second, for a chart.

One item per campaign and UTC minute (`pk` = `<userId>#<campaignId>`, `minute` = `2026-11-26T03:15`), with a
counter per kind (sent, delivered, bounced, complained, opened, clicked) and one per second of the minute
that had sends (`s00` ... `s59`). Nothing is written per email: the campaign counters' writer
(chalicelib.stores.campaign_stats) adds what it gathered, when it flushes, as one ADD per minute touched,
beside the counters' own write. Every change is an atomic ADD, so several drainers of one campaign add up
in the same second; the second counters' new values come back with the write, which is how the campaign's
busiest second is known without reading anything.

A minute is the one its counts were written in (sends: the second each was made, gathered by
BufferedStats), at most a flush interval late. Counts taken back (SES's Reject of a recorded send) are not
taken off the timeline: it shows what happened when, not the final state.
"""

from __future__ import annotations

import calendar
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.expressions.operand import Path, Value
from pynamodb.models import Model

from chalicelib.stores.ports.campaigns import Minute
from chalicelib.stores.tables import bound, warm

KINDS = ("sent", "delivered", "bounced", "complained", "opened", "clicked")
_NUMBER = NumberAttribute()


class TimelineModel(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)  # <userId>#<campaignId>
    minute = UnicodeAttribute(range_key=True)  # YYYY-MM-DDTHH:MM (UTC)


def minute_key(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M", time.gmtime(epoch_s))


def minute_epoch(key: str) -> int:
    """The epoch second a minute key starts at (ValueError for anything else)."""
    return calendar.timegm(time.strptime(key, "%Y-%m-%dT%H:%M"))


@dataclass(frozen=True)
class Busiest:
    at_s: int  # the epoch second
    sent: int


class Timeline:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(TimelineModel, table_name, region)

    def warm(self) -> None:
        warm(self._model)

    def add(
        self,
        user_id: str,
        campaign_id: str,
        now_s: float,
        deltas: Mapping[str, int],
        sent_seconds: Mapping[int, int],
    ) -> Busiest | None:
        """Add sends by the second they were made and the other kinds at `now_s`; the busiest of the seconds
        written, with its total so far (None when no send was added)."""
        per_minute: dict[int, dict[str, int]] = defaultdict(dict)
        for second, n in sent_seconds.items():
            if n > 0:
                row = per_minute[second // 60]
                row["sent"] = row.get("sent", 0) + n
                row[f"s{second % 60:02d}"] = n
        now_row = per_minute[int(now_s) // 60]
        for kind, n in deltas.items():
            if kind in KINDS and kind != "sent" and n > 0:
                now_row[kind] = now_row.get(kind, 0) + n
        busiest: Busiest | None = None
        for minute, adds in sorted(per_minute.items()):
            if adds:
                found = self._add_minute(user_id, campaign_id, minute, adds)
                if found is not None and (busiest is None or found.sent > busiest.sent):
                    busiest = found
        return busiest

    def _add_minute(self, user_id: str, campaign_id: str, minute: int, adds: Mapping[str, int]) -> Busiest | None:
        actions = [Path(name).add(Value(n, attribute=_NUMBER)) for name, n in sorted(adds.items())]
        answer = self._model._get_connection().update_item(
            f"{user_id}#{campaign_id}", minute_key(minute * 60), actions=actions, return_values="UPDATED_NEW"
        )
        seconds = [
            (int(name[1:]), int(value["N"]))
            for name, value in answer.get("Attributes", {}).items()
            if name.startswith("s") and name[1:].isdigit()
        ]
        if not seconds:
            return None
        second, sent = max(seconds, key=lambda s: (s[1], -s[0]))
        return Busiest(minute * 60 + second, sent)

    def minutes(
        self, user_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1440
    ) -> tuple[list[Minute], str | None]:
        """The campaign's minutes with any count, oldest first, after the minute key `after`; and the key to go
        on from, when there are more."""
        conn = self._model._get_connection()
        out: list[Minute] = []
        start: dict[str, Any] | None = None
        pk = f"{user_id}#{campaign_id}"
        if after is not None:
            start = {"pk": {"S": pk}, "minute": {"S": after}}
        while len(out) < limit:
            page = conn.query(pk, exclusive_start_key=start, limit=limit - len(out))
            for item in page.get("Items", []):
                counts = {k: int(item[k]["N"]) for k in KINDS if k in item}
                out.append(Minute(minute_epoch(item["minute"]["S"]), counts))
            start = page.get("LastEvaluatedKey")
            if start is None:
                return out, None
        return out, minute_key(out[-1].start_s) if out else None
