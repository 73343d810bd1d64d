"""One in-memory fake per port (chalicelib's stores, SQS, SES, S3), and units built whole from them (parts)."""

from tests.fakes.control import FakeControl
from tests.fakes.daily_cap import FakeCap
from tests.fakes.ledger import FakeLedger
from tests.fakes.queues import FakeQueueActivity, FakeQueues
from tests.fakes.reputation import FakeReputation
from tests.fakes.s3 import FakeS3, failed_copies, payloads
from tests.fakes.schedule import FakeSchedule
from tests.fakes.senders import FakeCampaignSenders, FakeFreeAddresses, no_account
from tests.fakes.ses import FakeSes
from tests.fakes.sqs import FakeSqs
from tests.fakes.stats import FakeStats
from tests.fakes.suppressions import FakeSuppressions
from tests.fakes.tenants import FakeTenants

__all__ = [
    "FakeCampaignSenders",
    "FakeCap",
    "FakeControl",
    "FakeFreeAddresses",
    "FakeLedger",
    "FakeQueueActivity",
    "FakeQueues",
    "FakeReputation",
    "FakeS3",
    "FakeSchedule",
    "FakeSes",
    "FakeSqs",
    "FakeStats",
    "FakeSuppressions",
    "FakeTenants",
    "failed_copies",
    "no_account",
    "payloads",
]
