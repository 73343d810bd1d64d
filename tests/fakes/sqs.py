"""SQS in memory, as the drainer, the enqueuer and the parking see it, refusing what SQS refuses (its
characters and its 1 MiB in bytes) with the local stack's own decisions (infra.local.sqs_limits), so that a
unit test meets the same limits as the stricter stack."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError

from infra.local.sqs_limits import batch_verdict, send_refusal


class FakeSqs:
    """One queue: `waiting` messages to receive; what was deleted, re-hidden, sent back or sent in batches.

    `fail_ids`: SendMessageBatch entry ids SQS refuses (the caller's fault), as for an oversized body."""

    def __init__(
        self, bodies: Iterable[str] = (), receives: int = 1, sent_ms: int | None = None, fail_ids: Iterable[str] = ()
    ) -> None:
        self.waiting: list[dict[str, Any]] = [
            {
                "MessageId": str(i),
                "ReceiptHandle": f"rh{i}",
                "Body": b,
                "Attributes": {"ApproximateReceiveCount": str(receives)}
                | ({"SentTimestamp": str(sent_ms)} if sent_ms else {}),
            }
            for i, b in enumerate(bodies)
        ]
        self.deleted: list[str] = []  # receipt handles
        self.visibility: list[tuple[str, int]] = []
        self.requeued: list[tuple[str, int, dict[str, Any] | None]] = []
        self.batches: list[tuple[str, list[dict[str, Any]]]] = []
        self.batched: list[str] = []  # bodies sent in batches
        self.fail_ids = set(fail_ids)

    def get_queue_url(self, QueueName: str) -> dict[str, Any]:
        return {"QueueUrl": f"https://sqs/{QueueName}"}

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        return {"Attributes": {"ApproximateNumberOfMessages": str(len(self.waiting))}}

    def list_queue_tags(self, QueueUrl: str) -> dict[str, Any]:
        return {"Tags": {}}  # a queue of no tenant (the free queue's, or a tenant queue's before its tag)

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int, **_kw: Any) -> dict[str, Any]:
        out, self.waiting = self.waiting[:MaxNumberOfMessages], self.waiting[MaxNumberOfMessages:]
        return {"Messages": out} if out else {}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.deleted += [e["ReceiptHandle"] for e in Entries]
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int) -> None:
        self.visibility.append((ReceiptHandle, VisibilityTimeout))

    def send_message(
        self,
        QueueUrl: str,
        MessageBody: str,
        DelaySeconds: int,
        MessageAttributes: dict[str, Any] | None = None,
    ) -> None:
        params: dict[str, Any] = {"MessageBody": MessageBody, "MessageAttributes": MessageAttributes or {}}
        refused = send_refusal(params)
        if refused is not None:
            raise ClientError({"Error": {"Code": refused.code, "Message": refused.message}}, "SendMessage")
        self.requeued.append((MessageBody, DelaySeconds, MessageAttributes))

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        verdict = batch_verdict({"Entries": Entries})
        if verdict.refusal is not None:
            error = {"Error": {"Code": verdict.refusal.code, "Message": verdict.refusal.message}}
            raise ClientError(error, "SendMessageBatch")
        refused = {f["Id"]: f for f in verdict.failed}
        self.batches.append((QueueUrl, [e for e in Entries if e["Id"] not in refused]))
        self.batched += [e["MessageBody"] for e in Entries if e["Id"] not in self.fail_ids and e["Id"] not in refused]
        ok = [{"Id": e["Id"]} for e in Entries if e["Id"] not in self.fail_ids and e["Id"] not in refused]
        bad = [
            {"Id": e["Id"], "Code": "InvalidMessageContents", "Message": "no", "SenderFault": True}
            for e in Entries
            if e["Id"] in self.fail_ids
        ]
        return {"Successful": ok, "Failed": bad + list(refused.values())}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:
        self.deleted.append(ReceiptHandle)
