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

import json
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from chalicelib.core.contract import Sender
from chalicelib.core.errors import SenderRefused
from chalicelib.stores.campaign_stats import CampaignStatsModel
from chalicelib.stores.tables import bound, update_if
from chalicelib.stores.tenant_model import KeyVersion

_CACHE_MAX = 10_000

# Field -> its name in the PrecompileEmail message, for the reasons a user reads.
_NAMES = {
    "plan": "userPlan",
    "email_address": "sender.emailAddress",
    "from_name": "sender.fromName",
    "region": "sender.region",
    "rate_per_second": "sender.ratePerSecond",
    "key_account": "sender.apiKey (the keys' AWS account)",
}


@dataclass(frozen=True)
class SenderSnapshot:
    plan: str
    email_address: str
    from_name: str
    region: str | None
    rate_per_second: float
    key_version: int | None  # None: the platform's account (free plan)
    # The account the keys belong to: what a later message must match (new keys of the same account, a
    # rotation during the campaign, are the same sender; the queued email keeps the first version, and the
    # sender takes the newest keys of its account).
    key_account: str | None = None

    @classmethod
    def of(cls, plan: str, sender: Sender, keys: KeyVersion | None) -> SenderSnapshot:
        version, account = (keys.version, keys.account) if keys is not None else (None, None)
        return cls(
            plan, sender.email_address, sender.from_name, sender.region, sender.rate_per_second, version, account
        )

    def queued_sender(self) -> dict[str, Any]:
        """The queued email's `sender`: what the drainer needs, without keys."""
        d: dict[str, Any] = {
            "region": self.region,
            "ratePerSecond": self.rate_per_second,
            "emailAddress": self.email_address,
            "fromName": self.from_name,
        }
        if self.key_version is not None:
            d["keyVersion"] = self.key_version
        return d

    def differences(self, fixed: SenderSnapshot) -> list[str]:
        """What this message says differently from the campaign's fixed sender, field by field."""
        out = []
        for name, shown in _NAMES.items():
            mine, theirs = getattr(self, name), getattr(fixed, name)
            if mine != theirs:
                out.append(f"{shown} is {theirs!r} for this campaign, {mine!r} in this message")
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SenderSnapshot:
        d = json.loads(text)
        return cls(
            str(d["plan"]),
            str(d["email_address"]),
            str(d["from_name"]),
            d["region"],
            float(d["rate_per_second"]),
            None if d["key_version"] is None else int(d["key_version"]),
            d.get("key_account"),
        )


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
