"""Chalice schedule handlers tick at their rate on the local stack."""

import time
from datetime import datetime

from infra.local.lambda_runtime import FunctionRunner, LocalFunction
from infra.local.scheduler import Scheduler, cron_matches, rate_seconds


def test_rate_expressions_are_read_as_chalice_writes_them():
    assert rate_seconds("rate(1 minute)") == 60
    assert rate_seconds("rate(5 minutes)") == 300
    assert rate_seconds("rate(2 hours)") == 7200
    assert rate_seconds("cron(0 12 * * ? *)") is None


def test_cron_expressions_match_their_minute():
    when = datetime(2026, 11, 22, 12, 30)
    assert cron_matches("cron(30 12 * * ? *)", when)
    assert cron_matches("cron(0/15 * * * ? *)", when)
    assert not cron_matches("cron(31 12 * * ? *)", when)
    assert cron_matches("cron(0-45 10-14 22 11 ? *)", when)


def test_a_rate_schedule_invokes_its_handler_once_per_period_with_a_scheduled_event():
    events = []
    fn = LocalFunction("sweep", "moonsend-local-sweep", lambda event, ctx: events.append(event))
    runner = FunctionRunner({fn.function_name: fn}, "us-east-1", "123456789012")
    sched = Scheduler(runner, account_id="123456789012", region="us-east-1", time_scale=0.05 / 60)
    sched.add(fn, "rate(1 minute)")  # a period of 0.05 s at this time scale
    sched.tick()
    assert runner.wait_idle(5) and events == []  # the first tick comes one period after start
    for expected in (1, 2):
        time.sleep(0.06)
        sched.tick()
        sched.tick()  # a second tick in the same period invokes nothing
        assert runner.wait_idle(5) and len(events) == expected
    runner.shutdown()
    assert events[0]["detail-type"] == "Scheduled Event" and events[0]["source"] == "aws.events"
    assert events[0]["resources"][0].endswith(":rule/moonsend-local-sweep-event")
