"""What can become of one received message, and what is done about it: tables, not chains of ifs.

Decide, then do (as chalice's deploy planner and executor): a delivery (chalicelib.send.delivery) reads what
it must (the ledger's claim, the tenant, the campaign, SES's answer) and decides; the decision is a value,
a Decision naming the outcome, its ledger effect, its side effects and its message's Action as data
(chalicelib.send.decisions makes them, pure). The delivery hands it, once, to the one executor
(chalicelib.send.executor), which applies the effects by their type and the ledger effect; the drain then
carries out the Action on the SQS message (chalicelib.send.message_actions), batched with the others'.

Four nouns, each for a reason: an Outcome (what became of the message, with its row of the table: the count,
the Action, the ledger effect), a Decision (one message's outcome with everything acting on it needs), an
Effect (a side effect as data, so that the rules stay pure), and NotSent (SES's refusals, keyed by the error
SES's adapter raises, `classify` in chalicelib.send.ses_sender). The rule the tables encode: a message is
deleted only when its outcome is in the ledger (record before delete); every other message comes back,
later or as a fresh copy, so nothing is lost; and a claim is given back only when no email went to SES.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from chalicelib.core.contract import QueuedEmail
from chalicelib.core.errors import (
    KeysRejected,
    QuotaExhausted,
    SendFailed,
    SendOutcomeUnknown,
    SendThrottled,
    TenantNotReady,
    TenantSendingPaused,
    TransientSendError,
)
from chalicelib.stores import ledger_model as state  # its names are the members' too: qualified
from chalicelib.stores.ports.ledger import Claim


class Action(enum.Enum):
    """What is done with the SQS message: the drain carries it out (chalicelib.send.drainer), after the delivery
    has applied the rest of the decision, so a message is deleted only once its outcome is recorded."""

    DELETE = "delete"  # its outcome is recorded: the message goes (in batches)
    REQUEUE_LATER = "requeue-later"  # a fresh copy after a growing delay: throttling is not the email's fault
    BACK_OFF = "back-off"  # the same message, invisible for a growing delay
    WAIT_FOR_CLAIM = "wait-for-claim"  # back off; on its last receive, a fresh copy (see MessageActions)
    TO_DEAD_LETTER = "to-dead-letter"  # visible now: the next receive passes maxReceiveCount
    PARK = "park"  # into the parked-email store until resumed, then deleted
    PARK_OR_STOP = "park-or-stop"  # parked on the shared free queue; a tenant's own queue: the drain stops
    STOP = "stop"  # left to come back after its visibility timeout, and the drain stops
    HAND_BACK = "hand-back"  # a fresh copy on the queue at once (its receive count afresh), and the drain stops


class OnClaim(enum.Enum):
    """What an outcome does to the recipient's claim in the ledger (chalicelib.stores.ledger)."""

    RECORD = "record"  # its outcome recorded (a final state): the message may be deleted
    UNCLAIM = "unclaim"  # the claim given back: nothing went to SES, a later try or another drainer sends it
    LEAVE = "leave"  # the claim left as it is: another copy's, or ours held until SES's Send event records it


