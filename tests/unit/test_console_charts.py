"""The campaign page's chart and rates (chalicelib.console.charts, figures): pure geometry and arithmetic from
what the API answers, so a day of minutes stays a small page and an axis a reader can read."""

from __future__ import annotations

from chalicelib.console.charts import HEIGHT, MAX_COLUMNS, MIN_COLUMNS, minute_chart
from chalicelib.console.figures import rates


def _minute(hh_mm: str, **counts: int) -> dict:
    return {"minute": f"2026-11-28T{hh_mm}:00.000Z", **counts}


def test_no_minute_is_no_chart():
    assert minute_chart([], 10.0) is None


def test_minutes_without_a_count_are_drawn_as_zero_between_the_first_and_the_last():
    chart = minute_chart([_minute("10:00", sent=600), _minute("10:03", sent=300, delivered=290)], 10.0)
    assert chart is not None and chart.minutes_per_column == 1
    assert [c.counts["sent"] for c in chart.columns] == [600, 0, 0, 300] + [0] * (MIN_COLUMNS - 4)
    assert [c.start for c in chart.columns[:4]] == [f"2026-11-28T10:0{i}:00Z" for i in range(4)]
    assert chart.first == "2026-11-28T10:00:00Z" and chart.last == "2026-11-28T10:29:00Z"  # half an hour at least
    assert chart.last_sent == "2026-11-28T10:03:00Z"
    later = minute_chart([_minute("10:00", sent=1), _minute("11:00", opened=1)], 1.0)
    assert later is not None and later.last_sent == "2026-11-28T10:00:00Z"  # an open later is not a send


def test_the_top_is_a_round_figure_above_both_the_busiest_column_and_the_rates_ceiling():
    chart = minute_chart([_minute("10:00", sent=600), _minute("10:01", sent=120)], 10.0)
    assert chart is not None and chart.top == 800  # 600 a minute allowed; 630 with its margin, to 800
    assert chart.ceiling == 600 and chart.rate_y == HEIGHT * (1 - 600 / 800)
    full = chart.columns[0]
    assert full.bar_height == HEIGHT * 600 / 800 and full.bar_y + full.bar_height == HEIGHT
    busy = minute_chart([_minute("10:00", sent=1200)], 20.0)
    assert busy is not None and busy.top == 1500  # 1,260 with its margin


def test_an_unknown_rate_draws_no_ceiling():
    chart = minute_chart([_minute("10:00", sent=7)], None)
    assert chart is not None and chart.rate_y is None and chart.ceiling is None and chart.top == 8


def test_a_day_of_minutes_is_at_most_max_columns_each_the_sum_of_its_minutes():
    day = [_minute(f"{h:02d}:{m:02d}", sent=1, opened=1) for h in range(24) for m in range(60)]
    chart = minute_chart(day, 1.0)
    assert chart is not None and len(chart.columns) == MAX_COLUMNS and chart.minutes_per_column == 12
    assert {c.counts["sent"] for c in chart.columns} == {12}
    assert sum(c.counts["opened"] for c in chart.columns) == 1440


def test_lines_are_drawn_for_what_followed_and_marks_where_bounces_and_complaints_came():
    chart = minute_chart(
        [_minute("10:00", sent=10, delivered=9, bounced=1), _minute("10:01", sent=10, complained=1)], 1.0
    )
    assert chart is not None and set(chart.lines) == {"delivered"}  # no open, no click: no line for them
    assert len(chart.lines["delivered"].split()) == 2  # over the minutes spanned, not the half hour drawn
    assert chart.marks == ((5.0, "bounced"), (15.0, "complained"))


def test_rates_are_over_sent_or_delivered_and_none_before_there_is_any():
    shown = {r.kind: r for r in rates({"sent": 200, "delivered": 180, "bounced": 20, "opened": 45, "clicked": 9})}
    assert shown["delivered"].percent == 90.0 and shown["bounced"].percent == 10.0
    assert shown["opened"].percent == 25.0 and shown["clicked"].percent == 5.0
    assert shown["complained"].percent == 0.0 and shown["unsubscribed"].over == "delivered"
    assert {r.percent for r in rates({})} == {None}


def test_a_year_between_two_minutes_costs_two_rows_of_work_and_a_slow_rate_keeps_its_ceiling():
    chart = minute_chart([_minute("10:00", sent=1), {"minute": "2027-11-28T10:00:00.000Z", "opened": 1}], 1 / 60)
    assert chart is not None and len(chart.columns) == MAX_COLUMNS
    assert chart.columns[0].counts["sent"] == 1 and chart.columns[-1].counts["opened"] == 1
    assert chart.ceiling is not None and 0 < chart.ceiling < 10_000  # 1 a minute, times the column's minutes


def test_negative_counts_are_drawn_as_none():
    chart = minute_chart([_minute("10:00", sent=-5, delivered=3)], 1.0)
    assert chart is not None and chart.columns[0].counts["sent"] == 0 and chart.columns[0].bar_height == 0
