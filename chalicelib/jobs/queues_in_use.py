"""The queues the sweeper looks at every minute: those email was put on this hour or the last, or a drain held.

Email reaches a tenant's queue only through its writer, which marks the queue used for the hour first
(chalicelib.stores.queue_activity, found by the tenants table's index of that hour); a backlog drained for
hours after its last put has a drain holding its lease, taken again by each of its invocations
(chalicelib.stores.lease). Between them: a queue whose drain failed to start, or died (its messages visible
again within SQS's visibility timeout, its claims free within the claim hold), is looked at for at least an
hour after. And a queue the sweeper finds holding email is marked in use for the hour (`keep`): it stays in
use until it is found empty, however long its drains fail (an outage of hours, a broken deploy). Every other
queue is idle, and looked at a few minutes a day (chalicelib.jobs.sweeper).
"""

from __future__ import annotations

from chalicelib.core.resources import Resources
from chalicelib.core.routing import is_free_queue, tenant_queue_name
from chalicelib.stores.ports.queues import QueuesDrained, QueuesUsedIn
from chalicelib.stores.queue_activity import utc_hour

HOUR_S = 3600


class QueuesInUse:
    def __init__(self, resources: Resources, used: QueuesUsedIn, drained: QueuesDrained) -> None:
        self._resources = resources
        self._used = used
        self._drained = drained
        self._kept: dict[str, str] = {}  # queue -> the hour this process last marked it in use

    def at(self, now: float) -> set[str]:
        """The names of the queues in use at `now` (epoch seconds): raises if either source cannot be read."""
        users = self._used.used_in([utc_hour(now), utc_hour(now - HOUR_S)])
        drained = self._drained.drained(int((now - HOUR_S) * 1000))
        return {tenant_queue_name(self._resources, u) for u in users} | drained

    def keep(self, queue: str, now: float) -> None:
        """A tenant queue found holding email stays in use: marked for this hour, once an hour a process."""
        if is_free_queue(self._resources, queue):
            return  # looked at every minute whatever it holds
        hour = utc_hour(now)
        if self._kept.get(queue) == hour:
            return
        user = queue.removeprefix(self._resources.tenant_queue_prefix)
        if tenant_queue_name(self._resources, user) != queue:
            return  # a name hashed from a long or unusual id: its tenant cannot be read back from it
        self._used.mark_hour(user, hour)
        self._kept[queue] = hour