class Outcome(enum.Enum):
    """What became of one received message, each with its row of the table: the DrainResult count it adds
    to, the Action taken on its SQS message, its effect on a claimed recipient (OnClaim), and the ledger
    state it is recorded as (RECORD only). One row per outcome, read where a decision is made, and nowhere
    else: the decision carries what the row says."""

    count: str | None
    action: Action
    on_claim: OnClaim
    recorded: str | None

    def __new__(
        cls, value: str, count: str | None, action: Action, on_claim: OnClaim, recorded: str | None = None
    ) -> Outcome:
        member = object.__new__(cls)
        member._value_ = value
        member.count, member.action, member.on_claim, member.recorded = count, action, on_claim, recorded
        return member

    # recorded:
    SENT = ("sent", "sent", Action.DELETE, OnClaim.RECORD, state.SENT)
    FAILED = ("failed", "failed", Action.DELETE, OnClaim.RECORD, state.FAILED)  # with its reason
    SUPPRESSED = ("suppressed", "suppressed", Action.DELETE, OnClaim.RECORD, state.SUPPRESSED)  # since it was queued
    CANCELLED = ("cancelled", "cancelled", Action.DELETE, OnClaim.RECORD, state.CANCELLED)  # its campaign is cancelled
    # Past its campaign's deadline (scheduledAt + expiresAfter).
    EXPIRED = ("expired", "expired", Action.DELETE, OnClaim.RECORD, state.EXPIRED)
    # Its last try failed: recorded failed, SQS moves it to the dead-letter queue.
    DEAD_LETTER = ("dead-letter", "dead_lettered", Action.TO_DEAD_LETTER, OnClaim.RECORD, state.FAILED)
    # The recipient already has its outcome: nothing to send.
    DUPLICATE = ("duplicate", "duplicates", Action.DELETE, OnClaim.LEAVE)
    # SES said slow down: a fresh copy later, and the queue's pace drops.
    THROTTLED = ("throttled", "throttled", Action.REQUEUE_LATER, OnClaim.UNCLAIM)
    # Transient: back on the queue after a growing delay (SQS dead-letters after too many).
    RETRY = ("retry", "retried", Action.BACK_OFF, OnClaim.UNCLAIM)
    # Another copy of it is being sent right now: look again in a moment.
    IN_FLIGHT = ("in-flight", "retried", Action.WAIT_FOR_CLAIM, OnClaim.LEAVE)
    # Claimed longer ago than a send takes: its drainer died; wait for SES's Send event.
    ORPHANED = ("orphaned", "retried", Action.WAIT_FOR_CLAIM, OnClaim.LEAVE)
    # Its campaign is paused: parked until resumed, the queue goes on.
    CAMPAIGN_PAUSED = ("campaign-paused", "retried", Action.PARK, OnClaim.UNCLAIM)
    # Its tenant is paused: parked, not sent, nothing recorded against it.
    TENANT_PAUSED = ("tenant-paused", "retried", Action.PARK_OR_STOP, OnClaim.UNCLAIM)
    # The SES account can send no more today: the drain stops.
    QUOTA_REACHED = ("quota-reached", None, Action.STOP, OnClaim.UNCLAIM)
    # Its rate needs fewer drainers than this one's slot (chalicelib.core.drainer_shares): handed back, this
    # drainer ends, and the ones its rate needs send it.
    FEWER_DRAINERS = ("fewer-drainers", "handed_back", Action.HAND_BACK, OnClaim.UNCLAIM)


# Why a drain stopped early, by the action that stops it.
STOP_REASONS = {
    Action.STOP: "daily quota exhausted or sending paused",
    Action.PARK_OR_STOP: "tenant paused",
    Action.HAND_BACK: "the queue's rate needs fewer drainers",
}


# --- side effects, as data (chalicelib.send.executor applies them, by type) ------------------------------------


@dataclass(frozen=True)
class Effect:
    """One side effect of a decision. Applied before its ledger effect unless `after_ledger`."""

    after_ledger: ClassVar[bool] = False


@dataclass(frozen=True)
class GiveBackCount(Effect):
    """The send counted ahead for the reputation guard (chalicelib.send.sent_ahead) did not happen."""

    user_id: str


@dataclass(frozen=True)
class ForgetSesTenant(Effect):
    """SES does not know the tenant's SES tenant: set up again on its next send."""

    user_id: str


@dataclass(frozen=True)
class SlowPacing(Effect):
    """SES said Throttling: the queue's pacing slows by `factor` for `for_seconds`."""

    queue_name: str
    slot: int
    factor: float = 2.0
    for_seconds: float = 5.0


@dataclass(frozen=True)
class SaveFailedCopy(Effect):
    """A failed email kept for retry-failed: saved before it is recorded, so every failed one's is found."""

    email: QueuedEmail


@dataclass(frozen=True)
class PauseTenant(Effect):
    """The tenant paused by `owner` (chalicelib.stores.pauses), after its claim is given back."""

    after_ledger: ClassVar[bool] = True
    user_id: str
    owner: str
    reason: str


