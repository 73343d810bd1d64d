"""Emulator: EventBridge's default event bus, for the events AWS services put on it (moto runs no rule).

The stack's rules with an event pattern (a Chalice `on_cw_event`, which the SAM transform makes an
AWS::Events::Rule created in moto) are read off the created stack; `put` matches an event against each
rule's pattern with moto's own matcher and invokes each matching rule's function asynchronously, as
EventBridge invokes a Lambda target (Lambda then retries twice and keeps what still fails on the
function's on-failure queue). The local SES stand-in puts its SES tenants' sending status changes here
(infra.local.ses_tenants), in the shape SES documents.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from moto.events.models import EventPattern

from infra.local.lambda_runtime import FunctionRunner, LocalFunction


@dataclass(frozen=True)
class PatternRule:
    rule_arn: str
    pattern: EventPattern
    function: LocalFunction


def envelope(
    source: str, detail_type: str, resources: list[str], detail: dict[str, Any], *, account: str, region: str
) -> dict[str, Any]:
    """An event as EventBridge hands it to a target (AWS service event metadata)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": account,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": resources,
        "detail": detail,
    }


class EventBus:
    def __init__(self, runner: FunctionRunner) -> None:
        self._runner = runner
        self._rules: list[PatternRule] = []
        self._lock = threading.Lock()
        self.put_events: list[dict[str, Any]] = []  # every event put, matched or not (tests read them)

    def add(self, function: LocalFunction, pattern: str, rule_arn: str) -> None:
        with self._lock:
            self._rules.append(PatternRule(rule_arn, EventPattern.load(pattern), function))

    def put(self, event: dict[str, Any]) -> int:
        """Deliver the event to every rule it matches; how many did."""
        with self._lock:
            self.put_events.append(json.loads(json.dumps(event)))
            matching = [r for r in self._rules if r.pattern.matches_event(event)]  # type: ignore[arg-type]
        for rule in matching:
            try:
                self._runner.invoke_async(rule.function, event)
            except RuntimeError:  # the runtime is stopping: best effort, as EventBridge's delivery of these is
                return 0
        return len(matching)
