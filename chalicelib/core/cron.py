"""EventBridge cron expressions: whether one is valid, and when it fires next (in UTC).

The semantics are pyawscron's (EventBridge's six fields: day-of-week 1-7 from SUN, `?`, `L`, `W`, `#`).
Each field is checked against its bounds here first: pyawscron expands ranges and steps into lists without
bounds, so `0-99999999` or a step of 0 given to it by a tenant would take the function's memory or its
time, and it raises whatever its parsing meets (IndexError, ValueError, a bare Exception); all of that is
a ValueError with the field's name here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from pyawscron.awscron import AWSCron

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# (name, lowest, highest, names) of the six fields, in order.
_FIELDS = (
    ("minutes", 0, 59, ()),
    ("hours", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 1, 7, _DAYS),
    ("year", 1970, 2199, ()),
)
# How far ahead a next run is looked for: a 29th of February comes at least every eight years.
_MONTHS_AHEAD = 8 * 12 + 1
_EXPRESSION = re.compile(r"cron\(([^()]{1,200})\)")
_VALUE = r"(\d{1,4}|[A-Z]{3})"
_PART = re.compile(rf"(\*|{_VALUE}(-{_VALUE})?)(/(\d{{1,4}}))?")


def fields_of(expression: str) -> list[str]:
    """The six fields of `cron(...)`, each checked against its bounds; ValueError says which is wrong."""
    m = _EXPRESSION.fullmatch(expression.strip())
    if not m:
        raise ValueError(
            "must be an EventBridge cron expression, cron(minutes hours day-of-month month day-of-week year)"
        )
    fields = m.group(1).upper().split()
    if len(fields) != 6:
        raise ValueError(f"has {len(fields)} fields; EventBridge's cron has six (the sixth is the year)")
    for text, spec in zip(fields, _FIELDS, strict=True):
        _check_field(text, *spec)
    dom, dow = fields[2], fields[4]
    if (dom == "?") == (dow == "?"):
        raise ValueError("day-of-month and day-of-week: one of the two must be ?, and only one")
    return fields


_DOM_SPECIAL = re.compile(r"L(-(\d{1,2}))?|(\d{1,2})W")  # the last day (less n days); the weekday nearest n
_DOW_SPECIAL = re.compile(rf"{_VALUE}(L|#[1-5])")  # the month's last <day>; its k-th <day>


def _check_field(text: str, name: str, low: int, high: int, names: tuple[str, ...]) -> None:
    def value(token: str) -> int:
        n = names.index(token) + low if token in names else int(token) if token.isdigit() else -1
        if not low <= n <= high:
            raise ValueError(f"{name}: {token} is not from {low} to {high}")
        return n

    if text == "?" and name in ("day-of-month", "day-of-week"):
        return
    if name == "day-of-month" and (m := _DOM_SPECIAL.fullmatch(text)):
        if m.group(2) is not None and not 1 <= int(m.group(2)) <= 30:
            raise ValueError(f"{name}: {text} is not L-1 to L-30")
        if m.group(3) is not None:
            value(m.group(3))
        return
    if name == "day-of-week" and (m := _DOW_SPECIAL.fullmatch(text)):
        value(m.group(1))
        return
    for part in text.split(","):
        m = _PART.fullmatch(part)
        if not m or (name == "day-of-week" and "/" in part):  # EventBridge takes no step in day-of-week
            raise ValueError(f"{name}: {part!r} is not a value, a range or a step")
        first = low if m.group(1) == "*" else value(m.group(2))
        last = value(m.group(4)) if m.group(4) else high
        if first > last:
            raise ValueError(f"{name}: the range {part} runs backwards")
        if m.group(6) is not None and not 1 <= int(m.group(6)) <= high:
            raise ValueError(f"{name}: the step in {part} is not from 1 to {high}")


def next_fire(expression: str, after: float) -> float | None:
    """When `expression` fires next strictly after `after` (epoch seconds, UTC); None if never again."""
    fields = fields_of(expression)
    start = datetime.fromtimestamp(int(after) // 60 * 60, UTC)
    try:
        parsed = AWSCron(" ".join(fields))
    except Exception as exc:  # what pyawscron's parsing meets (`1,5/2`)
        raise ValueError(f"cannot be evaluated: {exc}") from exc
    for _ in range(_MONTHS_AHEAD):
        try:
            when = parsed.occurrence(start).next()
        except Exception:
            # pyawscron builds a date with the day of the month it is looking at, and raises where that
            # month lacks it (`cron(0 13 31 * ? *)` from the 24th of November); EventBridge skips the
            # month. So do we: from the month's last minute, or the next month's when already there.
            start = _last_minute_of_month(start + timedelta(minutes=1))
            continue
        return when.timestamp() if when is not None else None
    raise ValueError(f"does not fire in the next {_MONTHS_AHEAD // 12} years")


def _last_minute_of_month(when: datetime) -> datetime:
    first_of_next = (when.replace(day=1) + timedelta(days=32)).replace(day=1, hour=0, minute=0, second=0)
    return first_of_next - timedelta(minutes=1)


def shortest_gap(expression: str, after: float, count: int = 6) -> float | None:
    """The shortest time between its next `count` firings (None if it fires fewer times than two)."""
    times: list[float] = []
    at: float | None = after
    while len(times) < count and at is not None:
        at = next_fire(expression, at)
        if at is not None:
            times.append(at)
    return min((b - a for a, b in pairwise(times)), default=None)


def fires_at(expression: str, minute: float) -> bool:
    """Whether `expression` fires in the UTC minute that starts at `minute`."""
    start = int(minute) // 60 * 60
    return next_fire(expression, start - 60) == start


def check(expression: str, now: float) -> str:
    """`expression` tidied (`cron(0 13 ? * WED *)`), or ValueError: malformed, or it never fires again."""
    fields = fields_of(expression)
    if next_fire(expression, now) is None:
        raise ValueError("never fires after now")
    return f"cron({' '.join(fields)})"
