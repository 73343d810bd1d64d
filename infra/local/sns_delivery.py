"""Emulator: SNS-to-Lambda delivery for the app's `on_sns_message` handlers.

moto stores SNS topics and delivers to SQS, but cannot invoke Lambda. The gateway hands this class
every Publish and PublishBatch that moto accepted (with the MessageId moto gave it), and each of the
topic's Lambda subscribers is invoked asynchronously with the record Lambda would get
(`Records[0].Sns`), with Lambda's retries for async events.

An earlier version subscribed an SQS "tap" queue per handler and polled it: four extra requests per
message (receive, delete, queue look-ups) through the same process, about a third of the local
stack's requests per email. Handing the publish over in process delivers the same records with none.

`duplicates` is the fault hook of the soak test: how many extra copies of a delivery to make, as
SNS's at-least-once delivery sometimes does.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infra.local.lambda_runtime import FunctionRunner, LocalFunction


@dataclass(frozen=True)
class Publication:
    """One message SNS accepted for a topic, as its subscribers see it."""

    topic_arn: str
    message: str
    message_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    subject: str | None = None
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> {"Type", "Value"}
    timestamp: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + "000Z")


@dataclass
class Subscription:
    topic_arn: str
    function: LocalFunction
    subscription_arn: str


def lambda_sns_record(pub: Publication, subscription_arn: str) -> dict[str, Any]:
    """The record Lambda receives from SNS for one publication."""
    return {
        "EventSource": "aws:sns",
        "EventVersion": "1.0",
        "EventSubscriptionArn": subscription_arn,
        "Sns": {
            "Type": "Notification",
            "MessageId": pub.message_id,
            "TopicArn": pub.topic_arn,
            "Subject": pub.subject,
            "Message": pub.message,
            "Timestamp": pub.timestamp,
            "SignatureVersion": "1",
            "Signature": "",
            "SigningCertUrl": "",
            "UnsubscribeUrl": "",
            "MessageAttributes": dict(pub.attributes),
        },
    }


class SnsDelivery:
    def __init__(self, runner: FunctionRunner) -> None:
        self._runner = runner
        self.subscriptions: list[Subscription] = []
        self._pending = 0
        self._cv = threading.Condition()
        self.duplicates: Callable[[Publication, LocalFunction], int] = lambda _pub, _fn: 0
        self.delivered = 0  # invocations started, duplicates included

    def subscribe(self, topic_arn: str, fn: LocalFunction) -> Subscription:
        sub = Subscription(topic_arn, fn, f"{topic_arn}:{uuid.uuid4()}")
        self.subscriptions.append(sub)
        return sub

    def subscribes(self, topic_arn: str) -> bool:
        return any(s.topic_arn == topic_arn for s in self.subscriptions)

    def publish(self, pub: Publication) -> None:
        """Deliver one accepted publication to each Lambda subscribed to its topic."""
        for sub in self.subscriptions:
            if sub.topic_arn != pub.topic_arn:
                continue
            copies = 1 + max(0, self.duplicates(pub, sub.function))
            for _ in range(copies):
                self._deliver(sub, pub)

    def _deliver(self, sub: Subscription, pub: Publication) -> None:
        event = {"Records": [lambda_sns_record(pub, sub.subscription_arn)]}

        def done(_ok: bool) -> None:
            # Failed after retries: recorded by the runner as a failed event, as Lambda would send it
            # to its on-failure destination. Either way SNS's delivery is complete.
            with self._cv:
                self._pending -= 1
                self._cv.notify_all()

        with self._cv:
            self._pending += 1
            self.delivered += 1
        try:
            self._runner.invoke_async(sub.function, event, on_done=done)
        except RuntimeError:  # the runtime is stopping: nothing will run it
            done(False)

    def start(self) -> None:
        """Nothing to start: deliveries arrive from the gateway (kept for the stack's life cycle)."""

    def stop(self) -> None:
        """Nothing to stop: the runtime's shutdown ends what is running."""

    @property
    def pending(self) -> int:
        """Deliveries handed to the runtime whose invocation has not finished."""
        with self._cv:
            return self._pending

    def backlog(self) -> int:
        """Messages published to the app's topics and not yet delivered or finished."""
        return self.pending


# --- the wire: what the gateway reads of a Publish / PublishBatch and of moto's answer ---------------
def _attributes(form: dict[str, str], prefix: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    n = 1
    while f"{prefix}MessageAttributes.entry.{n}.Name" in form:
        p = f"{prefix}MessageAttributes.entry.{n}."
        kind = form.get(p + "Value.DataType", "String")
        value = form.get(p + "Value.BinaryValue") if kind.startswith("Binary") else form.get(p + "Value.StringValue")
        out[form[p + "Name"]] = {"Type": "Binary" if kind.startswith("Binary") else "String", "Value": value or ""}
        n += 1
    return out


def _strip(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def accepted_publications(body: bytes, response: bytes) -> list[Publication]:
    """The publications of a Publish or PublishBatch request that moto's answer says it accepted."""
    from urllib.parse import parse_qs
    from xml.etree import ElementTree

    form = {k: v[0] for k, v in parse_qs(body.decode("utf-8"), keep_blank_values=True).items()}
    topic = form.get("TopicArn")
    if not topic:
        return []
    try:
        root = ElementTree.fromstring(response)
    except ElementTree.ParseError:
        return []
    action = form.get("Action")
    if action == "Publish":
        ids = [e.text or "" for e in root.iter() if _strip(e.tag) == "MessageId"]
        if not ids:
            return []
        return [Publication(topic, form.get("Message", ""), ids[0], form.get("Subject"), _attributes(form, ""))]
    if action != "PublishBatch":
        return []
    accepted: dict[str, str] = {}
    for el in root.iter():
        if _strip(el.tag) == "Successful":
            for member in el:
                fields = {_strip(c.tag): c.text or "" for c in member}
                accepted[fields.get("Id", "")] = fields.get("MessageId", "")
    out: list[Publication] = []
    n = 1
    while f"PublishBatchRequestEntries.member.{n}.Id" in form:
        p = f"PublishBatchRequestEntries.member.{n}."
        entry_id = form[p + "Id"]
        if entry_id in accepted:
            out.append(
                Publication(
                    topic,
                    form.get(p + "Message", ""),
                    accepted[entry_id],
                    form.get(p + "Subject"),
                    _attributes(form, p),
                )
            )
        n += 1
    return out
