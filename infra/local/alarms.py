"""Emulator: CloudWatch alarm evaluation, which moto stores but never does.

Every metric alarm in moto is evaluated from its own definition (namespace, metric, dimensions,
statistic, threshold, comparison, evaluation periods, datapoints to alarm, missing-data treatment)
against live values. State is kept in moto (SetAlarmState), so DescribeAlarms shows it. As in
CloudWatch, actions run only on a state change: AlarmActions when the alarm goes into ALARM (from OK
or INSUFFICIENT_DATA), OKActions when it goes into OK, never again while the state holds. SNS actions
get the JSON notification CloudWatch publishes (the shape in seed 003).

Metrics come from the queues themselves (AWS/SQS ApproximateNumberOf*); an alarm on any other namespace
reads what was put into moto's CloudWatch (the sweeper's `moonsend` OldestQueuedEmailSeconds, and SES's
reputation rates that infra.local.ses_metrics puts as SES would), over its last period of real time.
Lambda's own metrics are not emulated: their alarms see missing data.

Each alarm is evaluated once per `Period * time_scale` seconds; the local stack compresses
time (a 60 s period is evaluated every second) so that a demo does not wait a minute per step.

With `aws_timing` (`moonsend up --aws-timing`) time is not compressed and the metrics arrive as SQS
publishes them: one datapoint per queue per minute, sampled when it is published, and a queue that had
no messages for 6 hours (SQS calls it inactive; a local stack assumes it of every queue it has not seen
active) publishes nothing for `wake_delay_s` (up to 15 minutes, AWS says) after messages arrive.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infra.local.periodic import Periodic

SQS_METRICS = {
    "ApproximateNumberOfMessagesVisible": "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible": "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed": "ApproximateNumberOfMessagesDelayed",
}
REGION_NAMES = {
    "us-east-1": "US East (N. Virginia)",
    "us-east-2": "US East (Ohio)",
    "us-west-1": "US West (N. California)",
    "us-west-2": "US West (Oregon)",
    "eu-west-1": "EU (Ireland)",
    "eu-central-1": "EU (Frankfurt)",
}
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "GreaterThanThreshold": lambda v, t: v > t,
    "LessThanThreshold": lambda v, t: v < t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
}


@dataclass
class Transition:
    alarm_name: str
    old: str
    new: str
    notified: list[str] = field(default_factory=list)


# SQS: a queue with no messages for this long is inactive, and its metrics lag when it wakes up.
# AWS namespaces whose metrics the local stack puts as AWS would (infra.local.ses_metrics).
PUT_HERE = frozenset({"AWS/SES"})
INACTIVE_AFTER_S = 6 * 3600
WAKE_DELAY_S = 15 * 60


@dataclass
class _Published:
    """What SQS has published of one queue's metrics (aws_timing)."""

    minute: int = -1
    counts: dict[str, int] | None = None
    last_active: float | None = None  # when the queue was last seen with messages
    awake_at: float = 0.0  # datapoints are withheld until then


@dataclass
class _Track:
    history: deque[float | None]
    last_eval: float = 0.0


def breaching(value: float | None, alarm: dict[str, Any]) -> bool | None:
    """Whether one datapoint breaches; None for missing data."""
    if value is None:
        return None
    compare = _COMPARE.get(alarm.get("ComparisonOperator", ""))
    if compare is None:
        return None
    return compare(value, float(alarm.get("Threshold", 0.0)))


def next_state(history: list[float | None], alarm: dict[str, Any], current: str) -> str:
    """The state an alarm moves to after its last `EvaluationPeriods` datapoints."""
    treat = alarm.get("TreatMissingData") or "missing"
    outcomes: list[bool | None] = [breaching(v, alarm) for v in history]
    if treat == "breaching":
        outcomes = [True if o is None else o for o in outcomes]
    elif treat == "notBreaching":
        outcomes = [False if o is None else o for o in outcomes]
    present = [o for o in outcomes if o is not None]
    to_alarm = int(alarm.get("DatapointsToAlarm") or alarm.get("EvaluationPeriods") or 1)
    if sum(1 for o in present if o) >= to_alarm:
        return "ALARM"
    if present:
        return "OK"
    if treat == "ignore":
        return current
    return "INSUFFICIENT_DATA"


