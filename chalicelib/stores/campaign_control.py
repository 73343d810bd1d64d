"""Pausing, resuming and cancelling one campaign while it sends.

The state is one attribute on the campaign's counters item (`control`: paused or cancelled). The drainer
reads it just before each SES call, after the email has its rate slot, through a cache that lives one
second (chalicelib.stores.short_cache): a cancel therefore stops every send that had not started its SES
call within a second of it, so at most the rate's worth of sends (plus those already on their way to SES)
go out after a cancel.
Paused email is parked off the queue (chalicelib.queueing.parked_email) and goes out at the normal rate
after `resume`; cancelled email is recorded `cancelled` and removed. Cancel is final: a pause or a resume
is written only while the campaign is not cancelled (docs/operations.md has the transitions).
"""

from __future__ import annotations

from typing import Any

from pynamodb.exceptions import UpdateError

from chalicelib.stores.campaign_stats import CampaignStatsModel
from chalicelib.stores.short_cache import ShortCache
from chalicelib.stores.tables import bound, condition_failed

PAUSED, CANCELLED = "paused", "cancelled"
CACHE_S = 1.0


class CampaignControl:
    def __init__(self, table_name: str, region: str, cache_s: float = CACHE_S) -> None:
        self._model = bound(CampaignStatsModel, table_name, region)
        self._states: ShortCache[tuple[str, str], str | None] = ShortCache(self._read, cache_s)

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
        self._states.forget((user_id, campaign_id))
        return changed

    def state(self, user_id: str, campaign_id: str, *, fresh: bool = False) -> str | None:
        return self._states.get((user_id, campaign_id), fresh=fresh)

    def _read(self, key: tuple[str, str]) -> str | None:
        try:
            return self._model.get(*key, consistent_read=True, attributes_to_get=["control"]).control
        except self._model.DoesNotExist:
            return None