@dataclass(frozen=True)
class RecordUnattributed(Effect):
    """An unreadable message: recorded under `_unattributed` (once, however often it comes back)."""

    body: str
    reason: str


@dataclass(frozen=True)
class Log(Effect):
    """A log line (chalicelib.core.log) at `level`."""

    level: str  # "info", "warning" or "error"
    event: str
    fields: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Decision:
    """What became of one received message and what is done about it, as a value: its outcome, its effect
    on the recipient's claim, its side effects in order, and (from the outcome's row) its message's Action.

    The rules (chalicelib.send.decisions) fill the first part; the delivery adds what it read (the email, its
    claim) and applies the whole once (chalicelib.send.executor); the drain then acts on the message."""

    outcome: Outcome
    ledger: OnClaim = OnClaim.LEAVE  # what is done to the claim (LEAVE: this delivery holds none)
    recorded: str | None = None  # RECORD: the state
    reason: str | None = None  # RECORD: why (a failure's, a suppression's, ...)
    message_id: str | None = None  # SENT: SES's id
    effects: tuple[Effect, ...] = ()
    sent_at_s: float | None = None  # SENT: when SES was asked (the second the timeline counts it in)
    claim_until_ms: int | None = None  # ORPHANED: when the dead drainer's claim expires
    # What the delivery read, added before the decision is applied:
    email: QueuedEmail | None = None  # None when the message could not be read
    body: str | None = None  # the email as queued, fetched from S3 if the message was a pointer
    claim: Claim | None = None  # this delivery's claim on the recipient, if it took one
    lag_ms: int | None = None  # SENT: from queueing to sending
    drainers: int = 1  # how many drainers its rate needs (known once its Sender is: sent or not, after the gate)

    @property
    def action(self) -> Action:
        """What is done with its SQS message."""
        return self.outcome.action


# --- SES's refusals (chalicelib.send.ses_sender.classify makes them from SES's errors) -------------------------


@dataclass(frozen=True)
class NotSent:
    """What a refusal of SES's decides for a claimed recipient."""

    outcome: Outcome
    gives_back_count: bool = True  # SES did not send it: the guard's count taken ahead is given back
    forgets_ses_tenant: bool = False
    slows_pacing: bool = False
    on_last_try: Outcome | None = None  # on its last receive (SQS dead-letters it next): recorded failed
    with_newer_keys: Outcome | None = None  # newer keys registered since this container read them: retried


# Looked up by the exception's class, most specific first (its MRO): KeysRejected is a SendFailed,
# TenantNotReady a TransientSendError.
NOT_SENT: dict[type[Exception], NotSent] = {
    SendFailed: NotSent(Outcome.FAILED),
    KeysRejected: NotSent(Outcome.FAILED, with_newer_keys=Outcome.RETRY),
    SendThrottled: NotSent(Outcome.THROTTLED, slows_pacing=True),
    QuotaExhausted: NotSent(Outcome.QUOTA_REACHED),
    TransientSendError: NotSent(Outcome.RETRY, on_last_try=Outcome.DEAD_LETTER),
    TenantNotReady: NotSent(Outcome.RETRY, forgets_ses_tenant=True, on_last_try=Outcome.DEAD_LETTER),
    # SES may have accepted it: it stays counted and its claim is kept (OnClaim.LEAVE).
    SendOutcomeUnknown: NotSent(Outcome.IN_FLIGHT, gives_back_count=False),
    # The tenant paused by SES (PauseTenant), or QUOTA_REACHED when the whole account's sending is paused.
    TenantSendingPaused: NotSent(Outcome.TENANT_PAUSED),
}
NOT_SENT_ERRORS = tuple(NOT_SENT)


def not_sent_rule(exc: Exception) -> NotSent:
    """The row of NOT_SENT for this refusal (KeyError for an exception SES's adapter does not raise)."""
    for cls in type(exc).__mro__:
        if cls in NOT_SENT:
            return NOT_SENT[cls]
    raise KeyError(type(exc).__name__)