def notification(
    alarm: dict[str, Any], old: str, new: str, reason: str, account_id: str, region: str
) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+0000"
    return {
        "AlarmName": alarm["AlarmName"],
        "AlarmDescription": alarm.get("AlarmDescription"),
        "AWSAccountId": account_id,
        "AlarmConfigurationUpdatedTimestamp": str(alarm.get("AlarmConfigurationUpdatedTimestamp", "")),
        "NewStateValue": new,
        "NewStateReason": reason,
        "StateChangeTime": now,
        "Region": REGION_NAMES.get(region, region),
        "AlarmArn": alarm.get("AlarmArn"),
        "OldStateValue": old,
        "OKActions": alarm.get("OKActions", []),
        "AlarmActions": alarm.get("AlarmActions", []),
        "InsufficientDataActions": alarm.get("InsufficientDataActions", []),
        "Trigger": {
            "MetricName": alarm.get("MetricName"),
            "Namespace": alarm.get("Namespace"),
            "StatisticType": "Statistic",
            "Statistic": str(alarm.get("Statistic", "")).upper(),
            "Unit": alarm.get("Unit"),
            "Dimensions": [{"value": d["Value"], "name": d["Name"]} for d in alarm.get("Dimensions", [])],
            "Period": alarm.get("Period"),
            "EvaluationPeriods": alarm.get("EvaluationPeriods"),
            "DatapointsToAlarm": alarm.get("DatapointsToAlarm"),
            "ComparisonOperator": alarm.get("ComparisonOperator"),
            "Threshold": float(alarm.get("Threshold", 0.0)),
            "TreatMissingData": alarm.get("TreatMissingData", "missing"),
            "EvaluateLowSampleCountPercentile": "",
        },
    }


