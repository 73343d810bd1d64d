"""The queue one drain sends from (chalicelib.send.drainer builds it once, when the drain starts)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QueueRef:
    name: str
    url: str
    slot: int  # which of the queue's drainers this is (chalicelib.core.drainer_shares)
    free: bool  # the shared free-plan queue (sent through the platform's identities and SES tenants)
