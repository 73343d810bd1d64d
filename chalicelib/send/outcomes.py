"""What can become of one received message, and what the drain then does with it: a table, not a chain of ifs.

A delivery (chalicelib.send.delivery) ends every message in one Outcome, returned as a Verdict with what
the drain needs to act on it. DISPOSITIONS says, for each outcome, which count of the drain's result it
adds to and which Action is taken on the SQS message (chalicelib.send.message_actions carries them out).
The rule the table encodes: a message is deleted only when its outcome is in the ledger (record before
delete); every other message comes back, later or as a fresh copy, so nothing is lost.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from chalicelib.core.contract import QueuedEmail


class Outcome(enum.Enum):
    SENT = "sent"  # recorded
    FAILED = "failed"  # recorded with its reason
    SUPPRESSED = "suppressed"  # suppressed since it was queued: recorded, not sent
    CANCELLED = "cancelled"  # its campaign is cancelled: recorded, not sent
    EXPIRED = "expired"  # past its campaign's deadline (scheduledAt + expiresAfter): recorded, not sent
    DUPLICATE = "duplicate"  # the recipient already has its outcome: nothing to send
    THROTTLED = "throttled"  # SES said slow down: a fresh copy later, and the queue's pace drops
    RETRY = "retry"  # transient: back on the queue after a growing delay (SQS dead-letters after too many)
    DEAD_LETTER = "dead-letter"  # its last try failed: recorded failed, SQS moves it to the dead-letter queue
    QUOTA_REACHED = "quota-reached"  # the SES account can send no more today: the drain stops
    IN_FLIGHT = "in-flight"  # another copy of it is being sent right now: look again in a moment
    ORPHANED = "orphaned"  # claimed longer ago than a send takes: its sender died; wait for SES's Send event
    TENANT_PAUSED = "tenant-paused"  # its tenant is paused: parked, not sent, nothing recorded against it
    CAMPAIGN_PAUSED = "campaign-paused"  # its campaign is paused: parked until resumed, the queue goes on
    # Its rate needs fewer drainers than this one's slot (chalicelib.core.drainer_shares): handed back, this
    # drainer ends, and the ones its rate needs send it.
    FEWER_DRAINERS = "fewer-drainers"


class Action(enum.Enum):
    DELETE = "delete"  # its outcome is recorded: the message goes (in batches)
    REQUEUE_LATER = "requeue-later"  # a fresh copy after a growing delay: throttling is not the email's fault
    BACK_OFF = "back-off"  # the same message, invisible for a growing delay
    WAIT_FOR_CLAIM = "wait-for-claim"  # back off; on its last receive, a fresh copy (see MessageActions)
    TO_DEAD_LETTER = "to-dead-letter"  # visible now: the next receive passes maxReceiveCount
    PARK = "park"  # into the parked-email store until resumed, then deleted
    PARK_OR_STOP = "park-or-stop"  # parked on the shared free queue; a tenant's own queue: the drain stops
    STOP = "stop"  # left to come back after its visibility timeout, and the drain stops
    HAND_BACK = "hand-back"  # a fresh copy on the queue at once (its receive count afresh), and the drain stops


@dataclass(frozen=True)
class Disposition:
    count: str | None  # the DrainResult count it adds to
    action: Action


DISPOSITIONS: dict[Outcome, Disposition] = {
    Outcome.SENT: Disposition("sent", Action.DELETE),
    Outcome.FAILED: Disposition("failed", Action.DELETE),
    Outcome.SUPPRESSED: Disposition("suppressed", Action.DELETE),
    Outcome.CANCELLED: Disposition("cancelled", Action.DELETE),
    Outcome.EXPIRED: Disposition("expired", Action.DELETE),
    Outcome.DUPLICATE: Disposition("duplicates", Action.DELETE),
    Outcome.THROTTLED: Disposition("throttled", Action.REQUEUE_LATER),
    Outcome.RETRY: Disposition("retried", Action.BACK_OFF),
    Outcome.IN_FLIGHT: Disposition("retried", Action.WAIT_FOR_CLAIM),
    Outcome.ORPHANED: Disposition("retried", Action.WAIT_FOR_CLAIM),
    Outcome.DEAD_LETTER: Disposition("dead_lettered", Action.TO_DEAD_LETTER),
    Outcome.CAMPAIGN_PAUSED: Disposition("retried", Action.PARK),
    Outcome.TENANT_PAUSED: Disposition("retried", Action.PARK_OR_STOP),
    Outcome.QUOTA_REACHED: Disposition(None, Action.STOP),
    Outcome.FEWER_DRAINERS: Disposition("handed_back", Action.HAND_BACK),
}

# Why a drain stopped early, by the action that stops it.
STOP_REASONS = {
    Action.STOP: "daily quota exhausted or sending paused",
    Action.PARK_OR_STOP: "tenant paused",
    Action.HAND_BACK: "the queue's rate needs fewer drainers",
}


@dataclass(frozen=True)
class Verdict:
    """One message's outcome, with what acting on it needs (nothing travels beside it)."""

    outcome: Outcome
    email: QueuedEmail | None = None  # None when the message could not be read
    body: str | None = None  # the email as queued, fetched from S3 if the message was a pointer
    claim_until_ms: int | None = None  # ORPHANED: when the dead sender's claim expires
    lag_ms: int | None = None  # SENT: from queueing to sending
    drainers: int = 1  # how many drainers its rate needs (known once its sender is: sent or not, after the gate)
