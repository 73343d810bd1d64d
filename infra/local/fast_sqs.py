"""Accelerator: moto's SQS queue with incremental bookkeeping, so that deep queues stay fast.

moto 5.2's standard queue keeps one list of messages and rescans it for every send, receive,
delete and attribute read (the attribute counts are list comprehensions), which makes a campaign
queue of 100,000 messages crawl (measured: 13 receives/s at 2,000 deep). This subclass keeps the
same Message objects and the same wire behaviour, but indexes them:

- messages by id, receipt handles to ids, a FIFO of ids ready to receive, and a heap of ids that
  become ready later (in flight until their visibility timeout, or delayed);
- counts of in-flight and delayed messages, so the Approximate* attributes are O(1).

FIFO queues keep moto's own code path. `install()` swaps the class into moto in this process only;
it is called by the local stack, never by the Lambda code.
"""

from __future__ import annotations

import copy
import functools
import heapq
import itertools
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from moto.core.utils import camelcase_to_underscores
from moto.sqs import models as sqs_models
from moto.sqs.exceptions import InvalidParameterValue, ReceiptHandleIsInvalid
from moto.sqs.models import Message, Queue, SQSBackend, _filter_message_attributes

_READY, _INFLIGHT, _DELAYED = 0, 1, 2
_seq = itertools.count()


def unix_time() -> float:
    return time.time()


def unix_time_millis() -> float:
    # moto's own goes through datetime arithmetic: a measurable share of every receive.
    return time.time() * 1000.0


def _receipt_handle() -> str:
    """An opaque, unguessable receipt handle (moto draws 185 letters one by one)."""
    return secrets.token_urlsafe(132)


@functools.cache
def _snake(name: str) -> str:
    return camelcase_to_underscores(name)


