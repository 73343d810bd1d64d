"""Pausing, resuming and cancelling one campaign while it sends.

The state is one attribute on the campaign's counters item (`control`: paused or cancelled). The sender
reads it just before each SES call, after the email has its rate slot, through a cache that lives one
second: a cancel therefore stops every send that had not started its SES call within a second of it,
so at most the rate's worth of sends (plus those already on their way to SES) go out after a cancel.
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
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit and now - hit[0] < self._cache_s and not fresh:
                return hit[1]
        try:
            item = self._model.get(user_id, campaign_id, consistent_read=True, attributes_to_get=["control"])
            state = item.control
        except self._model.DoesNotExist:
            state = None
        with self._lock:
            self._cache[key] = (now, state)
        return state
