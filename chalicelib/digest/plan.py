"""What one recipient's digest email carries this period: decided from the stored rows, nothing written.

The rules (docs/digests.md): an item goes into at most one email (the mailed markers); a retracted item
that was not mailed is left out; an item older than the window is dropped and counted, never mailed late;
the newest `maxItems` go, the rest wait for the next period (while they stay in the window). An assembly
left open by a crash is finished as it was, under its own period, before anything new is planned.
"""

from __future__ import annotations

from dataclasses import dataclass

from chalicelib.core.digest_contract import MAX_WINDOW_S, Item
from chalicelib.stores.digests import RecipientDigest


@dataclass(frozen=True)
class RecipientPlan:
    period: str
    items: list[Item]  # newest first, at most maxItems (empty: a resumed assembly with nothing left to send)
    items_total: int  # unmailed applicable items in the window (items_total - len(items) wait)
    stored_ids: frozenset[str]  # every item id stored for the recipient (what the markers keep)
    resumed: bool = False  # the email of an assembly a crash left open (its open ids are marked, sent or not)
    # Until when the recipient's state matters: its newest stored item's end of the longest window a digest
    # may have (a window lengthened later cannot bring back an item whose marker is gone). Every marker
    # names an item that is gone by then (the state row's TTL).
    keep_until: float = 0.0


@dataclass(frozen=True)
class Skipped:
    expired: frozenset[str] = frozenset()  # unmailed items past the window: dropped (their rows deleted)
    retracted: int = 0  # unmailed items retracted: left out


def plan_recipient(
    rows: RecipientDigest, period: str, now: float, window_s: float, max_items: int, retracted: frozenset[str]
) -> tuple[RecipientPlan | None, Skipped]:
    stored = frozenset(s.item.id for s in rows.items)
    keep_until = max((s.item.at for s in rows.items), default=now) + MAX_WINDOW_S
    if rows.open_period is not None:
        # Queued, or about to be, before a crash: the same email again (the ledger drops it if it went),
        # then marked, so its items never go in a second email.
        # Those since retracted or past the window are left out (if the email went, the ledger drops this
        # one whatever it carries); with none left, nothing is sent and the assembly is only closed.
        carried = [
            s.item
            for s in rows.items
            if s.item.id in rows.open_ids and s.item.id not in retracted and s.item.at + window_s > now
        ]
        carried.sort(key=lambda i: i.at, reverse=True)
        plan = RecipientPlan(rows.open_period, carried, len(carried), stored, resumed=True, keep_until=keep_until)
        return plan, Skipped()
    unmailed = [s.item for s in rows.items if s.item.id not in rows.mailed]
    expired = [i for i in unmailed if i.at + window_s <= now]
    withdrawn = [i for i in unmailed if i.id in retracted and i.at + window_s > now]
    fresh = [i for i in unmailed if i.id not in retracted and i.at + window_s > now]
    skipped = Skipped(expired=frozenset(i.id for i in expired), retracted=len(withdrawn))
    if not fresh or rows.last_period == period:
        return None, skipped
    fresh.sort(key=lambda i: (i.at, i.id), reverse=True)
    return RecipientPlan(period, fresh[:max_items], len(fresh), stored, keep_until=keep_until), skipped
