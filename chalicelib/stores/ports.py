"""The stores' ports: what the domain asks of each store, as a `typing.Protocol`.

Where they live: a port is declared beside the adapter that implements it (as Powertools for AWS Lambda keeps
its idempotency port, `persistence/base.py`, beside its DynamoDB layer), so the stores' ports are here, the
SES sender's in chalicelib.send.ports and the AWS clients' (S3, SQS) in chalicelib.core.ports. A consumer
imports the port it needs from one known path; the concrete store and the fake in tests/fakes both satisfy
it structurally, and mypy checks both where they are handed to a consumer (chalicelib.wiring for the
store, tests/fakes/parts.py for the fake) and in tests/contract, which also runs each port's behaviour
against both.

Sized to use: a port has the methods its consumers call and no more. A store with consumers that want
different parts of it has several ports (the ledger: recording, claiming, reading), and a consumer that
hands the store on to another one (the drainer gives its ledger to the delivery and to the recorder)
takes a port that joins theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from chalicelib.core.contract import Sender
from chalicelib.stores.api_keys import StoredKey
from chalicelib.stores.campaign_model import CampaignCounts, SenderSnapshot
from chalicelib.stores.daily_cap import Share
from chalicelib.stores.lease import Lease
from chalicelib.stores.ledger_model import Claim, Entry
from chalicelib.stores.ledger_tally import Tally
from chalicelib.stores.pauses import Pause
from chalicelib.stores.people import Person
from chalicelib.stores.platform_identities import Coverage
from chalicelib.stores.recounts import RecountNote
from chalicelib.stores.reputation import Limits, Window
from chalicelib.stores.schedule import StoredBatch
from chalicelib.stores.ses_tenants import TenantStatus
from chalicelib.stores.sessions import StoredSession
from chalicelib.stores.sign_in_links import StoredLink
from chalicelib.stores.tenant_model import KeyVersion, Tenant

if TYPE_CHECKING:  # the registry takes SecretSeal from here: imported at run time, it would be a cycle
    from chalicelib.stores.event_log import EventPage, KeptEvent
    from chalicelib.stores.suppression import Suppression
    from chalicelib.stores.timeline import Minute

# The AWS account a Sender's keys belong to (STS GetCallerIdentity with those keys).
AccountOf = Callable[[Sender], str]

# --- the ledger (chalicelib.stores.ledger) ---------------------------------------------------------------


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
        self, user_id: str, campaign_id: str, email: str, kind: str, detail: str, message_id: str | None = None
    ) -> bool: ...


class LedgerClaims(Protocol):
    """The right to send to one recipient: the delivery claims it and gives it back; the dead-letter job reads
    a recipient and takes its claim (its outcome then goes through the recorder)."""

    def get(self, user_id: str, campaign_id: str, email: str) -> Entry | None: ...

    def claim(self, user_id: str, campaign_id: str, email: str, hold_s: float) -> Claim | Entry: ...

    def unclaim(self, claim: Claim) -> None: ...


class LedgerReads(Protocol):
    """The pipeline's reads of recipients: which are recorded already (precompile: a redelivered message queues
    none again), and a campaign's failed and stale retried ones (retry-failed)."""

    def recorded(self, user_id: str, campaign_id: str, emails: Iterable[str]) -> dict[str, str | None]: ...

    def entries(
        self, user_id: str, campaign_id: str, state: str | None = None, *, states: tuple[str, ...] = ()
    ) -> Iterator[Entry]: ...


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


# --- sign-in attempts (chalicelib.stores.attempts) ----------------------------------------------------------


class AttemptCounts(Protocol):
    """The sign-in guard's (chalicelib.console.guard): attempts of a key's window, read and added to."""

    def count(self, key: str) -> int: ...

    def add(self, key: str, expires_at: int) -> int: ...

    def release(self, key: str) -> None: ...


# --- the drain leases (chalicelib.stores.lease) ------------------------------------------------------------


class QueuesUsedIn(Protocol):
    """The tenants whose queue was last used in given UTC hours, and a queue marked in use for an hour
    (chalicelib.stores.queue_activity)."""

    def used_in(self, hours: Iterable[str]) -> set[str]: ...

    def mark_hour(self, user_id: str, hour: str) -> None: ...


class QueuesDrained(Protocol):
    """The queues a drain held since a time (chalicelib.stores.lease)."""

    def drained(self, since_ms: int) -> set[str]: ...