class AlarmEvaluator(Periodic):
    name = "alarm-evaluator"

    def __init__(
        self,
        cloudwatch: Any,
        sqs: Any,
        sns: Any,
        *,
        account_id: str,
        region: str,
        time_scale: float = 1 / 60,
        tick_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        queue_counts: Callable[[str], dict[str, int] | None] | None = None,
        definitions_ttl_s: float = 1.0,
        aws_timing: bool = False,
        wake_delay_s: float = WAKE_DELAY_S,
    ) -> None:
        super().__init__(tick_s)
        self.aws_timing = aws_timing
        self.wake_delay_s = wake_delay_s
        self._published: dict[str, _Published] = {}
        # The queue's Approximate* counts by name, read where CloudWatch reads them (SQS itself), or None
        # when the queue is gone. Without it they are asked for over the SQS API: two requests per alarm
        # per period, which with 50 tenants was about half of the local stack's CPU.
        self._queue_counts = queue_counts
        self._definitions_ttl_s = definitions_ttl_s
        self._definitions: list[dict[str, Any]] = []
        self._definitions_at = float("-inf")
        self._cw = cloudwatch
        self._sqs = sqs
        self._sns = sns
        self._account = account_id
        self._region = region
        self.time_scale = time_scale
        self._clock = clock
        self._tracks: dict[str, _Track] = {}
        self.transitions: list[Transition] = []
        self._lock = threading.Lock()

    def metric_value(self, alarm: dict[str, Any]) -> float | None:
        if alarm.get("Namespace") != "AWS/SQS":
            return self._put_value(alarm)
        attribute = SQS_METRICS.get(alarm.get("MetricName", ""))
        queue = next((d["Value"] for d in alarm.get("Dimensions", []) if d["Name"] == "QueueName"), None)
        if attribute is None or queue is None:
            return None
        if self.aws_timing:
            counts = self._published_counts(queue)
            return None if counts is None else float(counts[attribute])
        if self._queue_counts is not None:
            counts = self._queue_counts(queue)
            return None if counts is None else float(counts[attribute])
        try:
            url = self._sqs.get_queue_url(QueueName=queue)["QueueUrl"]
            attrs = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[attribute])
        except ClientError:
            return None  # the queue is gone: missing data
        return float(attrs["Attributes"][attribute])

    def _put_value(self, alarm: dict[str, Any]) -> float | None:
        """A metric something put into CloudWatch (PutMetricData: the sweeper's oldest queued email), as the
        alarm's statistic over its last period of real time; None (missing data) when nothing was put. AWS's
        own Lambda and SES metrics are never put here, and stay missing. Real time, not the compressed
        period: what puts these (a schedule) runs at its real rate, a datapoint a minute."""
        namespace = str(alarm.get("Namespace", ""))
        if namespace.startswith("AWS/") and namespace not in PUT_HERE:
            return None  # AWS's own (Lambda's): nothing here puts them, and a read scans every datapoint
        period = max(60, int(alarm.get("Period") or 60))
        end = datetime.now(UTC)
        try:
            points = self._cw.get_metric_statistics(
                Namespace=alarm["Namespace"],
                MetricName=alarm.get("MetricName", ""),
                Dimensions=alarm.get("Dimensions", []),
                StartTime=end - timedelta(seconds=period),
                EndTime=end + timedelta(seconds=1),
                Period=period,
                Statistics=[alarm.get("Statistic") or "Maximum"],
            )["Datapoints"]
        except (ClientError, BotoCoreError):
            return None  # the endpoint going away (a stop): missing data, not every later alarm's tick lost
        values = [float(p[alarm.get("Statistic") or "Maximum"]) for p in points]
        return max(values) if values else None

    def _live_counts(self, queue: str) -> dict[str, int] | None:
        if self._queue_counts is not None:
            return self._queue_counts(queue)
        try:
            url = self._sqs.get_queue_url(QueueName=queue)["QueueUrl"]
            attrs = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(SQS_METRICS.values()))
        except ClientError:
            return None
        return {k: int(v) for k, v in attrs["Attributes"].items()}

    def _published_counts(self, queue: str) -> dict[str, int] | None:
        """The counts SQS last published for `queue` (aws_timing): once a minute, late after a sleep."""
        now = self._clock()
        p = self._published.setdefault(queue, _Published())
        minute = int(now // 60)
        if p.minute != minute:
            p.minute = minute
            counts = self._live_counts(queue)
            active = counts is not None and any(counts.values())
            if active:
                if p.last_active is None or now - p.last_active > INACTIVE_AFTER_S:
                    p.awake_at = now + self.wake_delay_s  # waking up: nothing published for a while
                p.last_active = now
            p.counts = None if now < p.awake_at else counts
        return p.counts

    def alarms(self, fresh: bool = False) -> list[dict[str, Any]]:
        """The alarms' definitions, read again at most every `definitions_ttl_s` (unless `fresh`)."""
        now = self._clock()
        if fresh or now - self._definitions_at >= self._definitions_ttl_s:
            out: list[dict[str, Any]] = []
            for page in self._cw.get_paginator("describe_alarms").paginate(AlarmTypes=["MetricAlarm"]):
                out.extend(page.get("MetricAlarms", []))
            self._definitions, self._definitions_at = out, now
        return self._definitions

    def evaluate_once(self, force: bool = False) -> list[Transition]:
        """Evaluate every alarm whose period (scaled) has passed; `force` evaluates all now."""
        changes: list[Transition] = []
        now = self._clock()
        with self._lock:
            alarms = self.alarms(fresh=force)
            names = {a["AlarmName"] for a in alarms}
            for gone in set(self._tracks) - names:
                del self._tracks[gone]
            for alarm in alarms:
                name = alarm["AlarmName"]
                periods = int(alarm.get("EvaluationPeriods") or 1)
                track = self._tracks.get(name)
                if track is None or track.history.maxlen != periods:
                    track = _Track(deque(maxlen=periods))
                    self._tracks[name] = track
                interval = float(alarm.get("Period") or 60) * self.time_scale
                if not force and track.last_eval and now - track.last_eval < interval:
                    continue
                track.last_eval = now
                value = self.metric_value(alarm)
                track.history.append(value)
                old = alarm.get("StateValue", "INSUFFICIENT_DATA")
                new = next_state(list(track.history), alarm, old)
                if new != old:
                    changes.append(self._transition(alarm, old, new, value))
                    alarm["StateValue"] = new  # the cached definition follows the state it was set to
            self.transitions.extend(changes)
        return changes

    def _transition(self, alarm: dict[str, Any], old: str, new: str, value: float | None) -> Transition:
        shown = "no datapoint" if value is None else f"1 datapoint [{value}]"
        reason = (
            f"Threshold Crossed: {shown} was "
            f"{'' if new == 'ALARM' else 'not '}{alarm.get('ComparisonOperator')} "
            f"the threshold ({float(alarm.get('Threshold', 0.0))})."
        )
        self._cw.set_alarm_state(AlarmName=alarm["AlarmName"], StateValue=new, StateReason=reason)
        t = Transition(alarm["AlarmName"], old, new)
        if not alarm.get("ActionsEnabled", True):
            return t
        actions = {
            "ALARM": "AlarmActions",
            "OK": "OKActions",
            "INSUFFICIENT_DATA": "InsufficientDataActions",
        }[new]
        message = json.dumps(notification(alarm, old, new, reason, self._account, self._region))
        subject = f'{new}: "{alarm["AlarmName"]}" in {REGION_NAMES.get(self._region, self._region)}'
        for arn in alarm.get(actions, []):
            if arn.startswith("arn:aws:sns:"):
                self._sns.publish(TopicArn=arn, Subject=subject[:100], Message=message)
                t.notified.append(arn)
        return t

    def tick(self) -> None:
        self.evaluate_once()