class FastQueue(Queue):
    # Fault injection (the soak test): given the queue's name, whether a message just received is
    # delivered again (left visible, so the next receive returns it too), as standard SQS's
    # at-least-once delivery sometimes does.
    redeliver: Callable[[str], bool] | None = None

    def __init__(self, name: str, region: str, account_id: str, **kwargs: Any) -> None:
        self._by_id: OrderedDict[str, Message] = OrderedDict()
        self._ready: OrderedDict[str, None] = OrderedDict()
        self._later: list[tuple[float, int, str]] = []
        self._state: dict[str, tuple[int, float]] = {}  # id -> (state, ready_at_ms)
        self._handles: dict[str, str] = {}
        self._received_ms: dict[str, float] = {}  # receipt handle -> when that receive was (epoch ms)
        self._n_inflight = 0
        self._n_delayed = 0
        self._plain: list[Message] = []
        super().__init__(name, region, account_id, **kwargs)

    # --- moto's list, kept for FIFO queues and for any reader we did not replace ---------------
    @property  # type: ignore[override]
    def _messages(self) -> list[Message]:
        if self.fifo_queue:
            return self._plain
        return list(self._by_id.values())

    @_messages.setter
    def _messages(self, value: list[Message]) -> None:
        # Only ever set to [] (init, purge): start from empty.
        self._plain = list(value)
        self._by_id = OrderedDict()
        self._ready = OrderedDict()
        self._later = []
        self._state = {}
        self._handles = {}
        self._received_ms = {}
        self._n_inflight = 0
        self._n_delayed = 0
        for m in value:
            self._insert(m)

    @property
    def fifo_queue(self) -> bool:
        return bool(self.__dict__.get("_fifo", False))

    @fifo_queue.setter
    def fifo_queue(self, value: bool) -> None:
        self.__dict__["_fifo"] = bool(value)

    # --- bookkeeping ----------------------------------------------------------------------------
    def _set_state(self, mid: str, state: int, ready_at: float) -> None:
        old = self._state.get(mid)
        if old is not None:
            if old[0] == _INFLIGHT:
                self._n_inflight -= 1
            elif old[0] == _DELAYED:
                self._n_delayed -= 1
            if old[0] == _READY:
                self._ready.pop(mid, None)
        self._state[mid] = (state, ready_at)
        if state == _READY:
            self._ready[mid] = None
        else:
            if state == _INFLIGHT:
                self._n_inflight += 1
            else:
                self._n_delayed += 1
            heapq.heappush(self._later, (ready_at, next(_seq), mid))

    def _insert(self, message: Message) -> None:
        self._by_id[message.id] = message
        if message.receipt_handle:
            self._handles[message.receipt_handle] = message.id
        now = unix_time_millis()
        if message.delayed_until > now:
            self._set_state(message.id, _DELAYED, message.delayed_until)
        else:
            self._set_state(message.id, _READY, 0.0)

    def _advance(self) -> None:
        now = unix_time_millis()
        later = self._later
        while later and later[0][0] <= now:
            ready_at, _, mid = heapq.heappop(later)
            st = self._state.get(mid)
            if st is None or st[0] == _READY or st[1] != ready_at:
                continue  # deleted, or rescheduled since: a stale heap entry
            self._set_state(mid, _READY, 0.0)

    def _remove(self, mid: str) -> Message | None:
        message = self._by_id.pop(mid, None)
        if message is None:
            return None
        st = self._state.pop(mid, None)
        if st is not None:
            if st[0] == _READY:
                self._ready.pop(mid, None)
            elif st[0] == _INFLIGHT:
                self._n_inflight -= 1
            else:
                self._n_delayed -= 1
        for h in message.all_receipt_handles:
            if h is not None:
                self._handles.pop(h, None)
                self._received_ms.pop(h, None)
                self.deleted_messages.add(h)
        return message

    # --- moto's Queue interface -------------------------------------------------------------------
    @property
    def attributes(self) -> dict[str, Any]:  # type: ignore[override]
        """moto's attribute map, without converting every attribute name with a regex each time.

        moto reads it on every SendMessage (for ContentBasedDeduplication), so it is on the hot path.
        """
        result: dict[str, Any] = {}
        names = list(self.BASE_ATTRIBUTES)
        if self.fifo_queue:
            names += self.FIFO_ATTRIBUTES
        if self.kms_master_key_id:  # type: ignore[attr-defined]
            names += self.KMS_ATTRIBUTES
        for attribute in names:
            result[attribute] = getattr(self, _snake(attribute))
        if self.policy:
            result["Policy"] = self.policy
        if self.redrive_policy:  # type: ignore[attr-defined]
            result["RedrivePolicy"] = json.dumps(self.redrive_policy)  # type: ignore[attr-defined]
        for key, value in result.items():
            if isinstance(value, bool):
                result[key] = str(value).lower()
        return result

    @property
    def approximate_number_of_messages_delayed(self) -> int:
        if self.fifo_queue:
            return super().approximate_number_of_messages_delayed
        with self._messages_lock:
            self._advance()
            return self._n_delayed

    @property
    def approximate_number_of_messages_not_visible(self) -> int:
        if self.fifo_queue:
            return super().approximate_number_of_messages_not_visible
        with self._messages_lock:
            self._advance()
            return self._n_inflight

    @property
    def approximate_number_of_messages(self) -> int:
        if self.fifo_queue:
            return super().approximate_number_of_messages
        with self._messages_lock:
            self._advance()
            return len(self._ready)

    @property
    def messages(self) -> list[Message]:
        if self.fifo_queue:
            return super().messages
        with self._messages_lock:
            self._advance()
            return [self._by_id[mid] for mid in self._ready]

    @property
    def in_flight(self) -> list[Message]:
        """The messages received and not yet deleted nor visible again (not the delayed ones): what a test
        looks at to see which message a consumer left on the queue."""
        if self.fifo_queue:
            return [m for m in self._plain if not m.visible and not m.delayed]
        with self._messages_lock:
            self._advance()
            return [self._by_id[mid] for mid, (state, _at) in self._state.items() if state == _INFLIGHT]

    def add_message(self, message: Message) -> None:
        if self.fifo_queue or self.lambda_event_source_mappings:
            if not self.fifo_queue:
                raise NotImplementedError("Lambda event source mappings are not used locally")
            super().add_message(message)
            return
        with self._messages_lock:
            self._insert(message)
            self._messages_lock.notify_all()

    def delete_message(self, receipt_handle: str) -> None:
        if self.fifo_queue:
            super().delete_message(receipt_handle)
            return
        with self._messages_lock:
            if receipt_handle in self.deleted_messages:
                return
            mid = self._handles.get(receipt_handle)
            if mid is None:
                raise ReceiptHandleIsInvalid()
            self._remove(mid)

    # --- operations moto implements on the backend, done here in O(1) per message ----------------
    def fast_receive(
        self,
        count: int,
        wait_seconds: int,
        visibility_timeout: int,
        attribute_names: list[str],
        backend: SQSBackend,
    ) -> list[Message]:
        deadline = unix_time() + wait_seconds
        result: list[Message] = []
        with self._messages_lock:
            while True:
                self._advance()
                to_dlq: list[Message] = []
                while self._ready and len(result) < count:
                    mid = next(iter(self._ready))
                    message = self._by_id[mid]
                    if (
                        self.dead_letter_queue is not None
                        and self.redrive_policy
                        and message.approximate_receive_count >= int(self.redrive_policy["maxReceiveCount"])
                    ):
                        self._remove(mid)
                        to_dlq.append(message)
                        continue
                    message.mark_received(visibility_timeout=visibility_timeout)
                    self._handles[message.receipt_handle] = mid  # type: ignore[index]
                    self._received_ms[message.receipt_handle] = unix_time_millis()  # type: ignore[index]
                    redeliver = FastQueue.redeliver
                    if redeliver is not None and visibility_timeout and redeliver(self.name):
                        self._ready.move_to_end(mid)  # stays visible: a second receive gets it again
                    elif visibility_timeout:
                        self._set_state(mid, _INFLIGHT, message.visible_at)
                    else:
                        self._ready.move_to_end(mid)
                    out = copy.copy(message)  # what is returned must not change with the queue
                    out.message_attributes = dict(message.message_attributes)
                    out._old_receipt_handles = list(message._old_receipt_handles)
                    _filter_message_attributes(out, attribute_names)
                    result.append(out)
                for message in to_dlq:
                    message.visible_at = 0
                    self.dead_letter_queue.add_message(message)  # type: ignore[union-attr]
                remaining = deadline - unix_time()
                if result or wait_seconds == 0 or remaining <= 0:
                    return result
                next_ready = (self._later[0][0] / 1000.0 - unix_time()) if self._later else remaining
                self._messages_lock.wait(timeout=max(0.01, min(remaining, next_ready, 1.0)))

    def fast_change_visibility(self, receipt_handle: str, visibility_timeout: int) -> None:
        with self._messages_lock:
            mid = self._handles.get(receipt_handle)
            if mid is None or receipt_handle in self.deleted_messages:
                raise ReceiptHandleIsInvalid()
            message = self._by_id[mid]
            # SQS counts a message's 12 hours from the receive that gave this handle (moto, from when it was
            # sent: a dead letter, which keeps its SentTimestamp, could then never be hidden again).
            limit_ms = unix_time_millis() + int(visibility_timeout) * 1000
            received_ms = self._received_ms.get(receipt_handle, message.sent_timestamp or 0.0)
            if limit_ms - received_ms > 43200 * 1000:
                raise InvalidParameterValue(
                    f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. "
                    "Reason: Total VisibilityTimeout for the message is beyond the limit "
                    "[43200 seconds]"
                )
            message.change_visibility(visibility_timeout)
            if int(visibility_timeout) == 0:
                self._set_state(mid, _READY, 0.0)
                self._messages_lock.notify_all()
            else:
                self._set_state(mid, _INFLIGHT, message.visible_at)


