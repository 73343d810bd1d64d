"""Chalice schedule handlers tick at their rate on the local stack."""

import time

from infra.local.lambda_runtime import FunctionRunner, LocalFunction
from infra.local.scheduler import Scheduler, rate_seconds


def test_rate_expressions_are_read_as_chalice_writes_them():
    assert rate_seconds("rate(1 minute)") == 60
    assert rate_seconds("rate(5 minutes)") == 300
    assert rate_seconds("rate(2 hours)") == 7200
    assert rate_seconds("cron(0 12 * * ? *)") is None


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


def test_an_eventbridge_schedule_invokes_its_target_in_each_minute_it_fires_with_scheduled_time_filled_in(stack, uid):
    from datetime import UTC, datetime

    from infra.local.schedules import ScheduleRunner

    events = []
    fn = LocalFunction("run_digest", "moonsend-local-run_digest", lambda event, ctx: events.append(event))
    runner = FunctionRunner({fn.function_name: fn}, "us-east-1", "123456789012")
    client = stack.client("scheduler")  # moto's Scheduler on the test session's stack
    prefix = f"t{uid}-"
    target = {
        "Arn": "arn:aws:lambda:us-east-1:123456789012:function:moonsend-local-run_digest",
        "RoleArn": "arn:aws:iam::123456789012:role/moonsend-local-digest-scheduler",
        "Input": '{"digestId": "weekly", "scheduledAt": "<aws.scheduler.scheduled-time>"}',
    }
    for name, state in ((f"{prefix}a", "ENABLED"), (f"{prefix}off", "DISABLED"), (f"other{uid}", "ENABLED")):
        client.create_schedule(
            Name=name,
            ScheduleExpression="cron(0 13 ? * WED *)",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target=target,
            State=state,
        )
    schedules = ScheduleRunner(client, runner, prefix, runner.resolve)
    wed = datetime(2026, 11, 25, 13, 0, tzinfo=UTC).timestamp()
    assert schedules.fire_due(wed) == 1  # not the disabled one, nor another prefix's
    # Each firing is an async invocation on its own worker: wait for one before the next, so the order of
    # `events` is the order of firing and not of two threads' race.
    assert runner.wait_idle(5)
    assert schedules.fire_due(wed + 60) == 0 and schedules.fire_due(wed + 86400) == 0  # 13:01; Thursday
    assert schedules.fire_due(wed + 7 * 86400) == 1  # a week later
    assert runner.wait_idle(5)
    runner.shutdown()
    for name in (f"{prefix}a", f"{prefix}off", f"other{uid}"):
        client.delete_schedule(Name=name)
    assert events == [
        {"digestId": "weekly", "scheduledAt": "2026-11-25T13:00:00Z"},
        {"digestId": "weekly", "scheduledAt": "2026-12-02T13:00:00Z"},
    ]
