"""One drainer per queue: a lease taken before draining, handed on, dropped when done.

A lease is a DynamoDB item per queue with a token and an expiry, taken with a conditional write (absent,
or expired). The alarm, the sweeper and a second campaign can all start a drain for the same queue;
only the holder drains, the others return at once. The holder passes the token to its own
re-invocation, which renews it; a holder that dies simply lets it expire, and the next trigger takes it.
That is what keeps a tenant's rate a promise: two drainers on one queue would each send at the rate.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError
from pynamodb.models import Model

from chalicelib.stores.tables import bound, condition_failed


class LeaseModel(Model):
    class Meta:
        table_name = "unbound"

    queue = UnicodeAttribute(hash_key=True)
    token = UnicodeAttribute()
    expires_ms = NumberAttribute()
    taken_ms = NumberAttribute()
    expires_at = NumberAttribute()  # epoch seconds, DynamoDB TTL (tidies leases of idle queues)


@dataclass(frozen=True)
class Lease:
    queue: str
    token: str
    expires_ms: int


class Leases:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(LeaseModel, table_name, region)

    def _put(self, queue: str, token: str, hold_ms: int, condition: object) -> Lease | None:
        m = self._model
        now = int(time.time() * 1000)
        expires = now + hold_ms
        try:
            m(queue, token=token, expires_ms=expires, taken_ms=now, expires_at=expires // 1000 + 86400).save(
                condition=condition  # type: ignore[arg-type]
            )
        except PutError as exc:
            if condition_failed(exc):
                return None
            raise
        return Lease(queue, token, expires)

    def acquire(self, queue: str, hold_ms: int) -> Lease | None:
        """Take the queue's lease, or None if someone holds a live one."""
        m = self._model
        now = int(time.time() * 1000)
        return self._put(queue, uuid.uuid4().hex, hold_ms, m.queue.does_not_exist() | (m.expires_ms < now))

    def renew(self, queue: str, token: str, hold_ms: int) -> Lease | None:
        """Extend a lease we hold (the re-invocation of the drainer that took it)."""
        return self._put(queue, token, hold_ms, self._model.token == token)

    def drop(self, lease: Lease) -> None:
        """Give the lease up (a drain that finished): the next drain may take it at once."""
        try:
            self._model(lease.queue).delete(condition=self._model.token == lease.token)
        except DeleteError as exc:
            if not condition_failed(exc):
                raise

    def holder(self, queue: str) -> Lease | None:
        """The live lease on a queue, if any."""
        try:
            item = self._model.get(queue, consistent_read=True)
        except DoesNotExist:
            return None
        if item.expires_ms < time.time() * 1000:
            return None
        return Lease(item.queue, item.token, int(item.expires_ms))
