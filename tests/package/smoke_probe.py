"""Run as a process of its own by tests/package/test_smoke.py (a second local stack cannot share a process
with the worker's): a local stack whose SES events topic delivers to nothing, then the smoke against it.
Its exit status is the smoke's."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from chalicelib.core.resources import resources_for
from infra import cli
from infra.local.stack import LocalStack, StackConfig


def main() -> int:
    with tempfile.TemporaryDirectory() as outbox:
        config = StackConfig(port=0, api_port=0, outbox=Path(outbox), ses_latency_ms=5.0)
        with LocalStack(config) as stack:
            r = resources_for("moonsend", "local", config.account_id)
            sns = stack.client("sns")
            topic = stack.topic_arns[r.events_topic.name]
            # SES still publishes its events; nothing reaches the events queue, nor ses_events.
            for sub in sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]:
                sns.unsubscribe(SubscriptionArn=sub["SubscriptionArn"])
            names = ("cloudformation", "s3", "sqs", "cloudwatch", "dynamodb", "sns", "sts", "sesv2")
            clients = {n: stack.client(n) for n in names}
            sender = "smoke@moonsend.example"
            clients["sesv2"].create_email_identity(EmailIdentity=sender)
            return cli._smoke(clients, "local", sender, timeout=float(sys.argv[1]))


if __name__ == "__main__":
    raise SystemExit(main())
