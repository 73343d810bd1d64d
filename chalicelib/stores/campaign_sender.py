"""A campaign's sender, fixed by its first accepted message.

Every email of a campaign goes out as that message said: From, fromName, plan, region, rate and the
version of the tenant's keys. The snapshot travels in each queued email (`sender` and `userPlan`), so
email that is scheduled, parked, retried or re-queued keeps it, and the drainer never reads From or the
plan from the tenant registry, which the next message may have changed. A later message of the campaign
with another sender is refused, naming the difference; a tenant that changes plan or sender does so for
its later campaigns.

The snapshot is one attribute on the campaign's counters item, written once under a condition; it never
changes afterwards, so each container remembers the ones it has seen and writes nothing more for them.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from chalicelib.core.errors import SenderRefused
from chalicelib.stores.campaign_stats import CampaignStatsModel
from chalicelib.stores.ports.campaigns import SenderSnapshot
from chalicelib.stores.tables import bound, update_if

_CACHE_MAX = 10_000


class CampaignSenders:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(CampaignStatsModel, table_name, region)
        self._fixed: dict[tuple[str, str], SenderSnapshot] = {}
        self._lock = threading.Lock()

    def fix(self, user_id: str, campaign_id: str, snapshot: SenderSnapshot, subject: str | None = None) -> None:
        """Fix the campaign's sender to `snapshot` if it has none; SenderRefused if it has another. The first
        message also gives the campaign its summary: when it was created and its subject."""
        key = (user_id, campaign_id)
        with self._lock:
            fixed = self._fixed.get(key)
        if fixed is None:
            fixed = self._fix(user_id, campaign_id, snapshot, subject)
            with self._lock:
                if len(self._fixed) >= _CACHE_MAX:
                    self._fixed.clear()
                self._fixed[key] = fixed
        differences = snapshot.differences(fixed)
        if differences:
            raise SenderRefused(
                f"sender: campaign {campaign_id}'s sender was fixed by its first message: " + "; ".join(differences)
            )

    def _fix(self, user_id: str, campaign_id: str, snapshot: SenderSnapshot, subject: str | None) -> SenderSnapshot:
        m = self._model
        # One write: the summary comes with the From identity, under the same condition, so no write is added per
        # campaign (the created time is the by_created index's key: written once, never changed).
        actions: list[Any] = [m.sender_snapshot.set(snapshot.to_json()), m.created_ms.set(int(time.time() * 1000))]
        actions.append(m.counts_releases.set(True))  # a campaign begun now has every release counted
        actions.append(m.entries_marked.set(True))  # and its ledger rows' entry times (the recount's)
        if subject:
            actions.append(m.subject.set(subject))
        fixed_now = update_if(m(user_id, campaign_id), actions, m.sender_snapshot.does_not_exist())
        if fixed_now:
            return snapshot
        item = m.get(user_id, campaign_id, consistent_read=True, attributes_to_get=["sender_snapshot"])
        return SenderSnapshot.from_json(item.sender_snapshot)

    def fixed(self, user_id: str, campaign_id: str) -> SenderSnapshot | None:
        """The campaign's sender (for status and tests), None before its first message."""
        try:
            item = self._model.get(user_id, campaign_id, consistent_read=True, attributes_to_get=["sender_snapshot"])
        except self._model.DoesNotExist:
            return None
        return SenderSnapshot.from_json(item.sender_snapshot) if item.sender_snapshot else None
