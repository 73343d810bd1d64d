"""The ledger's ports (chalicelib.stores.ledger): a recipient's claim, its outcome recorded (the recorder's
alone), the pipeline's reads and a whole campaign's; and the values they speak of."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Claim:
    pk: str
    rcpt: str
    token: str


@dataclass(frozen=True)
class Entry:
    email: str
    state: str | None
    reason: str | None
    message_id: str | None
    updated_at: int | None
    feedback: str | None = None  # delivered / bounced / complained, from SES's events
    retries: int = 0  # times retry-failed queued it again
    claimed_until: int | None = None  # epoch ms: a send's claim holds the recipient until then
    retried_at: int | None = None  # epoch ms: when retry-failed last queued it again


@dataclass(frozen=True)
class HitContext:
    """What a recipient's open or click is judged against (chalicelib.ingest.machines), epoch ms."""

    sent_at: int | None = None  # when its send was recorded
    delivered_at: int | None = None  # the delivery as SES timed it, once its event is recorded
    first_click_at: int | None = None  # its first click recorded, a person's or a machine's
    first_click: str | None = None  # that click's link


@dataclass(frozen=True)
class Tally:
    counts: Mapping[str, int] = field(default_factory=dict)  # every counter in STATED
    rows: int = 0
    latest_ms: int = 0  # the latest change of any row (its `updated_at`): none is newer

    def __getitem__(self, name: str) -> int:
        return int(self.counts.get(name, 0))


class LedgerRecords(Protocol):
    """Every transition of a recipient's state: what chalicelib.stores.recorder.Recorder writes; and the one
    read that spares a batch of SES's Send events a read each (`with_outcome`).

    One port, not one per transition: the recorder is the one consumer, and it is the one place every stage
    records through (so that no stage writes a state and forgets its counter)."""

    def record_queued(self, user_id: str, campaign_id: str, emails: list[str]) -> int: ...

    def record_rejected(self, user_id: str, campaign_id: str, rejected: list[tuple[str, str]]) -> int: ...

    def record_suppressed(self, user_id: str, campaign_id: str, suppressed: list[tuple[str, str]]) -> int: ...

    def record_scheduled(self, user_id: str, campaign_id: str, emails: list[str]) -> int: ...

    def record_released(self, user_id: str, campaign_id: str, emails: list[str]) -> int: ...

    def record_unsent(self, user_id: str, campaign_id: str, state: str, emails: list[str], reason: str) -> int: ...

    def reopen(self, user_id: str, campaign_id: str, email: str) -> str | None: ...

    def finish(self, claim: Claim, state: str, *, message_id: str | None = None, reason: str | None = None) -> bool: ...

    def with_outcome(self, recipients: Iterable[tuple[str, str, str]]) -> set[tuple[str, str, str]]: ...

    def record_sent_event(
        self, user_id: str, campaign_id: str, email: str, message_id: str, *, read_first: bool = True
    ) -> bool: ...

    def record_failed_event(
        self, user_id: str, campaign_id: str, email: str, message_id: str, reason: str
    ) -> str | None: ...

    def record_feedback(
        self,
        user_id: str,
        campaign_id: str,
        email: str,
        kind: str,
        detail: str,
        message_id: str | None = None,
        evidence: str | None = None,
        happened_at_ms: int | None = None,
    ) -> bool: ...


class LedgerClaims(Protocol):
    """The right to send to one recipient: the delivery claims it and gives it back; the dead-letter job reads
    a recipient and takes its claim (its outcome then goes through the recorder)."""

    def get(self, user_id: str, campaign_id: str, email: str) -> Entry | None: ...

    def claim(self, user_id: str, campaign_id: str, email: str, hold_s: float) -> Claim | Entry: ...

    def unclaim(self, claim: Claim) -> None: ...


class LedgerReads(Protocol):
    """The pipeline's reads of recipients: which are recorded already (precompile: a redelivered message queues
    none again), a campaign's failed and stale retried ones (retry-failed), and what an open or click is judged
    against (the tracking routes)."""

    def recorded(self, user_id: str, campaign_id: str, emails: Iterable[str]) -> dict[str, str | None]: ...

    def entries(
        self, user_id: str, campaign_id: str, state: str | None = None, *, states: tuple[str, ...] = ()
    ) -> Iterator[Entry]: ...

    def hit_context(self, user_id: str, campaign_id: str, email: str) -> HitContext | None: ...


class LedgerPages(Protocol):
    """Reads of a whole campaign's rows, apart from the pipeline's: the tenant API's listing, a page at a time,
    and the recount's tally of every row (a Query of the partition: a job's, never a request's)."""

    def page(
        self,
        user_id: str,
        campaign_id: str,
        *,
        state: str | None = None,
        limit: int = 100,
        after: str | None = None,
        prefix: str | None = None,
    ) -> tuple[list[Entry], str | None]: ...

    def tally(self, user_id: str, campaign_id: str) -> Tally: ...
