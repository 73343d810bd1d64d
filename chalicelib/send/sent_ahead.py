"""The reputation guard's denominator, counted by the drainer before each send."""

from __future__ import annotations

import math
import threading

from chalicelib.core import log
from chalicelib.stores.ports.sending import ReputationCounts

# A block is about a second of the drainer's sends, within these bounds: a slow tenant's crash leaves
# few sends counted that were not made; a fast one writes its count about once a second, not 10 times.
MIN_BLOCK, MAX_BLOCK = 20, 200


class SentAhead:
    """The guard's denominator, counted before the emails go: one write per block of sends per tenant.

    Counting after sending (in a buffer flushed each second) loses what a killed sender had buffered,
    and every bounce of those emails then counts against fewer sends: a tenant with a 1% bounce rate can
    look like 5% and be paused, its email parked. Counted ahead, a crash leaves at most a block's unused
    remainder counted (the guard is a little late); `settle()`, when a drain ends, gives it back.
    """

    def __init__(self, reputation: ReputationCounts) -> None:
        self._reputation = reputation
        self._left: dict[str, int] = {}  # per tenant: sends already counted, not yet made
        self._owed: dict[str, int] = {}  # per tenant: sends made while the count could not be written
        self._lock = threading.Lock()

    def take(self, user_id: str, per_second: float) -> None:
        """Count one send of `user_id`'s, before it is made (`per_second`: the pace this sender sends at)."""
        with self._lock:
            if self._left.get(user_id, 0) > 0:
                self._left[user_id] -= 1
                return
            owed = self._owed.pop(user_id, 0)
            block = min(MAX_BLOCK, max(MIN_BLOCK, math.ceil(per_second)))
            try:  # under the lock: the tenant's other senders wait for this block rather than write their own
                self._reputation.add(user_id, sent=block + owed)
            except Exception as exc:  # the send goes on; its count goes with the next block
                self._owed[user_id] = owed + 1
                log.warning("sends not counted yet", user=user_id, error=type(exc).__name__)
                return
            self._left[user_id] = block - 1

    def give_back(self, user_id: str) -> None:
        """One counted send was not made (SES refused or throttled it): the next send uses its count."""
        with self._lock:
            self._left[user_id] = self._left.get(user_id, 0) + 1

    def settle(self) -> None:
        """Give back what was counted and not sent (when a drain ends, so a finished drain is exact)."""
        with self._lock:
            left, self._left = self._left, {}
            owed, self._owed = self._owed, {}
        for user_id in set(left) | set(owed):
            n = owed.get(user_id, 0) - left.get(user_id, 0)
            if not n:
                continue
            try:
                self._reputation.add(user_id, sent=n)
            except Exception as exc:  # a returned remainder left counted: the guard is a little late
                log.warning("unsent count not given back", user=user_id, error=type(exc).__name__)
