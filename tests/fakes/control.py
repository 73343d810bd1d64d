"""Campaign control (pause, cancel) in memory."""

from __future__ import annotations


class FakeControl:
    def __init__(self, states=None):
        self.states = dict(states or {})

    def state(self, user_id, campaign_id, fresh=False):
        return self.states.get((user_id, campaign_id))

    def set(self, user_id, campaign_id, state):
        self.states[(user_id, campaign_id)] = state
