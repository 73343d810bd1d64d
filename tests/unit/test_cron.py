"""EventBridge cron expressions: AWS's documented examples fire when AWS says; hostile ones are refused."""

from datetime import UTC, datetime

import pytest

from chalicelib.core import cron


def _t(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def _next(expression: str, after: float) -> datetime | None:
    when = cron.next_fire(expression, after)
    return None if when is None else datetime.fromtimestamp(when, UTC)


# The examples of EventBridge's "Cron expressions" reference, each with what it says the expression does.
TUESDAY = _t(2026, 11, 24, 20, 5)  # 24 November 2026 is a Tuesday


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("cron(0 10 * * ? *)", TUESDAY, datetime(2026, 11, 25, 10, 0, tzinfo=UTC)),  # 10:00 every day
        ("cron(15 12 * * ? *)", TUESDAY, datetime(2026, 11, 25, 12, 15, tzinfo=UTC)),  # 12:15 every day
        ("cron(0 18 ? * MON-FRI *)", TUESDAY, datetime(2026, 11, 25, 18, 0, tzinfo=UTC)),  # 18:00 Mon-Fri
        ("cron(0 18 ? * MON-FRI *)", _t(2026, 11, 27, 19), datetime(2026, 11, 30, 18, 0, tzinfo=UTC)),  # Fri->Mon
        ("cron(0 8 1 * ? *)", TUESDAY, datetime(2026, 12, 1, 8, 0, tzinfo=UTC)),  # 8:00 on the 1st
        ("cron(0/15 * * * ? *)", TUESDAY, datetime(2026, 11, 24, 20, 15, tzinfo=UTC)),  # every 15 minutes
        ("cron(0/10 * ? * MON-FRI *)", _t(2026, 11, 28, 12), datetime(2026, 11, 30, 0, 0, tzinfo=UTC)),
        ("cron(0/5 8-17 ? * MON-FRI *)", _t(2026, 11, 24, 17, 56), datetime(2026, 11, 25, 8, 0, tzinfo=UTC)),
        ("cron(0 9 ? * 2#1 *)", TUESDAY, datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),  # the first Monday
        ("cron(0 13 ? * WED *)", TUESDAY, datetime(2026, 11, 25, 13, 0, tzinfo=UTC)),  # the weekly one
        ("cron(0 13 ? * 4 *)", TUESDAY, datetime(2026, 11, 25, 13, 0, tzinfo=UTC)),  # day 4 is WED (1 is SUN)
        ("cron(0 0 L * ? *)", TUESDAY, datetime(2026, 11, 30, 0, 0, tzinfo=UTC)),  # the month's last day
        ("cron(0 18 ? * 6L *)", TUESDAY, datetime(2026, 11, 27, 18, 0, tzinfo=UTC)),  # the last Friday
        ("cron(5 20 24 11 ? 2026)", TUESDAY, None),
        # Days some months lack: those months are skipped, whatever day it is today.
        ("cron(0 13 31 * ? *)", TUESDAY, datetime(2026, 12, 31, 13, 0, tzinfo=UTC)),
        ("cron(0 13 31 * ? *)", _t(2027, 1, 31, 14), datetime(2027, 3, 31, 13, 0, tzinfo=UTC)),
        ("cron(0 13 30 * ? *)", _t(2027, 2, 1), datetime(2027, 3, 30, 13, 0, tzinfo=UTC)),
        (
            "cron(0 0 29 2 ? *)",
            TUESDAY,
            datetime(2028, 2, 29, 0, 0, tzinfo=UTC),
        ),  # a leap day, years ahead  # once, at the minute given: not again after it
    ],
)
def test_documented_expressions_fire_next_when_eventbridge_says(expression, after, expected):
    assert _next(expression, after) == expected


def test_fires_at_is_true_for_its_minute_only():
    assert cron.fires_at("cron(0 13 ? * WED *)", _t(2026, 11, 25, 13, 0))
    assert cron.fires_at("cron(0 13 ? * WED *)", _t(2026, 11, 25, 13, 0, 30))  # any second of the minute
    assert not cron.fires_at("cron(0 13 ? * WED *)", _t(2026, 11, 25, 13, 1))
    assert not cron.fires_at("cron(0 13 ? * WED *)", _t(2026, 11, 26, 13, 0))


