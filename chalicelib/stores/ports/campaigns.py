"""A campaign's stores' ports (chalicelib.stores.campaign_stats, campaign_sender, campaign_control, timeline):
its counters, its schedule's minutes, its pages, its fixed Sender, its pause and cancel, its timeline; and the
values they speak of."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from chalicelib.core.contract import Sender
from chalicelib.stores.ports.tenants import KeyVersion

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


@dataclass(frozen=True)
class Minute:
    start_s: int
    counts: Mapping[str, int]


class Counts(Protocol):
    """The counters' writer: CampaignStats writes each call, BufferedStats gathers them (the recorder's)."""

    def add(self, user_id: str, campaign_id: str, *, error: str | None = None, **deltas: int) -> None: ...

    def add_counts(
        self,
        user_id: str,
        campaign_id: str,
        deltas: Mapping[str, int],
        *,
        error: str | None = None,
        sent_seconds: Mapping[int, int] | None = None,
    ) -> None: ...

    def flush(self) -> None: ...


class CampaignSchedule(Protocol):
    """A campaign's time, deadline and schedule-store minutes, kept beside its counters: noted by precompile,
    read by the releaser (a cancelled campaign's minutes), both by the campaign actions (reschedule)."""

    def note_schedule(
        self,
        user_id: str,
        campaign_id: str,
        scheduled_at_ms: int | None,
        deadline_ms: int | None,
        bucket: str | None = None,
    ) -> None: ...

    def schedule_buckets(self, user_id: str, campaign_id: str) -> list[str]: ...


class CampaignPages(Protocol):
    """GET /campaigns: the tenant's campaigns newest first, a page at a time; and one of them."""

    def newest(
        self, user_id: str, *, before: tuple[int, str] | None = None, limit: int = 50
    ) -> tuple[list[CampaignCounts], tuple[int, str] | None]: ...

    def get(self, user_id: str, campaign_id: str) -> CampaignCounts | None: ...


class CounterCorrections(Protocol):
    """The campaign's counters read, and corrected under the condition that they did not move since."""

    def read(self, user_id: str, campaign_id: str) -> CampaignCounts | None: ...

    def correct(self, read: CampaignCounts, drift: Mapping[str, int]) -> bool: ...


class TimelineReads(Protocol):
    """GET /campaigns/{id}: a campaign's minutes, oldest first."""

    def minutes(
        self, user_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1440
    ) -> tuple[list[Minute], str | None]: ...


class SenderFix(Protocol):
    """Precompile's: fix a campaign's sender with its first message (SenderRefused for another one later)."""

    def fix(self, user_id: str, campaign_id: str, snapshot: SenderSnapshot, subject: str | None = None) -> None: ...


class ControlSwitch(Protocol):
    """A campaign's pause and cancel: the drainer, the parking and the releaser read its state (cached unless
    `fresh`); the campaign actions pause, resume and cancel (final: pause and resume answer False once
    cancelled)."""

    def state(self, user_id: str, campaign_id: str, *, fresh: bool = False) -> str | None: ...

    def pause(self, user_id: str, campaign_id: str) -> bool: ...

    def resume(self, user_id: str, campaign_id: str) -> bool: ...

    def cancel(self, user_id: str, campaign_id: str) -> None: ...
