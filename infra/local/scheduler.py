"""Emulator: Chalice `schedule` handlers, ticked at their rate (EventBridge is not run by moto).

`rate(N unit)` expressions are ticked at their rate; cron expressions once in each minute they fire in
(chalicelib.core.cron: EventBridge's semantics, every field).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chalicelib.core import cron
from infra.local.lambda_runtime import FunctionRunner, LocalFunction
from infra.local.periodic import Periodic

_UNITS = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400}


def rate_seconds(expression: str) -> float | None:
    m = re.fullmatch(r"rate\((\d+)\s+(\w+)\)", expression.strip())
    if not m or m.group(2).lower() not in _UNITS:
        return None
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


@dataclass
class Schedule:
    function: LocalFunction
    expression: str
    rule_arn: str
    next_at: float = 0.0
    last_minute: str = ""


def scheduled_event(rule_arn: str, account_id: str, region: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account_id,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


class Scheduler(Periodic):
    name = "scheduler"

    def __init__(self, runner: FunctionRunner, *, account_id: str, region: str, time_scale: float = 1.0) -> None:
        super().__init__(0.2)
        self._runner = runner
        self._account = account_id
        self._region = region
        self.time_scale = time_scale
        self.schedules: list[Schedule] = []
        self.ticks = 0

    def add(self, fn: LocalFunction, expression: str, rule: str | None = None) -> None:
        """Run `fn` on `expression` (a rate or cron), as the EventBridge rule `rule` would."""
        rule = rule or f"arn:aws:events:{self._region}:{self._account}:rule/{fn.function_name}-event"
        period = rate_seconds(expression)
        first = time.monotonic() + (period * self.time_scale if period else 0)
        self.schedules.append(Schedule(fn, expression, rule, next_at=first))

    def tick(self) -> None:
        now = time.monotonic()
        minute = datetime.now(UTC).strftime("%Y%m%d%H%M")
        for s in self.schedules:
            period = rate_seconds(s.expression)
            due = False
            if period is not None:
                if now >= s.next_at:
                    due = True
                    s.next_at = now + period * self.time_scale
            elif s.last_minute != minute and cron.fires_at(s.expression, time.time()):
                s.last_minute = minute
                due = True
            if due:
                self.ticks += 1
                self._runner.invoke_async(s.function, scheduled_event(s.rule_arn, self._account, self._region))

    def start(self) -> None:
        if self.schedules:
            super().start()
