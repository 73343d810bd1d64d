"""SNS-to-Lambda delivery for the app's `on_sns_message` handlers.

moto delivers SNS to SQS but cannot invoke Lambda. For each subscription the app declares, the
runtime subscribes a tap queue to the topic (a real SNS-to-SQS subscription in moto), polls it, and
invokes the handler asynchronously with the record Lambda would get (`Records[0].Sns`). A tap message
is deleted only when the invocation finished (after Lambda's retries), so nothing published is lost
while the stack runs.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from infra.local.lambda_runtime import FunctionRunner, LocalFunction


@dataclass
class Tap:
    topic_arn: str
    function: LocalFunction
    queue_url: str
    subscription_arn: str


def lambda_sns_record(envelope: dict[str, Any], subscription_arn: str) -> dict[str, Any]:
    """SNS's SQS envelope turned into the record Lambda receives from SNS."""
    attrs = {
        name: {"Type": v.get("Type", "String"), "Value": v.get("Value")}
        for name, v in (envelope.get("MessageAttributes") or {}).items()
    }
    return {
        "EventSource": "aws:sns",
        "EventVersion": "1.0",
        "EventSubscriptionArn": subscription_arn,
        "Sns": {
            "Type": envelope.get("Type", "Notification"),
            "MessageId": envelope.get("MessageId"),
            "TopicArn": envelope.get("TopicArn"),
            "Subject": envelope.get("Subject"),
            "Message": envelope.get("Message"),
            "Timestamp": envelope.get("Timestamp"),
            "SignatureVersion": envelope.get("SignatureVersion", "1"),
            "Signature": envelope.get("Signature", ""),
            "SigningCertUrl": envelope.get("SigningCertURL", ""),
            "UnsubscribeUrl": envelope.get("UnsubscribeURL", ""),
            "MessageAttributes": attrs,
        },
    }


class SnsDelivery:
    def __init__(self, sqs: Any, sns: Any, runner: FunctionRunner, tap_prefix: str) -> None:
        self._sqs = sqs
        self._sns = sns
        self._runner = runner
        self._prefix = tap_prefix
        self.taps: list[Tap] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pending = 0
        self._cv = threading.Condition()

    def subscribe(self, topic_arn: str, fn: LocalFunction) -> Tap:
        # Visible again only if the invocation (with Lambda's two retries) outlived its time.
        visibility = int(fn.timeout_s * 3 + 30)
        url = self._sqs.create_queue(
            QueueName=f"{self._prefix}-tap-{fn.handler_name}"[:80],
            Attributes={"VisibilityTimeout": str(min(visibility, 43200))},
        )["QueueUrl"]
        arn = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sub = self._sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=arn, ReturnSubscriptionArn=True)[
            "SubscriptionArn"
        ]
        tap = Tap(topic_arn, fn, url, sub)
        self.taps.append(tap)
        return tap

    def start(self) -> None:
        for tap in self.taps:
            t = threading.Thread(
                target=self._poll, args=(tap,), daemon=True, name=f"sns-tap-{tap.function.handler_name}"
            )
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    @property
    def pending(self) -> int:
        """Deliveries taken from a tap whose invocation has not finished."""
        with self._cv:
            return self._pending

    def backlog(self) -> int:
        """Messages published to the app's topics and not yet delivered or finished."""
        total = self.pending
        for tap in self.taps:
            a = self._sqs.get_queue_attributes(
                QueueUrl=tap.queue_url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            total += int(a["ApproximateNumberOfMessages"])
        return total

    def _poll(self, tap: Tap) -> None:
        while not self._stop.is_set():
            try:
                messages = self._sqs.receive_message(
                    QueueUrl=tap.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
                ).get("Messages", [])
            except Exception as exc:
                if self._stop.is_set():
                    return
                print(f"[sns] polling {tap.queue_url} failed: {exc}")
                self._stop.wait(1.0)
                continue
            for m in messages:
                self._deliver(tap, m)

    def _deliver(self, tap: Tap, m: dict[str, Any]) -> None:
        try:
            envelope = json.loads(m["Body"])
        except ValueError:
            envelope = {"Type": "Notification", "Message": m["Body"], "TopicArn": tap.topic_arn}
        event = {"Records": [lambda_sns_record(envelope, tap.subscription_arn)]}
        receipt = m["ReceiptHandle"]

        def done(_ok: bool) -> None:
            # Failed after retries: recorded by the runner as a failed event, as Lambda would
            # send it to its on-failure destination. Either way SNS's delivery is complete.
            try:
                self._sqs.delete_message(QueueUrl=tap.queue_url, ReceiptHandle=receipt)
            finally:
                with self._cv:
                    self._pending -= 1
                    self._cv.notify_all()

        with self._cv:
            self._pending += 1
        self._runner.invoke_async(tap.function, event, on_done=done)
