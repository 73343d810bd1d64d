"""Campaign control (pause, cancel) in memory."""

from __future__ import annotations

from collections.abc import Mapping

from chalicelib.stores.campaign_control import CANCELLED, PAUSED


class FakeControl:
    def __init__(self, states: Mapping[tuple[str, str], str | None] | None = None) -> None:
        self.states: dict[tuple[str, str], str | None] = dict(states or {})

    def state(self, user_id: str, campaign_id: str, *, fresh: bool = False) -> str | None:
        return self.states.get((user_id, campaign_id))

    def pause(self, user_id: str, campaign_id: str) -> bool:
        return self._unless_cancelled(user_id, campaign_id, PAUSED)

    def resume(self, user_id: str, campaign_id: str) -> bool:
        return self._unless_cancelled(user_id, campaign_id, None)

    def cancel(self, user_id: str, campaign_id: str) -> None:
        self.states[(user_id, campaign_id)] = CANCELLED

    def _unless_cancelled(self, user_id: str, campaign_id: str, state: str | None) -> bool:
        if self.states.get((user_id, campaign_id)) == CANCELLED:
            return False
        self.states[(user_id, campaign_id)] = state
        return True
