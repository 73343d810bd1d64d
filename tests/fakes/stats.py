"""The campaign counters in memory: every add kept, as written."""

from __future__ import annotations


class FakeStats:
    def __init__(self):
        self.adds = []
        self.schedules = []

    def add(self, user_id, campaign_id, error=None, **deltas):
        self.adds.append((user_id, campaign_id, deltas, error))

    def flush(self):
        pass

    def total(self, name):
        return sum(d.get(name, 0) for _u, _c, d, _e in self.adds)

    def note_schedule(self, *args):
        self.schedules.append(args)

    def schedule_buckets(self, user_id, campaign_id):
        return [a[4] for a in self.schedules if a[0] == user_id and a[1] == campaign_id and a[4]]