class LeaseHolders(Protocol):
    """Whether a queue has a live drainer: the drain starter, the sweeper and the idle-queue job ask only this."""

    def holder(self, queue: str) -> Lease | None: ...


class DrainLeases(LeaseHolders, Protocol):
    """The drain chain's (chalicelib.send.drain_chain): take, hand on and give up a queue's lease."""

    def acquire(self, queue: str, hold_ms: int) -> Lease | None: ...

    def renew(self, queue: str, token: str, hold_ms: int) -> Lease | None: ...

    def drop(self, lease: Lease, quiet_from_ms: int | None = None) -> None: ...


# --- the suppression list (chalicelib.stores.suppression) --------------------------------------------------


class SuppressionList(Protocol):
    """The tenant API's: the tenant's suppression list, read a page at a time, added to, lifted from."""

    def page(
        self,
        user_id: str,
        *,
        reason: str | None = None,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> tuple[list[Suppression], str | None]: ...

    def add_many(self, user_id: str, emails: Iterable[str], reason: str) -> tuple[int, int]: ...

    def entry(self, user_id: str, email: str) -> Suppression | None: ...

    def lift(self, user_id: str, email: str) -> bool: ...

    def check(self, user_id: str, emails: Iterable[str]) -> dict[str, str]: ...

    def add(self, user_id: str | None, email: str, source: str, reason: str) -> bool: ...


# --- campaign control (chalicelib.stores.campaign_control) -------------------------------------------------


class ControlSwitch(Protocol):
    """A campaign's pause and cancel: the drainer, the parking and the releaser read its state (cached unless
    `fresh`); the campaign actions pause, resume and cancel (final: pause and resume answer False once
    cancelled)."""

    def state(self, user_id: str, campaign_id: str, *, fresh: bool = False) -> str | None: ...

    def pause(self, user_id: str, campaign_id: str) -> bool: ...

    def resume(self, user_id: str, campaign_id: str) -> bool: ...

    def cancel(self, user_id: str, campaign_id: str) -> None: ...


# --- the free plan's daily cap (chalicelib.stores.daily_cap) -----------------------------------------------


class DailyShare(Protocol):
    """Precompile's, its one consumer: a batch's share of the day's cap, and the cap (for the reason)."""

    @property
    def cap(self) -> int: ...

    def share(self, user_id: str, wanted: int, batch: str, now: float | None = None) -> Share: ...


# --- the campaign counters (chalicelib.stores.campaign_stats) ----------------------------------------------


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


# --- reputation (chalicelib.stores.reputation) --------------------------------------------------------------


class ReputationCounts(Protocol):
    """The reputation guard's counts: the drainer counts sends ahead of them (chalicelib.send.sent_ahead); SES's
    events count bounces and complaints and read the window against the limits."""

    @property
    def limits(self) -> Limits: ...

    def add(
        self, user_id: str, *, sent: int = 0, bounced: int = 0, complained: int = 0, now: float | None = None
    ) -> None: ...

    def window(self, user_id: str, now: float | None = None) -> Window: ...

    def count_feedback(
        self, user_id: str, campaign_id: str, address: str, kind: str, now: float | None = None
    ) -> bool: ...


# --- the schedule store (chalicelib.stores.schedule) --------------------------------------------------------


class ParkingStore(Protocol):
    """Email kept until a moment comes: precompile keeps a scheduled batch until it is due, the parking
    (chalicelib.queueing.parked_email) a paused campaign's email in a partition until it is resumed."""

    def put(
        self,
        *,
        user_id: str,
        campaign_id: str,
        plan: str,
        queue: str,
        due_ms: int,
        deadline_ms: int | None,
        emails: list[tuple[str, str]],
        bucket: str | None = None,
    ) -> StoredBatch: ...

    def emails(self, batch: StoredBatch) -> list[tuple[str, str]]: ...

    def remove(self, batch: StoredBatch, *, keep_body: bool = False) -> None: ...

    def parked(self, bucket: str) -> list[StoredBatch]: ...


class ReleaseStore(Protocol):
    """Scheduled email's way out: the releaser's (what is due, and how far it has released; a batch's emails,
    and the batch forgotten once they are on their queue) and the campaign actions' (reschedule: a campaign's
    batches, moved to another time)."""

    def due(self, up_to_ms: int) -> Iterator[StoredBatch]: ...

    def advance(self, up_to_ms: int) -> None: ...

    def set_aside(self, batch: StoredBatch) -> None: ...

    def emails(self, batch: StoredBatch) -> list[tuple[str, str]]: ...

    def remove(self, batch: StoredBatch, *, keep_body: bool = False) -> None: ...

    def of_campaign(self, user_id: str, campaign_id: str, buckets: list[str]) -> list[StoredBatch]: ...

    def move(self, batch: StoredBatch, due_ms: int, deadline_ms: int | None) -> StoredBatch: ...


# --- each tenant queue's activity (chalicelib.stores.queue_activity) ---------------------------------------


class QueueTouch(Protocol):
    """The queue's writer (chalicelib.queueing.tenant_queues): mark a queue used today (and this hour, the
    sweeper's); True when it was retired."""

    def touch(self, user_id: str, day: str, hour: str | None = None) -> bool: ...


class QueueRetirement(Protocol):
    """The idle-queue job's: which queues are idle, and claiming, finishing or retrying their removal."""

    def idle(self, before_day: str) -> Iterator[tuple[str, str]]: ...

    def stale_retirements(self) -> Iterator[str]: ...

    def retire(self, user_id: str, day: str) -> int | None: ...

    def reclaim(self, user_id: str) -> int | None: ...

    def still_claimed(self, user_id: str, claimed_ms: int) -> bool: ...

    def gone(self, user_id: str) -> None: ...


# --- the tenant registry (chalicelib.stores.tenants) -------------------------------------------------------


class TenantRecords(Protocol):
    """The tenant registry (chalicelib.stores.tenants.TenantRegistry) as every stage uses it: a tenant's settings
    and keys (cached unless `fresh`), the secret of one of its key versions, decrypted (the sending
    identity), a message's sender registered (precompile, the digests' intake), and its pauses: why its email
    is held now (the drainer, before each send: at most a second old), held by one owner's pause
    (chalicelib.stores.pauses: False if that owner holds it already or there is no such tenant), and some
    owners' pauses lifted (the others' stand)."""

    def get(self, user_id: str, *, fresh: bool = False) -> Tenant | None: ...

    def secret_of(self, user_id: str, keys: KeyVersion) -> str: ...

    def accept(self, user_id: str, plan: str, sender: Sender, account_of: AccountOf) -> KeyVersion | None: ...

    def pause_of(self, user_id: str, *, fresh: bool = False) -> str | None: ...

    def pause(self, user_id: str, owner: str, reason: str) -> bool: ...

    def resume(self, user_id: str, owners: Collection[str] = ...) -> tuple[Pause, ...]: ...


class ApiKeyRecords(Protocol):
    """A tenant's API keys by their digest (chalicelib.stores.api_keys), for chalicelib.control.api_keys."""

    def get(self, user_id: str, digest: str) -> StoredKey | None: ...

    def of_tenant(self, user_id: str) -> list[StoredKey]: ...

    def put(self, key: StoredKey) -> None: ...

    def delete(self, user_id: str, digest: str) -> bool: ...


class LegacyKeyHash(Protocol):
    """The digest of the one key a tenant row held before keys had their own table (chalicelib.control.api_keys
    still takes it, lists it and revokes it)."""

    def api_key_hash(self, user_id: str) -> str | None: ...

    def clear_api_key_hash(self, user_id: str) -> None: ...


class SecretSeal(Protocol):
    """The registry's own collaborator (chalicelib.stores.tenant_secrets): a secret encrypted for a tenant's row,
    and opened again for that tenant only."""

    def seal(self, user_id: str, secret: str) -> str: ...

    def open(self, user_id: str, sealed: str) -> str: ...


# --- the free plan's From addresses (chalicelib.stores.free_senders, platform_identities) ------------------


class FreeAddressRecords(Protocol):
    """The free plan's From addresses (chalicelib.stores.free_senders.FreeAddresses): claimed by a free tenant
    with its message (precompile, the digests' intake: SenderRefused when another tenant's), and whose one
    is now (GET /tenant, the drainer: None for nobody's)."""

    def claim(self, user_id: str, address: str, now_ms: int) -> None: ...

    def owner(self, address: str) -> str | None: ...


class IdentityCoverage(Protocol):
    """The free addresses' (chalicelib.stores.free_senders): what covers an address in the platform's SES account."""

    def covering(self, address: str) -> Coverage: ...


# --- each campaign's sender (chalicelib.stores.campaign_sender) --------------------------------------------


class SenderFix(Protocol):
    """Precompile's: fix a campaign's sender with its first message (SenderRefused for another one later)."""

    def fix(self, user_id: str, campaign_id: str, snapshot: SenderSnapshot, subject: str | None = None) -> None: ...


# --- SES tenants of the platform's account (chalicelib.stores.ses_tenants) ---------------------------------


class SesTenantRecords(Protocol):
    """The free tenants' SES tenants in the platform's account (chalicelib.stores.ses_tenants.SesTenants): set up
    for a tenant's sends and forgotten when SES no longer knows it (the delivery), and SES's view of one
    (None: none; the guard, the campaign actions, GET /tenant)."""

    def ensure(self, user_id: str, from_address: str, region: str) -> str: ...

    def forget(self, user_id: str) -> None: ...

    def name_of(self, user_id: str) -> str: ...

    def status(self, user_id: str, region: str, *, max_age_s: float = ...) -> TenantStatus | None: ...


# --- the tenants' event log (chalicelib.stores.event_log) ---------------------------------------------------


class EventRecords(Protocol):
    """The tenants' event log (chalicelib.stores.event_log.EventLog): every event kept (with the epoch ms it was
    recorded at) by webhook_events, and a page of a tenant's events read by the tenant API."""

    def keep(self, events: Iterable[tuple[KeptEvent, int]]) -> int: ...

    def page(
        self,
        user_id: str,
        *,
        after: str | None = None,
        type: str | None = None,
        campaign: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> EventPage: ...


# --- the tenant API's reads of campaigns (chalicelib.stores.campaign_stats, chalicelib.stores.timeline) -----


class CampaignPages(Protocol):
    """GET /campaigns: the tenant's campaigns newest first, a page at a time; and one of them."""

    def newest(
        self, user_id: str, *, before: tuple[int, str] | None = None, limit: int = 50
    ) -> tuple[list[CampaignCounts], tuple[int, str] | None]: ...

    def get(self, user_id: str, campaign_id: str) -> CampaignCounts | None: ...


class TimelineReads(Protocol):
    """GET /campaigns/{id}: a campaign's minutes, oldest first."""

    def minutes(
        self, user_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1440
    ) -> tuple[list[Minute], str | None]: ...


class DailyUse(Protocol):
    """GET /tenant's: the emails a free-plan tenant queued on the UTC day of `now` (chalicelib.stores.daily_cap)."""

    def used(self, user_id: str, now: float | None = None) -> int: ...


class CounterCorrections(Protocol):
    """The campaign's counters read, and corrected under the condition that they did not move since."""

    def read(self, user_id: str, campaign_id: str) -> CampaignCounts | None: ...

    def correct(self, read: CampaignCounts, drift: Mapping[str, int]) -> bool: ...


class RecountNotes(Protocol):
    """The campaigns whose ledger changed since they were recounted (chalicelib.stores.recounts): noted by the
    ledger's stream, read and done by the recount."""

    def note(self, pks: Iterable[str], now_ms: int | None = None) -> None: ...

    def settled(self, before_ms: int) -> Iterator[RecountNote]: ...

    def done(self, note: RecountNote) -> bool: ...


class SessionRecords(Protocol):
    """The console's sessions by the digest of their secret (chalicelib.stores.sessions)."""

    def put(self, s: StoredSession) -> None: ...

    def get(self, sid: str) -> StoredSession | None: ...

    def seen(self, sid: str, at: float) -> None: ...

    def delete(self, sid: str) -> None: ...

    def of_tenant(self, tenant_id: str) -> list[StoredSession]: ...


class PeopleRecords(Protocol):
    """A tenant's people and their roles (chalicelib.stores.people)."""

    def get(self, tenant_id: str, address: str) -> Person | None: ...

    def of_tenant(self, tenant_id: str) -> list[Person]: ...

    def tenants_of(self, address: str) -> list[str]: ...

    def put(self, p: Person) -> None: ...

    def signed_out(self, tenant_id: str, address: str, at: float) -> bool: ...

    def remove(self, tenant_id: str, address: str) -> None: ...


class KeyDigests(Protocol):
    """What a session signed in with an API key asks at each request (chalicelib.console.sessions): whether the
    key whose digest it holds is still the tenant's (chalicelib.control.api_keys)."""

    def live(self, user_id: str, digest: str) -> bool: ...


class SignInLinkRecords(Protocol):
    """Emailed sign-in links by the digest of their token (chalicelib.stores.sign_in_links)."""

    def put(self, link: StoredLink) -> None: ...

    def get(self, token: str) -> StoredLink | None: ...

    def use(self, token: str, now: float) -> bool: ...
