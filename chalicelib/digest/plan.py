"""What one recipient's digest email carries this period: decided from the stored rows, nothing written.

The rules (docs/digests.md): an item goes into at most one email (the mailed markers); a retracted item
that was not mailed is left out; an item older than the window is dropped and counted, never mailed late;
the newest `maxItems` go, the rest wait for the next period (while they stay in the window). An assembly
left open by a crash is finished as it was, under its own period, before anything new is planned.
"""

from __future__ import annotations

from dataclasses import dataclass

from chalicelib.core.digest_contract import Item
from chalicelib.stores.digests import RecipientDigest, StoredItem


@dataclass(frozen=True)
class RecipientPlan:
    period: str
    items: list[Item]  # newest first, at most maxItems (empty: a resumed assembly with nothing left to send)
    items_total: int  # unmailed applicable items in the window (items_total - len(items) wait)
    stored_ids: frozenset[str]  # every item id stored for the recipient (what the markers keep)
    resumed: bool = False  # the email of an assembly a crash left open (its open ids are marked, sent or not)
    # Until when the recipient's state matters: the latest end of its stored items (out of the window, or
    # their row expired, whichever is later: an item past its row's expiry is never mailed, so a window
    # lengthened later cannot bring back an item whose marker is gone). The state row's TTL.
    keep_until: float = 0.0
    # Until when this email's marker row matters: the latest end of the items it marks (its TTL, its key).
    markers_until: float = 0.0


@dataclass(frozen=True)
class Skipped:
    expired: frozenset[str] = frozenset()  # unmailed items past the window: dropped (their rows deleted)
    retracted: int = 0  # unmailed items retracted: left out


def plan_recipient(
    rows: RecipientDigest, period: str, now: float, window_s: float, max_items: int, retracted: frozenset[str]
) -> tuple[RecipientPlan | None, Skipped]:
    stored = frozenset(s.item.id for s in rows.items)
    keep_until = max((s.end(window_s) for s in rows.items), default=now)

    def in_window(s: StoredItem) -> bool:  # nor past its row's expiry: gone, whether TTL deleted it yet or not
        return s.item.at + window_s > now and (s.expires_at is None or s.expires_at > now)

    def markers_until(ids: frozenset[str]) -> float:
        return max((s.end(window_s) for s in rows.items if s.item.id in ids), default=now)

    if rows.open_period is not None:
        # Queued, or about to be, before a crash: the same email again (the ledger drops it if it went),
        # then marked, so its items never go in a second email.
        # Those since retracted or past the window are left out (if the email went, the ledger drops this
        # one whatever it carries); with none left, nothing is sent and the assembly is only closed.
        carried = [
            s.item for s in rows.items if s.item.id in rows.open_ids and s.item.id not in retracted and in_window(s)
        ]
        carried.sort(key=lambda i: i.at, reverse=True)
        until = markers_until(rows.open_ids)
        plan = RecipientPlan(rows.open_period, carried, len(carried), stored, True, keep_until, until)
        return plan, Skipped()
    unmailed = [s for s in rows.items if s.item.id not in rows.mailed]
    expired = [s.item for s in unmailed if not in_window(s)]
    withdrawn = [s.item for s in unmailed if s.item.id in retracted and in_window(s)]
    fresh = [s.item for s in unmailed if s.item.id not in retracted and in_window(s)]
    skipped = Skipped(expired=frozenset(i.id for i in expired), retracted=len(withdrawn))
    if not fresh or rows.last_period == period:
        return None, skipped
    fresh.sort(key=lambda i: (i.at, i.id), reverse=True)
    going = fresh[:max_items]
    until = markers_until(frozenset(i.id for i in going))
    return RecipientPlan(period, going, len(fresh), stored, False, keep_until, until), skipped
