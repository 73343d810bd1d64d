"""The free plan's daily cap: how many emails one free tenant may queue per UTC day.

Free-plan tenants share one queue and the platform's SES account, so one of them must not be able to
spend the whole day's quota for all the others. Precompile reserves each batch's emails here before it
queues them; what does not fit is recorded as rejected with the reason, never dropped.

One DynamoDB item per tenant and day, incremented with an atomic ADD (no read first, no race between
concurrent precompiles): the answer says how many of the batch fit. A reservation is not given back if
the emails later fail: a crash between reserving and queueing (Lambda then retries the event) counts
some emails twice against the cap, which errs on the side of the platform's quota. Items expire ten days
later by TTL (the reputation guard reads the same items over a week).
"""

from __future__ import annotations

import time

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from chalicelib.tables import bound, warm

# Kept longer than the reputation guard's window (chalicelib.reputation), which reads the same items.
USAGE_RETENTION_S = 10 * 24 * 3600


class UsageModel(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)
    day = UnicodeAttribute(range_key=True)  # UTC, YYYY-MM-DD
    queued = NumberAttribute(default=0)  # free plan: emails queued against the daily cap
    sent = NumberAttribute(null=True)  # reputation guard: sends, permanent bounces, complaints of the day
    bounced = NumberAttribute(null=True)
    complained = NumberAttribute(null=True)
    expires_at = NumberAttribute(null=True)  # epoch seconds, DynamoDB TTL


def cap_reason(cap: int) -> str:
    return f"free plan daily cap of {cap} emails reached (UTC day); the rest of today's are not sent"


class DailyCap:
    def __init__(self, table_name: str, region: str, cap: int) -> None:
        self._model = bound(UsageModel, table_name, region)
        self.cap = cap

    def warm(self) -> None:
        warm(self._model)

    def reserve(self, user_id: str, wanted: int, now: float | None = None) -> int:
        """Count `wanted` emails against today's cap; return how many of them fit (0..wanted)."""
        if wanted <= 0:
            return 0
        now = time.time() if now is None else now
        m = self._model
        item = m(user_id, time.strftime("%Y-%m-%d", time.gmtime(now)))
        item.update(actions=[m.queued.add(wanted), m.expires_at.set(int(now) + USAGE_RETENTION_S)])
        before = int(item.queued) - wanted  # what other batches had reserved when this one landed
        return max(0, min(wanted, self.cap - before))

    def used(self, user_id: str, now: float | None = None) -> int:
        now = time.time() if now is None else now
        try:
            item = self._model.get(user_id, time.strftime("%Y-%m-%d", time.gmtime(now)), consistent_read=True)
        except self._model.DoesNotExist:
            return 0
        return int(item.queued)
