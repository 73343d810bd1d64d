"""The reputation guard: a tenant whose bounces or complaints run too high stops sending.

SES reviews (and then pauses) an account whose bounce rate passes about 5% or complaint rate 0.1%; on
the platform's account one careless free tenant would take every other free tenant down with it, and a
paid tenant's own account is its livelihood. So each tenant's sends, permanent bounces and complaints
are counted per UTC day (the `usage` table, beside the free plan's cap), and after each bounce or
complaint the rolling window (7 days by default) is checked: over a limit, with enough volume to mean
something, the tenant is paused with the reason. The sender holds a paused tenant's email (nothing is
dropped) until `moonsend tenant resume`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from chalicelib.daily_cap import USAGE_RETENTION_S, UsageModel
from chalicelib.tables import bound

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
