"""One SQS queue that several drainers receive from at once: thread-safe, with visibility timeouts.

Enough of SQS's semantics for drainers racing on one queue: a received message is invisible for the
queue's visibility timeout (or what ChangeMessageVisibility sets) and comes back after it with its
receive count raised; each receive gives a new receipt handle, and only the latest deletes. Seconds
are scaled by `time_scale`, so that a test sees a 300 s timeout pass in 3 s.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Message:
    id: str
    body: str
    attributes: dict[str, str] = field(default_factory=dict)
    visible_at: float = 0.0
    receives: int = 0
    handle: str | None = None


class SharedSqs:
    def __init__(
        self,
        bodies: Iterable[str] = (),
        visibility_s: float = 300.0,
        time_scale: float = 0.01,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self._ids: Iterator[int] = itertools.count()
        self._lock = threading.Lock()
        self._messages: dict[str, _Message] = {}
        self._visibility_s = visibility_s
        self._scale = time_scale
        self._tags = dict(tags or {})
        self.received = 0
        self.deleted: list[str] = []  # bodies, in the order they were deleted
        for b in bodies:
            self._add(b, 0.0)

    def _add(self, body: str, delay_s: float) -> None:
        i = str(next(self._ids))
        self._messages[i] = _Message(i, body, visible_at=time.monotonic() + delay_s * self._scale)

    def add(self, bodies: Iterable[str]) -> None:
        with self._lock:
            for b in bodies:
                self._add(b, 0.0)

    @property
    def left(self) -> int:
        """Messages not deleted (visible or not)."""
        return self.remaining()

    def remaining(self) -> int:
        """`left`, as a method (a manager's proxy serves methods, not properties)."""
        with self._lock:
            return len(self._messages)

    def get_queue_url(self, QueueName: str) -> dict[str, Any]:
        return {"QueueUrl": f"https://sqs/{QueueName}"}

    def list_queue_tags(self, QueueUrl: str) -> dict[str, Any]:
        return {"Tags": dict(self._tags)}

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            visible = sum(1 for m in self._messages.values() if m.visible_at <= now)
        return {"Attributes": {"ApproximateNumberOfMessages": str(visible)}}

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int, **_kw: Any) -> dict[str, Any]:
        now = time.monotonic()
        out: list[dict[str, Any]] = []
        with self._lock:
            for m in self._messages.values():
                if len(out) == MaxNumberOfMessages:
                    break
                if m.visible_at <= now:
                    m.receives += 1
                    m.handle = f"{m.id}/{m.receives}"
                    m.visible_at = now + self._visibility_s * self._scale
                    out.append(
                        {
                            "MessageId": m.id,
                            "ReceiptHandle": m.handle,
                            "Body": m.body,
                            "Attributes": {"ApproximateReceiveCount": str(m.receives), "SentTimestamp": "0"},
                        }
                    )
            self.received += len(out)
        return {"Messages": out} if out else {}

    def _current(self, handle: str) -> _Message | None:
        m = self._messages.get(handle.split("/")[0])
        return m if m is not None and m.handle == handle else None

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:
        with self._lock:
            m = self._current(ReceiptHandle)
            if m is not None:
                del self._messages[m.id]
                self.deleted.append(m.body)

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        ok: list[str] = []
        bad: list[str] = []
        for e in Entries:
            with self._lock:
                m = self._current(e["ReceiptHandle"])
                if m is not None:
                    del self._messages[m.id]
                    self.deleted.append(m.body)
            (ok if m is not None else bad).append(e["Id"])
        return {
            "Successful": [{"Id": i} for i in ok],
            "Failed": [{"Id": i, "Code": "ReceiptHandleIsInvalid", "SenderFault": True} for i in bad],
        }

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int) -> None:
        with self._lock:
            m = self._current(ReceiptHandle)
            if m is not None:
                m.visible_at = time.monotonic() + VisibilityTimeout * self._scale

    def send_message(
        self,
        QueueUrl: str,
        MessageBody: str,
        DelaySeconds: int = 0,
        MessageAttributes: dict[str, Any] | None = None,
    ) -> None:
        with self._lock:
            self._add(MessageBody, DelaySeconds)
