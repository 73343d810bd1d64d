"""What watches a stage while its operator sleeps: the template's alarms, the topic they notify, a dashboard.

Every alarm is the stage's, none per tenant: an idle tenant costs nothing (CloudWatch bills $0.10 per
standard alarm metric a month, so 10,000 tenants' alarms would cost more than their email). Each alarm
names a metric that AWS publishes (SQS, Lambda, SES; their documented names) or that moonsend writes (the
sweeper's `OldestQueuedEmailSeconds`, namespace `moonsend`), and each has a runbook line in
docs/operations.md ("Alarms"), which a test holds to this list.

The alarms notify the stage's operator-alerts topic (encrypted with the topics' key, which CloudWatch may
use: infra.cfn). Its e-mail subscription is the deploy parameter `OperatorEmail` (`moonsend deploy
--operator-email`): AWS mails a confirmation link first, and nothing arrives until it is clicked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chalicelib.core.metrics import SERVICE
from chalicelib.core.resources import Resources

OPERATOR_EMAIL = "OperatorEmail"
HAS_OPERATOR_EMAIL = "HasOperatorEmail"
# The sweeper's metric: the age of the oldest email over every send queue of the stage (chalicelib.jobs.sweeper).
NAMESPACE = "moonsend"
OLDEST_QUEUED = "OldestQueuedEmailSeconds"
# An email waiting this long on a send queue: a drain stuck, SES throttling (a paused tenant's or campaign's
# email is parked off its queue). A campaign whose recipients / rate is longer than this trips it at its
# tail, so a stage that sends such campaigns sets MOONSEND_OLDEST_QUEUED_LIMIT_S above the longest.
OLDEST_QUEUED_LIMIT_S = 3 * 3600
# Webhook deliveries waiting this long: endpoints are failing or deliver_webhooks cannot keep up.
WEBHOOK_BACKLOG_LIMIT_S = 900


@dataclass(frozen=True)
class AlarmSpec:
    """One alarm, as data: CloudFormation's properties are made from it, and the runbook is checked against it."""

    logical_id: str
    name: str
    meaning: str
    namespace: str
    metric: str
    dimensions: tuple[tuple[str, Any], ...]
    statistic: str
    period_s: int
    threshold: float
    comparison: str = "GreaterThanOrEqualToThreshold"
    evaluation_periods: int = 1
    # No data is no trouble for most (an idle stage publishes nothing); for a metric put every minute, no
    # data means its writer stopped: `missing`, and the operator is told of INSUFFICIENT_DATA too.
    treat_missing: str = "notBreaching"

    def resource(self, topic_id: str) -> dict[str, Any]:
        return {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmName": self.name,
                "AlarmDescription": f"{self.meaning} Runbook: docs/operations.md, Alarms, {self.name}.",
                "Namespace": self.namespace,
                "MetricName": self.metric,
                "Dimensions": [{"Name": n, "Value": v} for n, v in self.dimensions],
                "Statistic": self.statistic,
                "Period": self.period_s,
                "EvaluationPeriods": self.evaluation_periods,
                "DatapointsToAlarm": self.evaluation_periods,
                "Threshold": self.threshold,
                "ComparisonOperator": self.comparison,
                "TreatMissingData": self.treat_missing,
                "AlarmActions": [{"Ref": topic_id}],
                "OKActions": [{"Ref": topic_id}],
                **({"InsufficientDataActions": [{"Ref": topic_id}]} if self.treat_missing == "missing" else {}),
            },
        }


def _not_empty(logical_id: str, queue_logical_id: str, name: str, meaning: str) -> AlarmSpec:
    return AlarmSpec(
        logical_id,
        f"{name}-not-empty",
        meaning,
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        (("QueueName", {"Fn::GetAtt": [queue_logical_id, "QueueName"]}),),
        "Maximum",
        300,
        1,
    )


@dataclass(frozen=True)
class Limits:
    """The stage's thresholds, from its `.chalice/config.json` variables (the functions' own settings)."""

    bounce: float = 0.05  # the reputation guard's (MOONSEND_BOUNCE_LIMIT)
    complaint: float = 0.001  # MOONSEND_COMPLAINT_LIMIT
    oldest_queued_s: int = OLDEST_QUEUED_LIMIT_S  # MOONSEND_OLDEST_QUEUED_LIMIT_S

    @classmethod
    def of(cls, variables: dict[str, str]) -> Limits:
        return cls(
            float(variables.get("MOONSEND_BOUNCE_LIMIT", cls.bounce)),
            float(variables.get("MOONSEND_COMPLAINT_LIMIT", cls.complaint)),
            int(variables.get("MOONSEND_OLDEST_QUEUED_LIMIT_S", cls.oldest_queued_s)),
        )


