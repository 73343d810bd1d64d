"""Units built from a fake per port: every collaborator given, the ones a test cares about passed in.

Tests name what they watch (the SQS, SES, ledger or store they assert on) and take the rest from here,
so a unit under test is always whole: no test runs a drainer or a precompiler with a part left out.
"""

from __future__ import annotations

from typing import Any, Protocol

from chalicelib.core.config import Settings
from chalicelib.core.links import LinkSigner
from chalicelib.core.ports import SqsBatchSend, SqsDrain
from chalicelib.ingest.precompile import Outlets, Precompiler, RecipientChecks, Rendering, SenderChecks
from chalicelib.ingest.renderer import TemplateCache
from chalicelib.queueing.drain_starter import DrainStarter
from chalicelib.queueing.email_queue import EmailQueue
from chalicelib.queueing.enqueuer import Enqueuer
from chalicelib.queueing.parked_email import ParkedEmail
from chalicelib.queueing.ports import QueueRegistry
from chalicelib.send.drainer import Drainer
from chalicelib.send.ports import SesSending
from chalicelib.send.sides import Content
from chalicelib.stores.payloads import PayloadStore
from chalicelib.stores.ports.campaigns import CampaignSchedule, ControlSwitch, Counts, SenderFix
from chalicelib.stores.ports.ledger import LedgerClaims, LedgerReads, LedgerRecords
from chalicelib.stores.ports.schedule import ParkingStore
from chalicelib.stores.ports.sending import DailyShare, FreeAddressRecords, ReputationCounts, SesTenantRecords
from chalicelib.stores.ports.suppression import SuppressionList
from chalicelib.stores.ports.tenants import TenantRecords
from chalicelib.stores.recorder import Recorder
from chalicelib.wiring import SendStores, SesParts, send_path
from tests.fakes.control import FakeControl
from tests.fakes.daily_cap import FakeCap
from tests.fakes.leases import FakeLeases
from tests.fakes.ledger import FakeLedger
from tests.fakes.queues import FakeQueues
from tests.fakes.reputation import FakeReputation
from tests.fakes.s3 import failed_copies, payloads
from tests.fakes.schedule import FakeSchedule
from tests.fakes.senders import FakeCampaignSenders, FakeFreeAddresses, no_account
from tests.fakes.ses import FakeSesTenants
from tests.fakes.stats import FakeStats
from tests.fakes.suppressions import FakeSuppressions
from tests.fakes.tenants import FakeTenants


class UnitSqs(SqsDrain, SqsBatchSend, Protocol):
    """A unit drainer's one SQS: the queue it drains, and the one its parked email goes back to."""


# One fake stands in for a store that several collaborators take by their own ports: its parameter is the
# join of theirs (chalicelib has no use for a join: each consumer names the port it uses).
class DrainLedger(LedgerClaims, LedgerRecords, Protocol):
    """The drainer's ledger: claimed by its delivery, written by its recorder."""


class IntakeLedger(LedgerRecords, LedgerReads, Protocol):
    """Precompile's ledger: written by its recorder, read for what is recorded already."""


class IntakeCounts(Counts, CampaignSchedule, Protocol):
    """Precompile's counters: written by its recorder, and a scheduled campaign's time noted."""


def links() -> LinkSigner:
    return LinkSigner(b"unit-test-link-secret", "https://moonsend.test")


class Starts(list[tuple[Any, ...]]):
    """start_drain: the drains asked for, as (queue, start at), or (queue, start at, slot) for slots above 0."""

    def __call__(self, queue_name: str, start_at_ms: int | None = None, slot: int = 0) -> None:
        self.append((queue_name, start_at_ms) if slot == 0 else (queue_name, start_at_ms, slot))


def email_queue(
    sqs: SqsBatchSend, payload_store: PayloadStore | None = None, queues: QueueRegistry | None = None
) -> EmailQueue:
    return EmailQueue(queues or FakeQueues(), Enqueuer(sqs, sleep=lambda _s: None), payload_store or payloads())


def drainer(
    settings: Settings,
    sqs: UnitSqs,
    ses: SesSending,
    tenants: TenantRecords,
    *,
    stats: Counts | None = None,
    ledger: DrainLedger | None = None,
    payload_store: PayloadStore | None = None,
    suppressions: SuppressionList | None = None,
    control: ControlSwitch | None = None,
    schedule: ParkingStore | None = None,
    reputation: ReputationCounts | None = None,
    queues: QueueRegistry | None = None,
    drains: DrainStarter | None = None,
    ses_tenants: SesTenantRecords | None = None,
    addresses: FreeAddressRecords | None = None,
) -> Drainer:
    payload_store = payload_store or payloads()
    parked = ParkedEmail(schedule or FakeSchedule(), email_queue(sqs, payload_store, queues), Starts())
    ledger = ledger or FakeLedger()
    stores = SendStores(
        tenants,
        Recorder(ledger, stats or FakeStats()),
        ledger,
        suppressions or FakeSuppressions(),
        control or FakeControl(),
        reputation or FakeReputation(),
        failed_copies(),
        addresses or _their_own_addresses(tenants),
    )
    return send_path(
        settings,
        sqs,
        stores,
        SesParts(ses, ses_tenants or FakeSesTenants()),
        Content(payload_store, links()),
        parked,
        drains or DrainStarter(FakeLeases(), Starts()),
    )


def _their_own_addresses(tenants: TenantRecords) -> FakeFreeAddresses:
    """Each known tenant holds the From address it registered (what its accepted messages claimed)."""
    addresses = FakeFreeAddresses()
    for t in getattr(tenants, "by_id", {}).values():
        addresses.owners[t.sender.email_address.lower()] = t.user_id
    return addresses


def precompiler(
    settings: Settings,
    sqs: SqsBatchSend,
    *,
    tenants: TenantRecords | None = None,
    queues: QueueRegistry | None = None,
    stats: IntakeCounts | None = None,
    ledger: IntakeLedger | None = None,
    payload_store: PayloadStore | None = None,
    daily_cap: DailyShare | None = None,
    suppressions: SuppressionList | None = None,
    schedule: ParkingStore | None = None,
    campaign_senders: SenderFix | None = None,
    drains: DrainStarter | None = None,
    templates: TemplateCache | None = None,
) -> Precompiler:
    stats = stats or FakeStats()
    ledger = ledger or FakeLedger()
    return Precompiler(
        settings,
        SenderChecks(
            tenants or FakeTenants(), FakeFreeAddresses(), no_account, campaign_senders or FakeCampaignSenders()
        ),
        RecipientChecks(ledger, suppressions or FakeSuppressions(), daily_cap or FakeCap()),
        Rendering(TemplateCache() if templates is None else templates, links()),  # an empty cache is falsy
        Outlets(
            email_queue(sqs, payload_store, queues),
            drains or DrainStarter(FakeLeases(), Starts()),
            schedule or FakeSchedule(),
        ),
        Recorder(ledger, stats),
        stats,
    )