def test_check_tidies_what_it_accepts():
    assert cron.check("  cron(0 13 ? * wed *) ", TUESDAY) == "cron(0 13 ? * WED *)"


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("rate(1 hour)", "must be an EventBridge cron expression"),
        ("cron(0 13 ? * WED)", "has 5 fields"),
        ("cron(0 13 * * * *)", "one of the two must be ?"),
        ("cron(0 13 ? * ? *)", "one of the two must be ?"),
        ("cron(61 * * * ? *)", "minutes: 61 is not from 0 to 59"),
        ("cron(0 13 ? * XYZ *)", "day-of-week: XYZ"),
        ("cron(0 0 ? * 9 *)", "day-of-week: 9"),
        ("cron(0 0 ? JAN-XYZ 1 *)", "month: XYZ"),
        ("cron(5-1 * * * ? *)", "runs backwards"),
        ("cron(0 9 ? * 1/2 *)", "day-of-week: '1/2' is not"),  # EventBridge lists no step for it
        # What would make pyawscron loop for ever or expand a range into a list of millions.
        ("cron(0/0 * * * ? *)", "the step in 0/0"),
        ("cron(0-99999999 * * * ? *)", "is not a value, a range or a step"),
        ("cron(* * * * ? 1970-99999)", "is not a value, a range or a step"),
        ("cron(0 13 31 2 ? *)", "does not fire in the next 8 years"),  # never: a 31st of February
        ("cron(0 0 1 1 ? 2020)", "never fires after now"),
        ("cron(" + "1," * 150 + "1 * * * ? *)", "must be an EventBridge cron expression"),  # too long
    ],
)
def test_malformed_or_hostile_expressions_are_refused_with_the_field(expression, says):
    with pytest.raises(ValueError) as raised:
        cron.check(expression, TUESDAY)
    assert says in str(raised.value)


# --- against a brute-force oracle ------------------------------------------------------------------------
def _expand(text: str, low: int, high: int, names: tuple[str, ...] = ()) -> set[int]:
    """A field's values, by the definition: lists of values, ranges and steps (no L, W or #)."""
    if text in ("*", "?"):
        return set(range(low, high + 1))
    out: set[int] = set()
    for part in text.split(","):
        base, _, step = part.partition("/")
        value = lambda t: names.index(t) + low if t in names else int(t)  # noqa: E731
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first, last = (value(t) for t in base.split("-"))
        else:
            first, last = value(base), (high if step else value(base))
        out.update(range(first, last + 1, int(step or 1)))
    return out


def _oracle(fields: list[str], after: datetime) -> datetime | None:
    """Day by day for 9 years, then the first matching hour and minute of a matching day after `after`."""
    from datetime import timedelta

    minutes, hours = _expand(fields[0], 0, 59), _expand(fields[1], 0, 23)
    doms, months = _expand(fields[2], 1, 31), _expand(fields[3], 1, 12, cron._MONTHS)
    dows, years = _expand(fields[4], 1, 7, cron._DAYS), _expand(fields[5], 1970, 2199)
    day = after.replace(hour=0, minute=0, second=0, microsecond=0)
    for _ in range(9 * 366):
        aws_dow = (day.weekday() + 1) % 7 + 1  # 1 is Sunday
        if day.year in years and day.month in months and day.day in doms and aws_dow in dows:
            for h in sorted(hours):
                for m in sorted(minutes):
                    when = day.replace(hour=h, minute=m)
                    if when > after:
                        return when
        day += timedelta(days=1)
    return None


def _random_field(rng, low, high, names=(), steps=True):
    kind = rng.choice(
        ["*", "value", "list", "range", "step", "name"] if steps else ["*", "value", "list", "range", "name"]
    )
    v = lambda: rng.randint(low, high)  # noqa: E731
    if kind == "*":
        return "*"
    if kind == "value" or (kind == "name" and not names):
        return str(v())
    if kind == "name":
        return rng.choice(names)
    if kind == "list":
        return ",".join(str(x) for x in sorted({v() for _ in range(rng.randint(2, 4))}))
    a, b = sorted((v(), v()))
    if kind == "range":
        return f"{a}-{b}"
    return f"{rng.choice(['*', str(a)])}/{rng.randint(1, max(1, (high - low) // 2))}"


def test_next_fire_agrees_with_a_brute_force_oracle_on_random_expressions():
    import random

    rng = random.Random(23)
    checked = 0
    for _ in range(400):
        dom_or_dow = rng.random() < 0.5
        fields = [
            _random_field(rng, 0, 59),
            _random_field(rng, 0, 23),
            _random_field(rng, 1, 31) if dom_or_dow else "?",
            _random_field(rng, 1, 12, cron._MONTHS),
            "?" if dom_or_dow else _random_field(rng, 1, 7, cron._DAYS, steps=False),  # EventBridge: no step
            rng.choice(["*", "*", "*", "2027", "2026-2028", "2029"]),
        ]
        expression = f"cron({' '.join(fields)})"
        after = (
            datetime(2026, 1, 1, tzinfo=UTC)
            + (datetime(2027, 12, 31, tzinfo=UTC) - datetime(2026, 1, 1, tzinfo=UTC)) * rng.random()
        )
        after = after.replace(second=0, microsecond=0)
        expected = _oracle(fields, after)
        try:
            got = _next(expression, after.timestamp())
        except ValueError as exc:
            assert expected is None or expected.year - after.year >= 8, (expression, after, expected, exc)
            continue
        assert got == expected, (expression, after)
        checked += 1
    assert checked > 300
