"""Each tenant's sends, permanent bounces and complaints per UTC day: the reputation guard's counts.

Kept in the `usage` table beside the free plan's daily cap. The guard that reads them is
chalicelib.feedback.reputation; the drainer counts its sends ahead (chalicelib.send.sent_ahead).

A bounce or complaint is counted once per recipient of a campaign (`count_feedback`): the count and a mark on
the recipient's ledger entry are one transaction, so an event handled again (its suppression write failed, a
crash, SQS's redelivery) counts it if and only if no earlier try did. Counted only when the same call had
recorded it, a complaint whose first try failed after its record was never counted at all.
"""

from __future__ import annotations

import time

from pynamodb.expressions.update import Action
from pynamodb.transactions import TransactWrite

from chalicelib.stores.daily_cap import USAGE_RETENTION_S, UsageModel
from chalicelib.stores.ledger_model import LedgerModel, pk_of
from chalicelib.stores.ports.sending import Limits, Window
from chalicelib.stores.tables import bound
from chalicelib.stores.transactions import first_reason, transact

DAY_S = 86400


FEEDBACK_COUNTED = ("bounced", "complained")


class Reputation:
    def __init__(self, table_name: str, region: str, limits: Limits, ledger_table: str) -> None:
        self._model = bound(UsageModel, table_name, region)
        self._ledger = bound(LedgerModel, ledger_table, region)
        self.limits = limits

    def count_feedback(self, user_id: str, campaign_id: str, address: str, kind: str, now: float | None = None) -> bool:
        """Count one permanent bounce or complaint of a recorded recipient, once: True if this call counted
        it, False if an earlier one had (or the recipient has no ledger entry)."""
        if kind not in FEEDBACK_COUNTED:
            raise ValueError(f"the guard counts {FEEDBACK_COUNTED}, not {kind!r}")
        now = time.time() if now is None else now
        m, lg = self._model, self._ledger
        pk, rcpt = pk_of(user_id, campaign_id), address.lower()
        day = m(user_id, time.strftime("%Y-%m-%d", time.gmtime(now)))
        counted = m.bounced if kind == "bounced" else m.complained

        def write(tx: TransactWrite) -> None:
            tx.update(
                lg(pk, rcpt),
                actions=[lg.guarded.add({kind})],
                condition=lg.pk.exists() & (lg.guarded.does_not_exist() | ~lg.guarded.contains(kind)),
            )
            tx.update(day, actions=[m.expires_at.set(int(now) + USAGE_RETENTION_S), counted.add(1)])

        # Every bounce of a tenant's day is counted on one item: a batch's events, handled several at a time,
        # meet each other there (StillConflicting, after CONFLICT_ATTEMPTS: the event comes back, and counts then).
        cancelled = transact(m._get_connection().connection, write)
        if cancelled is None:
            return True
        if first_reason(cancelled) == "ConditionalCheckFailed":
            return False
        raise cancelled

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
