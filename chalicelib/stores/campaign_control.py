"""Pausing, resuming and cancelling one campaign while it sends.

The state is one attribute on the campaign's counters item (`control`: paused or cancelled). The drainer
reads it just before each SES call, after the email has its rate slot, through a cache that lives one
second: a cancel therefore stops every send that had not started its SES call within a second of it,
so at most the rate's worth of sends (plus those already on their way to SES) go out after a cancel.
When the cached state expires, one thread reads it again and the others wait for that read: dozens of
send threads each reading it at once cost a DynamoDB read per email in five.
Paused email is parked off the queue (chalicelib.queueing.parked_email) and goes out at the normal rate
after `resume`; cancelled email is recorded `cancelled` and removed. Cancel is final: a pause or a resume
is written only while the campaign is not cancelled (docs/operations.md has the transitions).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pynamodb.exceptions import UpdateError

from chalicelib.stores.campaign_stats import CampaignStatsModel
from chalicelib.stores.tables import bound, condition_failed

PAUSED, CANCELLED = "paused", "cancelled"
CACHE_S = 1.0


class CampaignControl:
    def __init__(self, table_name: str, region: str, cache_s: float = CACHE_S) -> None:
        self._model = bound(CampaignStatsModel, table_name, region)
        self._cache: dict[tuple[str, str], tuple[float, str | None]] = {}
        self._cache_s = cache_s
        self._lock = threading.Lock()
        self._reading: dict[tuple[str, str], threading.Event] = {}

    def pause(self, user_id: str, campaign_id: str) -> bool:
        """Pause the campaign; False if it is cancelled (cancel is final: nothing brings it back)."""
        return self._change(user_id, campaign_id, self._model.control.set(PAUSED), final_kept=True)

    def resume(self, user_id: str, campaign_id: str) -> bool:
        """Lift its pause; False if it is cancelled. A resume racing a cancel loses, whichever is first."""
        return self._change(user_id, campaign_id, self._model.control.remove(), final_kept=True)

    def cancel(self, user_id: str, campaign_id: str) -> None:
        """Cancel the campaign, from any state, for good."""
        self._change(user_id, campaign_id, self._model.control.set(CANCELLED), final_kept=False)

    def _change(self, user_id: str, campaign_id: str, action: Any, *, final_kept: bool) -> bool:
        """One conditional write: every change but a cancel only while the campaign is not cancelled, so that
        neither a pause (written over it) nor a resume (racing it) undoes a cancel."""
        m = self._model
        condition = (m.control.does_not_exist() | (m.control != CANCELLED)) if final_kept else None
        try:
            m(user_id, campaign_id).update(actions=[action], condition=condition)
            changed = True
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            changed = False
        with self._lock:
            self._cache.pop((user_id, campaign_id), None)
        return changed

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
