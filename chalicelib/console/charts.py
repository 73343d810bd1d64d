"""A campaign's emails per minute as a chart the page draws in SVG: bars of emails sent, the ceiling its rate
allows, and lines of what followed (delivered, opened, clicked) and marks where bounces and complaints came.

Pure geometry from the campaign's timeline (chalicelib.control.campaign_reads: at most a day of minutes, only
the minutes with a count). Minutes without a count are drawn as zero, and a long span is drawn in columns of
several minutes each, at most MAX_COLUMNS of them, so the page stays small whatever the campaign's size: a
day of minutes is 120 columns of 12 minutes, not 1,440 bars. A short span is drawn as at least MIN_COLUMNS
minutes (the ones after it empty), so that one minute of sending is a bar, not the chart's whole width.

The SVG's box is WIDTH by HEIGHT user units, stretched to the page's width (the page's CSS); what a reader
needs as text (the scale, the times, the busiest second) is in the page's HTML beside it, not in the SVG,
where stretching would distort it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MAX_COLUMNS = 120
MIN_COLUMNS = 30  # a campaign's first minutes are drawn as the start of half an hour, not as one wide bar
HEIGHT = 100.0
COLUMN = 10.0  # user units per column; the bar fills BAR of it
BAR = 8.0
LINES = ("delivered", "opened", "clicked")
MARKS = ("bounced", "complained")


@dataclass(frozen=True)
class Column:
    start: str  # ISO 8601, UTC, its first minute
    counts: Mapping[str, int]
    x: float
    bar_y: float
    bar_height: float


@dataclass(frozen=True)
class MinuteChart:
    minutes_per_column: int
    columns: tuple[Column, ...]
    top: int  # emails per column at the chart's top
    width: float
    rate_y: float | None  # where the rate's ceiling is drawn; None when unknown or above the top
    lines: Mapping[str, str]  # kind -> an SVG polyline's points
    marks: tuple[tuple[float, str], ...]  # (x, kind) of each column where bounces or complaints came
    first: str
    last: str  # the start of the last column
    last_sent: str | None  # the last minute an email was sent in

    @property
    def ceiling(self) -> float | None:
        """Emails per column the rate allows (a tenth at most below 10: a rate of one a minute is not 0)."""
        if self.rate_y is None:
            return None
        allowed = (1 - self.rate_y / HEIGHT) * self.top
        return round(allowed) if allowed >= 10 else round(allowed, 1)


def _epoch_minute(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()) // 60


def _iso(minute: int) -> str:
    return datetime.fromtimestamp(minute * 60, UTC).strftime("%Y-%m-%dT%H:%M:00Z")


_STEPS = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def _nice(value: float) -> int:
    """The smallest round figure at least `value` (a step of _STEPS times a power of ten): an axis a reader
    can read, with little room wasted above the rate's ceiling."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(math.ceil(m * power) for m in _STEPS if m * power >= value)


def minute_chart(minutes: Sequence[Mapping[str, Any]], rate_per_second: float | None) -> MinuteChart | None:
    """The chart of a timeline's minutes (each `{"minute": iso, "sent": n, ...}`); None when there are none."""
    if not minutes:
        return None
    by_minute: dict[int, Mapping[str, Any]] = {_epoch_minute(m["minute"]): m for m in minutes}
    first, last = min(by_minute), max(by_minute)
    per = max(1, math.ceil((last - first + 1) / MAX_COLUMNS))
    # Each minute's counts into its column: the work is the rows', however long the span between them.
    buckets = [dict.fromkeys(("sent", *LINES, *MARKS), 0) for _ in range((last - first) // per + 1)]
    for minute, row in by_minute.items():
        column = buckets[(minute - first) // per]
        for kind in column:
            column[kind] += max(0, int(row.get(kind, 0)))
    spanned = len(buckets)  # the lines stop here: the columns after it are time still to come
    buckets += [dict.fromkeys(("sent", *LINES, *MARKS), 0) for _ in range(MIN_COLUMNS - len(buckets))]
    ceiling = rate_per_second * 60 * per if rate_per_second else None
    peak = max(max(b[k] for k in ("sent", *LINES)) for b in buckets)
    top = _nice(max(peak, ceiling or 0) * 1.05)
    columns = tuple(
        Column(
            _iso(first + i * per),
            b,
            i * COLUMN + (COLUMN - BAR) / 2,
            HEIGHT - b["sent"] / top * HEIGHT,
            b["sent"] / top * HEIGHT,
        )
        for i, b in enumerate(buckets)
    )
    lines = {
        kind: " ".join(
            f"{i * COLUMN + COLUMN / 2:g},{HEIGHT - b[kind] / top * HEIGHT:.2f}"
            for i, b in enumerate(buckets[:spanned])
        )
        for kind in LINES
        if any(b[kind] for b in buckets)
    }
    marks = tuple((i * COLUMN + COLUMN / 2, kind) for i, b in enumerate(buckets) for kind in MARKS if b[kind])
    rate_y = HEIGHT - ceiling / top * HEIGHT if ceiling else None
    sent_in = [m for m, row in by_minute.items() if int(row.get("sent", 0)) > 0]
    last_sent = _iso(max(sent_in)) if sent_in else None
    return MinuteChart(
        per, columns, top, len(buckets) * COLUMN, rate_y, lines, marks, _iso(first), columns[-1].start, last_sent
    )
