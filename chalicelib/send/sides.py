"""The send path's collaborators, grouped where they belong together (chalicelib.wiring builds them).

Small frozen groups, so that a constructor takes what it uses in a few named parts rather than a long row
of stores, and no part of the send path builds another's collaborators itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from chalicelib.core.links import LinkSigner
from chalicelib.core.ports import SqsDrain
from chalicelib.send.identity import SendingIdentity
from chalicelib.send.message_actions import MessageActions
from chalicelib.send.parking import Parking
from chalicelib.send.ports import SesSend
from chalicelib.send.queue_ref import QueueRef
from chalicelib.send.rate_limiter import Pacings
from chalicelib.send.sent_ahead import SentAhead
from chalicelib.stores.payloads import PayloadStore
from chalicelib.stores.ports.campaigns import ControlSwitch
from chalicelib.stores.ports.ledger import LedgerClaims
from chalicelib.stores.ports.sending import SesTenantRecords
from chalicelib.stores.ports.suppression import SuppressionList
from chalicelib.stores.ports.tenants import TenantRecords
from chalicelib.stores.recorder import Recorder

__all__ = ["Content", "DrainQueues", "GateReads", "LedgerSide", "QueueRef", "SendState", "SesSide"]


@dataclass(frozen=True)
class LedgerSide:
    """The ledger: a recipient claimed and given back, and its outcome recorded (the one way: the Recorder)."""

    claims: LedgerClaims
    recorder: Recorder


@dataclass(frozen=True)
class SesSide:
    """SES: the send, a free tenant's SES tenant, and who an email is sent as (and at what rate)."""

    api: SesSend  # SES's own: the send, and whether an account may send
    ses_tenants: SesTenantRecords
    identity: SendingIdentity


@dataclass(frozen=True)
class GateReads:
    """What says whether an email may go at all: its tenant, its recipient's suppression, its campaign."""

    tenants: TenantRecords
    suppressions: SuppressionList
    control: ControlSwitch


@dataclass(frozen=True)
class SendState:
    """What a container's drains share and settle: the pacings, the recorder whose counts are gathered (flushed
    at each drain's end), the guard's counts ahead."""

    pacings: Pacings
    recorder: Recorder
    sent_ahead: SentAhead


@dataclass(frozen=True)
class Content:
    """A queued email's body (fetched from S3 when the message points to it) and its links (to compose it)."""

    payloads: PayloadStore
    links: LinkSigner


@dataclass(frozen=True)
class DrainQueues:
    """SQS for one drain: receive, read the queue's tags and depth; act on each message; park paused email."""

    sqs: SqsDrain
    actions: MessageActions
    parking: Parking