_original_receive = SQSBackend.receive_message
_original_change_visibility = SQSBackend.change_message_visibility


def _receive_message(
    self: SQSBackend,
    queue_name: str,
    count: int,
    wait_seconds_timeout: int,
    visibility_timeout: int,
    message_attribute_names: list[str] | None = None,
) -> list[Message]:
    queue = self.get_queue(queue_name)
    if isinstance(queue, FastQueue) and not queue.fifo_queue:
        return queue.fast_receive(count, wait_seconds_timeout, visibility_timeout, message_attribute_names or [], self)
    return _original_receive(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names)


def _change_message_visibility(self: SQSBackend, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
    queue = self.get_queue(queue_name)
    if isinstance(queue, FastQueue) and not queue.fifo_queue:
        queue.fast_change_visibility(receipt_handle, visibility_timeout)
        return
    _original_change_visibility(self, queue_name, receipt_handle, visibility_timeout)


def install() -> None:
    """Make every queue moto creates in this process a FastQueue (idempotent)."""
    sqs_models.Queue = FastQueue  # type: ignore[misc]
    sqs_models.generate_receipt_handle = _receipt_handle  # what Message.mark_received calls
    sqs_models.unix_time_millis = unix_time_millis  # what Message's timestamps use
    SQSBackend.receive_message = _receive_message  # type: ignore[method-assign]
    SQSBackend.change_message_visibility = _change_message_visibility  # type: ignore[method-assign]
