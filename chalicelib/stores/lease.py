"""One drainer per queue: a lease taken before draining, handed on, dropped when done.

A lease is a DynamoDB item per queue with a token and an expiry, taken with a conditional write (absent,
or expired). The alarm, the sweeper and a second campaign can all start a drain for the same queue;
only the holder drains, the others return at once. The holder passes the token to its own
re-invocation, which renews it; a holder that dies simply lets it expire, and the next trigger takes it.
That is what keeps a tenant's rate a promise: two drainers on one queue would each send at the rate.

A drain that ends having sent leaves its lease free but notes when its last send stops counting against
the rate (a window after it finished); the next drain of the queue, maybe in another container with a
fresh pacing, waits until then (`Lease.quiet_from_ms`), so one window never holds both drains' sends.
"""

from __future__ import annotations

import time
import uuid

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.models import Model

from chalicelib.core.drainer_shares import queue_of_lease
from chalicelib.stores.ports.queues import Lease
from chalicelib.stores.tables import bound, condition_failed


class LeaseModel(Model):
    class Meta:
        table_name = "unbound"

    queue = UnicodeAttribute(hash_key=True)
    token = UnicodeAttribute()
    expires_ms = NumberAttribute()
    taken_ms = NumberAttribute()
    expires_at = NumberAttribute()  # epoch seconds, DynamoDB TTL (tidies leases of idle queues)
    quiet_from_ms = NumberAttribute(null=True)  # the last drain's sends fill no window after this (epoch ms)


# The token of a lease given up with a quiet time: no continuation carries it, so none renews the lease.
RELEASED = "released"


class Leases:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(LeaseModel, table_name, region)

    def _take(self, queue: str, token: str, hold_ms: int, condition: object) -> Lease | None:
        """Write the lease if `condition` holds. An update, not a put: it leaves the last drain's quiet time
        on the item and answers with it."""
        m = self._model
        now = int(time.time() * 1000)
        expires = now + hold_ms
        item = m(queue)
        try:
            item.update(
                actions=[
                    m.token.set(token),
                    m.expires_ms.set(expires),
                    m.taken_ms.set(now),
                    m.expires_at.set(expires // 1000 + 86400),
                ],
                condition=condition,  # type: ignore[arg-type]
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return None
            raise
        quiet = item.quiet_from_ms
        return Lease(queue, token, expires, int(quiet) if quiet is not None and quiet > now else None)

    def acquire(self, queue: str, hold_ms: int) -> Lease | None:
        """Take the queue's lease, or None if someone holds a live one."""
        m = self._model
        now = int(time.time() * 1000)
        return self._take(queue, uuid.uuid4().hex, hold_ms, m.queue.does_not_exist() | (m.expires_ms < now))

    def renew(self, queue: str, token: str, hold_ms: int) -> Lease | None:
        """Extend a lease we hold (the re-invocation of the drainer that took it), under a new token."""
        # A new token each time: a continuation delivered twice (Lambda's async invoke is at least once,
        # and the SDK retries an invoke that timed out) renews once; the copy finds its token gone.
        return self._take(queue, uuid.uuid4().hex, hold_ms, self._model.token == token)

    def drop(self, lease: Lease, quiet_from_ms: int | None = None) -> None:
        """Give the lease up (a drain that finished): the next drain may take it at once, and waits until
        `quiet_from_ms` (when the finished drain's last send stops counting) before it sends.

        The item stays, released, for a day (its TTL): it says when a drain last held the queue, which keeps
        the queue among those the sweeper looks at every minute for an hour after (`drained`). A drain that
        ended with fresh copies of throttled email delayed on its queue, and sent nothing, once deleted it: the
        copies then waited for the sweeper's look of the day."""
        m = self._model
        now_ms = int(time.time() * 1000)
        quiet = m.quiet_from_ms.set(quiet_from_ms) if quiet_from_ms is not None else m.quiet_from_ms.remove()
        try:
            m(lease.queue).update(
                actions=[
                    m.token.set(RELEASED),
                    m.expires_ms.set(0),
                    quiet,
                    m.expires_at.set(max(quiet_from_ms or 0, now_ms) // 1000 + 86400),
                ],
                condition=m.token == lease.token,
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    def live(self, now_ms: int) -> list[Lease]:
        """Every lease held now, of every queue and slot (a scan: for operators, not hot paths; the table holds
        one item per queue drained in the last day)."""
        m = self._model
        rows = m.scan((m.expires_ms > now_ms) & (m.token != RELEASED))
        return [Lease(r.queue, r.token, int(r.expires_ms)) for r in rows]

    def drained(self, since_ms: int) -> set[str]:
        """The queues whose lease a drain took, renewed or held after `since_ms` (epoch ms), whatever became of
        the drain. A scan of small items, one per queue drained in the last day (the items' TTL), so as many as
        queues drained lately, never one per idle tenant (the sweeper's, once a minute)."""
        m = self._model
        recent = (m.taken_ms > since_ms) | (m.expires_ms > since_ms)
        return {queue_of_lease(r.queue) for r in m.scan(recent, attributes_to_get=["queue"])}

    def holder(self, queue: str) -> Lease | None:
        """The live lease on a queue, if any."""
        try:
            item = self._model.get(queue, consistent_read=True)
        except DoesNotExist:
            return None
        if item.expires_ms < time.time() * 1000:
            return None
        return Lease(item.queue, item.token, int(item.expires_ms))
