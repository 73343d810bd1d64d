"""The ports of the AWS clients the domain calls directly (S3's objects, SQS's queues), as `typing.Protocol`.

Declared beside chalicelib.core.aws, which builds the real clients. Unlike a store's one port, a client has
a port per consumer: a boto3 client has hundreds of calls, and each consumer's port names the few it makes,
so that its in-memory fake needs only those (chalicelib.stores.ports says how ports are kept). A boto3
client is typed `Any` and so satisfies any port; the in-memory fakes (tests/fakes/s3.py, sqs.py,
shared_queue.py) are checked against these by mypy where they are handed to a store or a consumer.
"""

from __future__ import annotations

from typing import Any, Protocol


class S3Objects(Protocol):
    """The object calls of the payload store, the failed copies and the schedule store's bodies."""

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **params: Any) -> Any: ...

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]: ...

    def delete_object(self, *, Bucket: str, Key: str) -> Any: ...

    @property
    def exceptions(self) -> Any:
        """The client's modelled errors (`exceptions.NoSuchKey`: a failed copy that is not there)."""


class S3Links(Protocol):
    """The console's exports (chalicelib.stores.exports): an object put, and a short-lived link to read it."""

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **params: Any) -> Any: ...

    def generate_presigned_url(self, ClientMethod: str, Params: dict[str, Any], ExpiresIn: int) -> str: ...


class S3Uploads(Protocol):
    """Uploaded recipients (chalicelib.stores.upload_files): a presigned upload, ranged reads, files kept."""

    def generate_presigned_post(
        self, Bucket: str, Key: str, Fields: dict[str, Any], Conditions: list[Any], ExpiresIn: int
    ) -> dict[str, Any]: ...

    def generate_presigned_url(self, ClientMethod: str, Params: dict[str, Any], ExpiresIn: int) -> str: ...

    def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]: ...

    def get_object(self, *, Bucket: str, Key: str, **params: Any) -> dict[str, Any]: ...

    def put_object(self, *, Bucket: str, Key: str, Body: Any, **params: Any) -> Any: ...

    def upload_file(self, Filename: str, Bucket: str, Key: str, ExtraArgs: dict[str, Any] | None = None) -> None: ...


# --- SQS ---------------------------------------------------------------------------------------------------
# Each consumer's port has the calls it makes, with the parameters it passes (keyword-only, as boto3 takes
# them); what SQS answers is boto3's dict.


class QueueUrls(Protocol):
    """A queue's URL by its name."""

    def get_queue_url(self, *, QueueName: str) -> dict[str, Any]: ...


class QueueDepth(Protocol):
    """A queue's attributes (its approximate message counts)."""

    def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]: ...


class SqsBatchSend(Protocol):
    """The enqueuer's (chalicelib.queueing.enqueuer): up to ten messages at a time."""

    def send_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]: ...


class SqsVisibility(Protocol):
    """A received message hidden for longer (or shown again at once)."""

    def change_message_visibility(self, *, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int) -> Any: ...


class SqsSend(Protocol):
    """One message at a time (chalicelib.queueing.enqueuer.send_copy: a received message's fresh copy)."""

    def send_message(
        self, *, QueueUrl: str, MessageBody: str, DelaySeconds: int, MessageAttributes: dict[str, Any] = ...
    ) -> Any: ...


class SqsMessageActions(SqsSend, SqsVisibility, Protocol):
    """The drainer's actions on received messages (chalicelib.send.message_actions): delete, requeue, hide."""

    def delete_message(self, *, QueueUrl: str, ReceiptHandle: str) -> Any: ...

    def delete_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]: ...


class SqsReceive(QueueUrls, Protocol):
    """Receive from a queue found by its name."""

    def receive_message(self, *, QueueUrl: str, MaxNumberOfMessages: int, **params: Any) -> dict[str, Any]: ...


class SqsDrain(SqsReceive, QueueDepth, SqsMessageActions, Protocol):
    """The drainer's (chalicelib.send.drainer), which hands it to its message actions: receive, look at the
    queue's depth (to start helpers) and its owner's tag (a paused tenant's queue is not drained)."""

    def list_queue_tags(self, *, QueueUrl: str) -> dict[str, Any]: ...


class SqsDeadLetters(SqsReceive, SqsVisibility, Protocol):
    """The dead-letter job's (chalicelib.jobs.dead_letters): read a dead-letter queue, leave what it keeps."""


class SqsQueueCreation(QueueUrls, Protocol):
    """The tenant queues' (chalicelib.queueing.tenant_queues): a tenant's queue, created when it is missing."""

    def create_queue(self, *, QueueName: str, Attributes: dict[str, str], tags: dict[str, str]) -> dict[str, Any]: ...


class SqsQueueRemoval(QueueUrls, QueueDepth, Protocol):
    """The idle-queue job's (chalicelib.jobs.idle_queues): an idle queue, checked empty and deleted."""

    def delete_queue(self, *, QueueUrl: str) -> Any: ...


class SqsQueueLister(Protocol):
    """Queues listed by their name's prefix, page after page (chalicelib.core.queue_listing)."""

    def get_paginator(self, operation_name: str) -> Any:
        """boto3's paginator (`list_queues`): typed Any, as boto3 types its clients."""


class SqsQueueListing(SqsQueueLister, QueueDepth, Protocol):
    """The sweeper's (chalicelib.jobs.sweeper): every queue of the stage, and its depth."""