def alarms(r: Resources, limits: Limits) -> list[AlarmSpec]:
    """The stage's alarms; the reputation ones at half the reputation guard's limits, before AWS reviews the
    account (at about 5% bounces and 0.1% complaints)."""
    bounce_limit, complaint_limit = limits.bounce, limits.complaint
    send_emails = r.function_name("send_emails")
    return [
        _not_empty(
            "FailedInvocationsAlarm",
            r.failed_invocations_queue.logical_id,
            r.failed_invocations_queue.name,
            "An asynchronous invocation failed every try: its event waits to be replayed.",
        ),
        _not_empty(
            "DeadLettersAlarm",
            r.dead_letter_queue.logical_id,
            r.dead_letter_queue.name,
            "SQS gave up on a queued email after five receives.",
        ),
        _not_empty(
            "SesEventsDeadLettersAlarm",
            r.events_dead_letter_queue.logical_id,
            r.events_dead_letter_queue.name,
            "An SES event could not be read in five tries.",
        ),
        _not_empty(
            "WebhookDeadLettersAlarm",
            r.webhooks_dead_letter_queue.logical_id,
            r.webhooks_dead_letter_queue.name,
            "A webhook delivery could not be handled at all.",
        ),
        AlarmSpec(
            "SendErrorsAlarm",
            f"{r.prefix}-send-errors",
            "send_emails ended with an error (Lambda's Errors metric).",
            "AWS/Lambda",
            "Errors",
            (("FunctionName", send_emails),),
            "Sum",
            300,
            1,
        ),
        AlarmSpec(
            "OldestQueuedEmailAlarm",
            f"{r.prefix}-oldest-queued-email",
            f"An email has waited over {limits.oldest_queued_s // 60} minutes on a send queue (the sweeper's measure).",
            NAMESPACE,
            OLDEST_QUEUED,
            (("stage", r.stage),),
            "Maximum",
            300,
            limits.oldest_queued_s,
            # Two periods of ten minutes: a queue the sweeper reaches only some minutes (a sweep short of
            # time) does not flap between ALARM and OK.
            evaluation_periods=2,
            treat_missing="missing",  # the sweeper puts a datapoint every minute, 0 included
        ),
        AlarmSpec(
            "WebhookBacklogAlarm",
            f"{r.prefix}-webhook-backlog",
            f"A webhook delivery has waited over {WEBHOOK_BACKLOG_LIMIT_S // 60} minutes for its attempt.",
            "AWS/SQS",
            "ApproximateAgeOfOldestMessage",
            (("QueueName", {"Fn::GetAtt": [r.webhooks_queue.logical_id, "QueueName"]}),),
            "Maximum",
            300,
            WEBHOOK_BACKLOG_LIMIT_S,
        ),
        AlarmSpec(
            "BounceRateAlarm",
            f"{r.prefix}-bounce-rate",
            f"The platform account's bounce rate (SES's own measure) is at {bounce_limit / 2:.1%}, half the "
            "reputation guard's limit; AWS reviews an account at about 5%.",
            "AWS/SES",
            "Reputation.BounceRate",
            (),
            "Average",
            3600,
            bounce_limit / 2,
        ),
        AlarmSpec(
            "ComplaintRateAlarm",
            f"{r.prefix}-complaint-rate",
            f"The platform account's complaint rate (SES's own measure) is at {complaint_limit / 2:.2%}, half the "
            "reputation guard's limit; AWS reviews an account at about 0.1%.",
            "AWS/SES",
            "Reputation.ComplaintRate",
            (),
            "Average",
            3600,
            complaint_limit / 2,
        ),
    ]


def operator_alerts(r: Resources) -> dict[str, Any]:
    """The deploy parameter, and the topic's e-mail subscription when it is given."""
    return {
        "Parameters": {
            OPERATOR_EMAIL: {
                "Type": "String",
                "Default": "",
                "Description": "Where the stage's alarms are e-mailed (AWS asks the address to confirm first)",
            }
        },
        "Conditions": {HAS_OPERATOR_EMAIL: {"Fn::Not": [{"Fn::Equals": [{"Ref": OPERATOR_EMAIL}, ""]}]}},
        "Resources": {
            "OperatorAlertsEmail": {
                "Type": "AWS::SNS::Subscription",
                "Condition": HAS_OPERATOR_EMAIL,
                "Properties": {
                    "TopicArn": {"Ref": r.alerts_topic.logical_id},
                    "Protocol": "email",
                    "Endpoint": {"Ref": OPERATOR_EMAIL},
                },
            }
        },
    }


