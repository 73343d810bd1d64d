"""The free plan's daily cap: how many emails one free tenant may queue per UTC day.

Free-plan tenants share one queue and the platform's SES account, so one of them must not be able to
spend the whole day's quota for all the others. Precompile reserves each batch's emails here before it
queues them; what does not fit is recorded as rejected with the reason, never dropped.

One DynamoDB item per tenant and day, incremented with an atomic ADD (no read first, no race between
concurrent precompiles): the answer says how many of the batch fit. Items expire ten days later by TTL
(the reputation guard reads the same items over a week).

A reservation is idempotent per batch (one message: its campaign and all its recipients, `batch_id`):
the same write records, under the batch's own attributes, what the counter stood at before it and how
many the batch wanted, on condition that the batch has no such record yet. A redelivered or retried
event (SNS delivers at least once; Lambda retries a crashed precompile) finds the record and gets the
same share without counting again (`Share.repeated`: the caller then knows that some of its share may
already be queued or sent, see chalicelib.ingest.precompile). Without this, the soak (issue 8) found a free
tenant with 710 recipients sent 109, not 300: duplicate deliveries of its 100-recipient messages had
each spent 100 of its day. Once the cap is reached, a new batch fits nowhere and is not written at all,
so an item holds at most one record per batch that got a share (at most `cap` of them, well under
DynamoDB's 400 KB item limit). A reservation is not given back if its emails later fail, which errs on
the side of the platform's quota.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import UpdateError
from pynamodb.expressions.operand import Path
from pynamodb.models import Model

from chalicelib.stores.ports.sending import Share
from chalicelib.stores.tables import bound, condition_failed, warm

# Kept longer than the reputation guard's window (chalicelib.feedback.reputation), which reads the same items.
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

    def reserve(self, user_id: str, wanted: int, now: float | None = None, batch: str | None = None) -> int:
        """Count `wanted` emails against today's cap; return how many of them fit (0..wanted).

        With `batch` (see `batch_id`), a second reservation of the same batch on the same day answers
        as the first did and counts nothing.
        """
        if batch is not None:
            return self.share(user_id, wanted, batch, now).allowed
        if wanted <= 0:
            return 0
        now = time.time() if now is None else now
        m = self._model
        item = m(user_id, _day(now))
        item.update(actions=[m.queued.add(wanted), m.expires_at.set(int(now) + USAGE_RETENTION_S)])
        return self._fit(wanted, int(item.queued) - wanted)

    def share(self, user_id: str, wanted: int, batch: str, now: float | None = None) -> Share:
        """The batch's share of today's cap: counted the first time, read back every later time.

        `wanted` counts only the first time: a retry that finds some of its emails already recorded
        wants fewer, and gets the first reservation's share, not a new one."""
        now = time.time() if now is None else now
        m = self._model
        day = _day(now)
        item = m(user_id, day)
        mark, asked = Path(_mark(batch)), Path(_asked(batch))
        if wanted > 0:
            try:
                # SET reads the item as it was before this write: the mark is the counter before this batch.
                item.update(
                    actions=[
                        m.queued.add(wanted),
                        m.expires_at.set(int(now) + USAGE_RETENTION_S),
                        mark.set(m.queued | 0),
                        asked.set(wanted),
                    ],
                    condition=mark.does_not_exist() & (m.queued.does_not_exist() | (m.queued < self.cap)),
                )
                return Share(self._fit(wanted, int(item.queued) - wanted))
            except UpdateError as exc:
                if not condition_failed(exc):
                    raise
        raw = m._get_connection().get_item(user_id, day, consistent_read=True).get("Item", {})
        earlier = raw.get(_mark(batch))
        if earlier is None:  # never reserved: the cap was reached before it (or it wants nothing)
            return Share(0)
        first = int(raw[_asked(batch)]["N"]) if _asked(batch) in raw else wanted
        return Share(self._fit(first, int(earlier["N"])), repeated=True)

    def _fit(self, wanted: int, before: int) -> int:
        """How many of `wanted` fit when `before` were reserved ahead of them."""
        return max(0, min(wanted, self.cap - before))

    def used(self, user_id: str, now: float | None = None) -> int:
        now = time.time() if now is None else now
        try:
            item = self._model.get(user_id, time.strftime("%Y-%m-%d", time.gmtime(now)), consistent_read=True)
        except self._model.DoesNotExist:
            return 0
        return int(item.queued)


def batch_id(campaign_id: str, recipients: Iterable[str]) -> str:
    """A batch's identity for `DailyCap.reserve`: the same campaign and recipients give the same id."""
    h = hashlib.sha256(campaign_id.encode())
    for email in recipients:
        h.update(b"\0" + email.encode())
    return h.hexdigest()[:32]


def _mark(batch: str) -> str:
    return f"b_{batch}"


def _asked(batch: str) -> str:
    return f"w_{batch}"


def _day(now: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(now))
