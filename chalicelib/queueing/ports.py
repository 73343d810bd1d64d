"""The queueing stage's port on the tenant queues' registry (chalicelib.queueing.tenant_queues), as a Protocol.

Beside its adapter (chalicelib.stores.ports says how ports are kept)."""

from __future__ import annotations

from typing import Protocol


class QueueRegistry(Protocol):
    """The email queue's: the URL of a tenant's queue, created (or re-created after idleness) if need be."""

    def ensure(self, queue_name: str, user_id: str) -> str: ...
