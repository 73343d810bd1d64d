"""The queues the sweeper looks at every minute: those email was put on this hour or the last, or a drain held.

Email reaches a tenant's queue only through its writer, which marks the queue used for the hour first
(chalicelib.stores.queue_activity, found by the tenants table's index of that hour); a backlog drained for
hours after its last put has a drain holding its lease, taken again by each of its invocations
(chalicelib.stores.lease). Between them: a queue whose drain failed to start, or died (its messages visible
again within SQS's visibility timeout, its claims free within the claim hold), is looked at for at least an
hour after. Every other queue is idle, and looked at once a day (chalicelib.jobs.sweeper).
"""

from __future__ import annotations

from chalicelib.core.resources import Resources
from chalicelib.core.routing import tenant_queue_name
from chalicelib.stores.ports import QueuesDrained, QueuesUsedIn
from chalicelib.stores.queue_activity import utc_hour

HOUR_S = 3600


class QueuesInUse:
    def __init__(self, resources: Resources, used: QueuesUsedIn, drained: QueuesDrained) -> None:
        self._resources = resources
        self._used = used
        self._drained = drained

    def at(self, now: float) -> set[str]:
        """The names of the queues in use at `now` (epoch seconds): raises if either source cannot be read."""
        users = self._used.used_in([utc_hour(now), utc_hour(now - HOUR_S)])
        drained = self._drained.drained(int((now - HOUR_S) * 1000))
        return {tenant_queue_name(self._resources, u) for u in users} | drained
