"""Campaign control (pause, cancel) in memory."""

from __future__ import annotations

from collections.abc import Mapping

from chalicelib.stores.campaign_control import CANCELLED, PAUSED


class FakeControl:
    def __init__(self, states: Mapping[tuple[str, str], str | None] | None = None) -> None:
        self.states: dict[tuple[str, str], str | None] = dict(states or {})

    def state(self, user_id: str, campaign_id: str, *, fresh: bool = False) -> str | None:
        return self.states.get((user_id, campaign_id))

    def set(self, user_id: str, campaign_id: str, state: str | None) -> None:
        if state not in (PAUSED, CANCELLED, None):
            raise ValueError(f"unknown campaign state {state}")
        self.states[(user_id, campaign_id)] = state