def drain_dimensions(stage: str, plan: str) -> tuple[str, ...]:
    """A drain's EMF record's dimensions (chalicelib.core.metrics; Powertools adds `service`): CloudWatch
    matches a metric by its whole set of dimensions, so a widget must name every one."""
    return ("stage", stage, "plan", plan, "service", SERVICE)


FUNCTIONS = ("precompile_email", "send_emails", "api_handler", "sweep_queues", "ses_events", "deliver_webhooks")


def dashboard(r: Resources) -> dict[str, Any]:
    """The stage's dashboard: sends and failures, SES throttles, queues, Lambda, webhooks, the ledger's stream."""

    def metric(namespace: str, name: str, *dims: str, stat: str = "Sum", label: str | None = None) -> list[Any]:
        return [namespace, name, *dims, {"stat": stat, **({"label": label} if label else {})}]

    def widget(title: str, metrics: list[list[Any]], x: int, y: int, w: int = 12) -> dict[str, Any]:
        return {
            "type": "metric",
            "x": x,
            "y": y,
            "width": w,
            "height": 6,
            "properties": {
                "title": title,
                "region": "${AWS::Region}",
                "period": 60,
                "view": "timeSeries",
                "metrics": metrics,
            },
        }

    emf = [
        metric(NAMESPACE, m, *drain_dimensions(r.stage, p), label=f"{m} ({p})")
        for m in ("Sent", "Failed")
        for p in ("paid", "free")
    ]
    throttled = [
        metric(NAMESPACE, "Throttled", *drain_dimensions(r.stage, p), label=f"throttled ({p})")
        for p in ("paid", "free")
    ]
    queues = (r.free_queue, r.dead_letter_queue, r.failed_invocations_queue, r.events_queue, r.webhooks_queue)
    depth = [
        metric("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", q.name, stat="Maximum") for q in queues
    ]
    oldest = [metric(NAMESPACE, OLDEST_QUEUED, "stage", r.stage, stat="Maximum", label="oldest queued email (s)")]
    oldest += [metric("AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", r.free_queue.name, stat="Maximum")]
    names = [r.function_name(f) for f in FUNCTIONS]
    errors = [metric("AWS/Lambda", "Errors", "FunctionName", n, label=n) for n in names]
    duration = [metric("AWS/Lambda", "Duration", "FunctionName", n, stat="p99", label=n) for n in names]
    concurrency = [
        metric("AWS/Lambda", "ConcurrentExecutions", "FunctionName", n, stat="Maximum", label=n) for n in names
    ]
    webhooks = [
        metric("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", r.webhooks_queue.name, stat="Maximum"),
        metric("AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", r.webhooks_queue.name, stat="Maximum"),
    ]
    stream = [metric("AWS/Lambda", "IteratorAge", "FunctionName", r.function_name("webhook_events"), stat="Maximum")]
    body = {
        "widgets": [
            widget("Sends and failures per minute", emf, 0, 0),
            widget("SES throttles", throttled, 12, 0),
            widget("Queue depth", depth, 0, 6),
            widget("Oldest queued email (s)", oldest, 12, 6),
            widget("Lambda errors", errors, 0, 12),
            widget("Lambda duration (p99, ms)", duration, 12, 12),
            widget("Lambda concurrency", concurrency, 0, 18),
            widget("Webhook backlog", webhooks, 12, 18),
            widget("The ledger's stream: iterator age (ms)", stream, 0, 24, 24),
        ]
    }
    return {
        "Dashboard": {
            "Type": "AWS::CloudWatch::Dashboard",
            "Properties": {"DashboardName": r.prefix, "DashboardBody": {"Fn::Sub": json.dumps(body)}},
        }
    }


def monitoring(r: Resources, limits: Limits) -> dict[str, Any]:
    """The template's monitoring: Parameters, Conditions and Resources to merge (infra.cfn.merge_template)."""
    alerts = operator_alerts(r)
    topic = r.alerts_topic.logical_id
    resources = {a.logical_id: a.resource(topic) for a in alarms(r, limits)}
    return {**alerts, "Resources": {**alerts["Resources"], **resources, **dashboard(r)}}
