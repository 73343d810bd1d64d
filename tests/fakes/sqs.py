"""SQS in memory, as the drainer, the enqueuer and the parking see it, refusing what SQS refuses (its
characters and its 1 MiB in bytes) with the local stack's own decisions (infra.local.sqs_limits), so that a
unit test meets the same limits as the stricter stack."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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


class ListedQueues:
    """ListQueues as SQS answers it and botocore's `list_queues` paginator asks: without MaxResults at most
    1,000 URLs and no NextToken (SQS Developer Guide), with it (1 to 1,000) a page and a NextToken while more
    are left; the paginator sends MaxResults only when its PaginationConfig has a PageSize. `calls` counts
    the requests."""

    MOST = 1000

    def __init__(self, urls: Iterable[str]) -> None:
        self.urls = list(urls)
        self.calls = 0

    def list_queues(
        self, *, QueueNamePrefix: str = "", MaxResults: int | None = None, NextToken: str | None = None
    ) -> dict[str, Any]:
        self.calls += 1
        named = sorted(u for u in self.urls if u.rsplit("/", 1)[-1].startswith(QueueNamePrefix))
        if MaxResults is None:
            return {"QueueUrls": named[: self.MOST]} if named else {}
        if not 1 <= MaxResults <= self.MOST:
            raise ClientError({"Error": {"Code": "InvalidParameterValue", "Message": "MaxResults"}}, "ListQueues")
        start = int(NextToken or 0)
        page: dict[str, Any] = {"QueueUrls": named[start : start + MaxResults]}
        if start + MaxResults < len(named):
            page["NextToken"] = str(start + MaxResults)
        return page

    def get_paginator(self, operation_name: str) -> Any:
        assert operation_name == "list_queues"
        return _QueuePages(self)


class _QueuePages:
    def __init__(self, sqs: ListedQueues) -> None:
        self._sqs = sqs

    def paginate(
        self, *, QueueNamePrefix: str = "", PaginationConfig: dict[str, Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        size = (PaginationConfig or {}).get("PageSize")
        token: str | None = None
        while True:
            if size is None:
                page = self._sqs.list_queues(QueueNamePrefix=QueueNamePrefix)
            else:
                page = self._sqs.list_queues(QueueNamePrefix=QueueNamePrefix, MaxResults=size, NextToken=token)
            yield page
            token = page.get("NextToken")
            if not token:
                return
