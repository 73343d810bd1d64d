"""A campaign as its stores give it back: its counters (CampaignCounts, chalicelib.stores.campaign_stats) and the
Sender it is fixed with (SenderSnapshot, chalicelib.stores.campaign_sender).

Values only: the ports (chalicelib.stores.ports) speak of them, and the stores and their consumers import
them from here, so that no port depends on a store's implementation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from chalicelib.core.contract import Sender
from chalicelib.stores.tenant_model import KeyVersion


@dataclass(frozen=True)
class CampaignCounts:
    user_id: str
    campaign_id: str
    counts: Mapping[str, int] = field(default_factory=dict)
    first_sent_ms: int | None = None
    last_sent_ms: int | None = None
    last_error: str | None = None
    scheduled_at_ms: int | None = None
    deadline_ms: int | None = None
    control: str | None = None  # paused | cancelled
    created_ms: int | None = None
    subject: str | None = None
    sender_snapshot: str | None = None  # JSON (chalicelib.stores.campaign_sender.SenderSnapshot)
    busiest_sent: int | None = None
    busiest_at_ms: int | None = None
    counts_releases: bool = False  # `released` counts every release (else: begun before releases were counted)
    entries_marked: bool = False  # its ledger rows say when each entered the queue (else: begun before they did)

    def __getitem__(self, name: str) -> int:
        return int(self.counts.get(name, 0))

    @property
    def achieved_rate(self) -> float | None:
        """Sends per second between the first and the last send of the campaign."""
        if not self.first_sent_ms or not self.last_sent_ms or self["sent"] < 2:
            return None
        span = (self.last_sent_ms - self.first_sent_ms) / 1000.0
        return (self["sent"] - 1) / span if span > 0 else None


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
