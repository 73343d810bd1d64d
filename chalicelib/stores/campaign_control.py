"""Pausing, resuming and cancelling one campaign while it sends.

The state is one attribute on the campaign's counters item (`control`: paused or cancelled). The drainer
reads it just before each SES call, after the email has its rate slot, through a cache that lives one
second: a cancel therefore stops every send that had not started its SES call within a second of it,
so at most the rate's worth of sends (plus those already on their way to SES) go out after a cancel.
When the cached state expires, one thread reads it again and the others wait for that read: dozens of
send threads each reading it at once cost a DynamoDB read per email in five.
Paused email is parked off the queue (chalicelib.queueing.parked_email) and goes out at the normal rate
after `resume`; cancelled email is recorded `cancelled` and removed.
"""

from __future__ import annotations

import threading
import time

from chalicelib.stores.campaign_stats import CampaignStatsModel
from chalicelib.stores.tables import bound

PAUSED, CANCELLED = "paused", "cancelled"
CACHE_S = 1.0


class CampaignControl:
    def __init__(self, table_name: str, region: str, cache_s: float = CACHE_S) -> None:
        self._model = bound(CampaignStatsModel, table_name, region)
        self._cache: dict[tuple[str, str], tuple[float, str | None]] = {}
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._reading: dict[tuple[str, str], threading.Event] = {}

    def set(self, user_id: str, campaign_id: str, state: str | None) -> None:
        """Pause (`paused`), cancel (`cancelled`) or resume (None) a campaign."""
        if state not in (PAUSED, CANCELLED, None):
            raise ValueError(f"unknown campaign state {state}")
        m = self._model
        action = m.control.set(state) if state else m.control.remove()
        m(user_id, campaign_id).update(actions=[action])
        with self._lock:
            self._cache.pop((user_id, campaign_id), None)

    def state(self, user_id: str, campaign_id: str, *, fresh: bool = False) -> str | None:
        key = (user_id, campaign_id)
        while True:
            asked = time.monotonic()
            with self._lock:
                hit = self._cache.get(key)
                if hit and asked - hit[0] < self._cache_s and not fresh:
                    return hit[1]
                reading = self._reading.get(key)
                if reading is None:
                    self._reading[key] = threading.Event()
                    break
            reading.wait(5.0)  # another thread is reading it: its answer is as fresh as ours would be
            if fresh:
                hit = self._cache.get(key)
                if hit and hit[0] >= asked:
                    return hit[1]
        try:
            return self._read(key)
        finally:
            with self._lock:
                self._reading.pop(key).set()

    def _read(self, key: tuple[str, str]) -> str | None:
        now = time.monotonic()
        try:
            item = self._model.get(*key, consistent_read=True, attributes_to_get=["control"])
            state = item.control
        except self._model.DoesNotExist:
            state = None
        with self._lock:
            self._cache[key] = (now, state)
        return state
