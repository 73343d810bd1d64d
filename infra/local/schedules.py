"""Emulator: EventBridge Scheduler's schedules, which moto stores and never runs: each invokes its target.

Once a UTC minute (as Scheduler fires with `FlexibleTimeWindow` OFF), every enabled schedule of the stage
whose cron expression fires in that minute invokes its target asynchronously with its input, the context
attributes filled in as Scheduler fills them (`<aws.scheduler.scheduled-time>` is the minute, in the form
AWS documents: `2026-11-25T13:00:00Z`). The schedules are those the app put (chalicelib.digest.schedules),
read back through moto's API; cron's semantics are chalicelib.core.cron's (pyawscron's).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from chalicelib.core import cron
from infra.local.lambda_runtime import FunctionRunner, LocalFunction
from infra.local.periodic import Periodic


def scheduled_time(minute: float) -> str:
    return datetime.fromtimestamp(minute, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def target_input(schedule: dict[str, Any], minute: float, attempt: int = 1) -> str:
    """The schedule's input with Scheduler's context attributes replaced."""
    text = str(schedule.get("Target", {}).get("Input") or "{}")
    for keyword, value in (
        ("<aws.scheduler.schedule-arn>", str(schedule.get("Arn", ""))),
        ("<aws.scheduler.scheduled-time>", scheduled_time(minute)),
        ("<aws.scheduler.execution-id>", uuid.uuid4().hex[:16]),
        ("<aws.scheduler.attempt-number>", str(attempt)),
    ):
        text = text.replace(keyword, value)
    return text


class ScheduleRunner(Periodic):
    name = "schedules"

    def __init__(
        self,
        client: Any,
        runner: FunctionRunner,
        name_prefix: str,
        function_of: Callable[[str], LocalFunction | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(1.0)
        self._client = client
        self._runner = runner
        self._prefix = name_prefix
        self._function_of = function_of
        self._clock = clock
        self._last_minute = int(clock()) // 60 * 60  # the minute the stack started in is not fired
        self.fired: list[tuple[str, str]] = []  # (schedule name, scheduled time), for a look afterwards

    def tick(self) -> None:
        minute = int(self._clock()) // 60 * 60
        if minute != self._last_minute:
            self._last_minute = minute
            self.fire_due(minute)

    def schedules(self) -> list[dict[str, Any]]:
        """The stage's schedules, each whole (ListSchedules gives a summary without the input)."""
        out = []
        for page in self._client.get_paginator("list_schedules").paginate(NamePrefix=self._prefix, State="ENABLED"):
            for summary in page.get("Schedules", []):
                out.append(self._client.get_schedule(Name=summary["Name"], GroupName=summary["GroupName"]))
        return out

    def fire_due(self, minute: float) -> int:
        """Invoke every schedule that fires in `minute`; how many were."""
        fired = 0
        for schedule in self.schedules():
            try:
                due = cron.fires_at(schedule["ScheduleExpression"], minute)
            except ValueError as exc:  # Scheduler would have refused it; the app puts only valid ones
                print(f"[{self.name}] {schedule['Name']}: {schedule['ScheduleExpression']}: {exc}")
                continue
            if due:
                self.fire(schedule, minute)
                fired += 1
        return fired

    def fire(self, schedule: dict[str, Any], minute: float) -> None:
        """Invoke the schedule's target as Scheduler does at `minute` (asynchronously, its input filled in)."""
        fn = self._function_of(schedule["Target"]["Arn"])
        if fn is None:
            print(f"[{self.name}] {schedule['Name']}: no function {schedule['Target']['Arn']}")
            return
        self.fired.append((schedule["Name"], scheduled_time(minute)))
        self._runner.invoke_async(fn, json.loads(target_input(schedule, minute)))
