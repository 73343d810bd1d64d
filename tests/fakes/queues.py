"""The tenant queues' registry and their last-used days, in memory."""

from __future__ import annotations


class FakeQueues:
    """TenantQueues.ensure: every queue exists; which were asked for is kept."""

    def __init__(self):
        self.ensured = []

    def ensure(self, name, user_id):
        self.ensured.append((name, user_id))
        return f"https://sqs/{name}"


class FakeQueueActivity:
    def __init__(self, retired=()):
        self.retired = set(retired)
        self.touched = []

    def touch(self, user_id, day):
        self.touched.append((user_id, day))
        if user_id in self.retired:
            self.retired.discard(user_id)
            return True
        return False
