"""Each tenant's sends, permanent bounces and complaints per UTC day: the reputation guard's counts.

Kept in the `usage` table beside the free plan's daily cap. The guard that reads them is
chalicelib.feedback.reputation; the drainer counts its sends ahead (chalicelib.send.sent_ahead).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pynamodb.expressions.update import Action

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


class Reputation:
    def __init__(self, table_name: str, region: str, limits: Limits) -> None:
        self._model = bound(UsageModel, table_name, region)
        self.limits = limits

    def add(
        self, user_id: str, *, sent: int = 0, bounced: int = 0, complained: int = 0, now: float | None = None
    ) -> None:
        now = time.time() if now is None else now
        m = self._model
        actions: list[Action] = [m.expires_at.set(int(now) + USAGE_RETENTION_S)]
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
