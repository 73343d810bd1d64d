"""What is done with a received SQS message once its outcome is known (the Actions of chalicelib.send.outcomes).

Every action but DELETE leaves the email on the queue, as the same message or as a fresh copy. A fresh
copy is sent before the original is deleted, so a crash in between leaves two copies and the ledger's
claim sends one; never none. A fresh copy goes onto the queue through chalicelib.queueing (`send_copy`), the
one place that puts messages on a queue.
"""

from __future__ import annotations

import math
import time
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.core import log
from chalicelib.core.contract import MAX_DELAY_S
from chalicelib.core.ports import SqsMessageActions
from chalicelib.core.resources import MAX_RECEIVE_COUNT
from chalicelib.queueing.enqueuer import send_copy
from chalicelib.send.outcomes import Decision, Outcome
from chalicelib.stores.payloads import PayloadStore

MAX_BACK_OFF_S = 900
THROTTLES_ATTRIBUTE = "moonsend-throttles"


class MessageActions:
    def __init__(self, sqs: SqsMessageActions, payloads: PayloadStore) -> None:
        self._sqs = sqs
        self._payloads = payloads

    def delete(self, url: str, messages: list[dict[str, Any]]) -> None:
        """Delete recorded messages, ten per call, and their S3 bodies (the list is emptied)."""
        while messages:
            batch, messages[:] = messages[:10], messages[10:]
            try:
                resp = self._sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)],
                )
            except Exception as exc:  # throttled past the SDK's retries: as if each delete had failed
                # Their outcomes are recorded: back after their visibility timeout, each is found done and
                # deleted then. Raising would fail the drain with every message in flight.
                log.warning("delete not made, messages come back", count=len(batch), error=type(exc).__name__)
                continue
            failed = {bad["Id"] for bad in resp.get("Failed", [])}
            for bad in resp.get("Failed", []):
                # Recorded already; if it comes back, the next drain sees it again.
                log.warning("delete failed", code=bad.get("Code"), reason=bad.get("Message"))
            for i, m in enumerate(batch):
                if str(i) not in failed:
                    self._discard(m["Body"])

    def requeue_later(self, url: str, message: dict[str, Any]) -> int:
        """Put a throttled email back with a growing delay, as a fresh message (the delay, in seconds).

        Throttling is not the email's fault: holding the same message invisible would count each try
        against the queue's maxReceiveCount and a throttling storm would dead-letter good email. A new
        copy starts its count afresh.
        """
        throttles = int(message.get("MessageAttributes", {}).get(THROTTLES_ATTRIBUTE, {}).get("StringValue", "0"))
        delay = min(MAX_DELAY_S, 2 ** min(throttles + 1, 10))
        attributes = {THROTTLES_ATTRIBUTE: {"DataType": "Number", "StringValue": str(throttles + 1)}}
        send_copy(self._sqs, url, message["Body"], delay, attributes)
        self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return delay

    def back_off(self, url: str, message: dict[str, Any]) -> int | None:
        """The same message invisible for a delay that grows with its receives (the delay, in seconds;
        None: not applied)."""
        delay = min(MAX_BACK_OFF_S, 2 ** min(_receives(message), 10))
        try:
            self._sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=delay
            )
        except ClientError as exc:
            # SQS delivered this message twice and the other copy's drainer has deleted it: nothing to
            # back off. (Any other refusal leaves the message to come back after its visibility timeout.)
            log.info("back-off not applied", queue=url.rsplit("/", 1)[-1], code=exc.response["Error"]["Code"])
            return None
        return delay

    def wait_for_claim(self, url: str, message: dict[str, Any], decision: Decision) -> int | None:
        """Another copy's claim is live: look again later (in how many seconds; None: not applied).

        On its last receive but one, backing off once more would let SQS dead-letter it with no outcome
        recorded, so a fresh copy (its count started again) goes instead: soon for a drainer at work; for a
        dead one's (whose Send event is what it waits for) just after its claim expires (at most SQS's 15
        minutes of delay; it waits again if the claim is longer)."""
        if _receives(message) < MAX_RECEIVE_COUNT - 1:
            return self.back_off(url, message)
        delay = _claim_delay(decision)
        send_copy(self._sqs, url, message["Body"], delay)
        try:
            self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        except ClientError as exc:  # deleted already by the other copy's drainer: the new copy finds it sent
            log.info("requeued copy's original already gone", code=exc.response["Error"]["Code"])
        return delay

    def visible_now(self, url: str, message: dict[str, Any]) -> None:
        """Back on the queue at once. For a message on its last receive, the next receive passes
        maxReceiveCount and SQS moves it to the dead-letter queue."""
        self._sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)

    def hand_back(self, url: str, message: dict[str, Any]) -> None:
        """Back on the queue at once for another drainer of it, as a fresh copy: being received by a drainer
        that may not send it must not count toward the dead-letter queue (a helper restarted every few
        seconds on a queue of mixed rates would receive the same email again and again)."""
        send_copy(self._sqs, url, message["Body"], 0)
        try:
            self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        except ClientError as exc:  # deleted already by the other copy's drainer: the fresh copy finds it sent
            log.info("handed-back original already gone", code=exc.response["Error"]["Code"])

    def keep_on_queue(self, url: str, message: dict[str, Any]) -> None:
        """A paused tenant's email back for later as a fresh message (its redelivery budget intact), when it
        cannot be parked."""
        send_copy(self._sqs, url, message["Body"], MAX_DELAY_S)
        self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def _discard(self, body: str) -> None:
        try:
            self._payloads.discard(body)
        except Exception as exc:
            log.warning("payload not deleted", error=type(exc).__name__)


def _claim_delay(decision: Decision) -> int:
    """Seconds until a waiting copy's fresh twin should be looked at: a live sender's claim ends within
    seconds (32 s); a dead one's when the claim expires (a second after, at most SQS's 15 minutes)."""
    if decision.outcome is not Outcome.ORPHANED:
        return 2**MAX_RECEIVE_COUNT
    if decision.claim_until_ms is None:
        return MAX_DELAY_S
    return max(2**MAX_RECEIVE_COUNT, min(MAX_DELAY_S, math.ceil(decision.claim_until_ms / 1000 - time.time()) + 1))


def _receives(message: dict[str, Any]) -> int:
    return int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
