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
        ("cron(5 20 24 11 ? 2026)", TUESDAY, None),  # once, at the minute given: not again after it
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
        # What would make pyawscron loop for ever or expand a range into a list of millions.
        ("cron(0/0 * * * ? *)", "the step in 0/0"),
        ("cron(0-99999999 * * * ? *)", "is not a value, a range or a step"),
        ("cron(* * * * ? 1970-99999)", "is not a value, a range or a step"),
        ("cron(0 13 31 2 ? *)", "cannot be evaluated"),  # never: a 31st of February
        # EventBridge would fire it in 2028; pyawscron cannot step over the common years: refused, not guessed.
        ("cron(0 0 29 2 ? *)", "cannot be evaluated"),
        ("cron(0 0 1 1 ? 2020)", "never fires after now"),
        ("cron(" + "1," * 150 + "1 * * * ? *)", "must be an EventBridge cron expression"),  # too long
    ],
)
def test_malformed_or_hostile_expressions_are_refused_with_the_field(expression, says):
    with pytest.raises(ValueError) as raised:
        cron.check(expression, TUESDAY)
    assert says in str(raised.value)
