"""The drain leases in memory: `held` queues have a live drainer."""

from __future__ import annotations

from chalicelib.stores.lease import Lease


class FakeLeases:
    def __init__(self, held=()):
        self.held = set(held)
        self.reads = 0

    def holder(self, queue):
        self.reads += 1
        return Lease(queue, "token", 2**62) if queue in self.held else None
