"""The reputation guard: a tenant whose bounces or complaints run too high stops sending.

SES reviews (and then pauses) an account whose bounce rate passes about 5% or complaint rate 0.1%; on
the platform's account one careless free tenant would take every other free tenant down with it, and a
paid tenant's own account is its livelihood. So each tenant's sends, permanent bounces and complaints
are counted per UTC day (the `usage` table, beside the free plan's cap), and after each bounce or
complaint the rolling window (7 days by default) is checked: over a limit, with enough volume to mean
something, the tenant is paused with the reason. The sender holds a paused tenant's email (nothing is
dropped) until `moonsend tenant resume`.

The sends (the rates' denominator) are counted ahead of sending, in blocks (`SentAhead`): a sender that
dies can then only leave the count a little high (the guard pauses a little late), never low, which
would pause a tenant whose rates are fine.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from chalicelib.core import log
from chalicelib.stores.daily_cap import USAGE_RETENTION_S, UsageModel
from chalicelib.stores.tables import bound

DAY_S = 86400


@dataclass(frozen=True)
class Window:
    days: int
    sent: int
    bounced: int
    complained: int

    @property
    def bounce_rate(self) -> float:
        return self.bounced / self.sent if self.sent else 0.0

    @property
    def complaint_rate(self) -> float:
        return self.complained / self.sent if self.sent else 0.0


@dataclass(frozen=True)
class Limits:
    bounce_rate: float = 0.05
    complaint_rate: float = 0.001
    window_days: int = 7
    min_sent: int = 200  # below this, one bounce is not a rate


def verdict(window: Window, limits: Limits) -> str | None:
    """Why this window should pause the tenant, or None."""
    if window.sent < limits.min_sent:
        return None
    if window.bounce_rate > limits.bounce_rate:
        return (
            f"bounce rate {window.bounce_rate:.1%} over the last {window.days} days "
            f"({window.bounced} of {window.sent}) is above {limits.bounce_rate:.1%}"
        )
    if window.complaint_rate > limits.complaint_rate:
        return (
            f"complaint rate {window.complaint_rate:.2%} over the last {window.days} days "
            f"({window.complained} of {window.sent}) is above {limits.complaint_rate:.2%}"
        )
    return None


class Reputation:
    def __init__(self, table_name: str, region: str, limits: Limits | None = None) -> None:
        self._model = bound(UsageModel, table_name, region)
        self.limits = limits or Limits()

    def add(
        self, user_id: str, *, sent: int = 0, bounced: int = 0, complained: int = 0, now: float | None = None
    ) -> None:
        now = time.time() if now is None else now
        m = self._model
        actions = [m.expires_at.set(int(now) + USAGE_RETENTION_S)]
        for attr, n in ((m.sent, sent), (m.bounced, bounced), (m.complained, complained)):
            if n:
                actions.append(attr.add(n))
        m(user_id, time.strftime("%Y-%m-%d", time.gmtime(now))).update(actions=actions)

    def window(self, user_id: str, now: float | None = None) -> Window:
        now = time.time() if now is None else now
        days = self.limits.window_days
        first = time.strftime("%Y-%m-%d", time.gmtime(now - (days - 1) * DAY_S))
        m = self._model
        sent = bounced = complained = 0
        for item in m.query(user_id, m.day >= first, consistent_read=True):
            sent += int(item.sent or 0)
            bounced += int(item.bounced or 0)
            complained += int(item.complained or 0)
        return Window(days, sent, bounced, complained)


class SentAhead:
    """The guard's denominator, counted before the emails go: one write per `block` sends per tenant.

    Counting after sending (in a buffer flushed each second) loses what a killed sender had buffered,
    and every bounce of those emails then counts against fewer sends: a tenant with a 1% bounce rate can
    look like 5% and be paused, its email held. Counted ahead, a crash leaves at most a block's unused
    remainder counted (the guard is a little late); `settle()`, when a drain ends, gives it back.
    """

    def __init__(self, reputation: Reputation, block: int = 20) -> None:
        self._reputation = reputation
        self._block = block
        self._left: dict[str, int] = {}  # per tenant: sends already counted, not yet made
        self._owed: dict[str, int] = {}  # per tenant: sends made while the count could not be written
        self._lock = threading.Lock()

    def take(self, user_id: str) -> None:
        """Count one send of `user_id`'s, before it is made."""
        with self._lock:
            if self._left.get(user_id, 0) > 0:
                self._left[user_id] -= 1
                return
            owed = self._owed.pop(user_id, 0)
            try:  # under the lock: the tenant's other senders wait for this block rather than write their own
                self._reputation.add(user_id, sent=self._block + owed)
            except Exception as exc:  # the send goes on; its count goes with the next block
                self._owed[user_id] = owed + 1
                log.warning("sends not counted yet", user=user_id, error=type(exc).__name__)
                return
            self._left[user_id] = self._block - 1

    def give_back(self, user_id: str) -> None:
        """One counted send was not made (SES refused or throttled it): the next send uses its count."""
        with self._lock:
            self._left[user_id] = self._left.get(user_id, 0) + 1

    def settle(self) -> None:
        """Give back what was counted and not sent (when a drain ends, so a finished drain is exact)."""
        with self._lock:
            left, self._left = self._left, {}
            owed, self._owed = self._owed, {}
        for user_id in set(left) | set(owed):
            n = owed.get(user_id, 0) - left.get(user_id, 0)
            if not n:
                continue
            try:
                self._reputation.add(user_id, sent=n)
            except Exception as exc:  # a returned remainder left counted: the guard is a little late
                log.warning("unsent count not given back", user=user_id, error=type(exc).__name__)
