"""The send path's exactly-once rules (docs/exactly-once.md), as tables of pure code.

Decide (chalicelib.send.decisions): for each answer SES gives and each thing the gate reads, the Decision,
its ledger effect and side effects, with no store in sight. Do (chalicelib.send.executor): for each kind of
decision, the calls it makes on fakes, in order. The drain's own tests (test_drainer.py) run both together.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

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
from chalicelib.core.resources import MAX_RECEIVE_COUNT
from chalicelib.send import decisions
from chalicelib.send.executor import Executor
from chalicelib.send.outcomes import (
    NOT_SENT,
    Action,
    Decision,
    ForgetSesTenant,
    GiveBackCount,
    Log,
    OnClaim,
    Outcome,
    PauseTenant,
    RecordUnattributed,
    SaveFailedCopy,
    SlowPacing,
    not_sent_rule,
)
from chalicelib.send.sides import LedgerSide, SendState
from chalicelib.stores.ledger_model import CANCELLED, EXPIRED, FAILED, FINAL, SENT, SUPPRESSED
from chalicelib.stores.pauses import SES
from chalicelib.stores.ports.ledger import Claim

EMAIL = QueuedEmail("acme", "paid", {"emailAddress": "news@acme.example"}, "c1", "Hi", "<p>Hi</p>", "ann@example.org")
QUEUE, SLOT = "moonsend-test-t-acme", 2
LAST = MAX_RECEIVE_COUNT


def _kinds(decision: Decision) -> list[type]:
    return [type(e) for e in decision.effects if not isinstance(e, Log)]


# --- the outcome table --------------------------------------------------------------------------------------


def test_every_outcome_has_a_row_with_its_ledger_effect_and_its_action():
    assert all(isinstance(o.action, Action) and isinstance(o.on_claim, OnClaim) for o in Outcome)


@pytest.mark.parametrize("outcome", list(Outcome))
def test_a_message_is_deleted_only_when_its_recipients_outcome_is_in_the_ledger(outcome):
    if outcome.action is Action.DELETE:
        # recorded by this delivery, or (a duplicate) recorded already
        assert outcome.on_claim is OnClaim.RECORD or outcome is Outcome.DUPLICATE
    assert (outcome.on_claim is OnClaim.RECORD) == (outcome.recorded in FINAL)


@pytest.mark.parametrize("outcome", [o for o in Outcome if o.on_claim is OnClaim.RECORD])
def test_a_recorded_outcome_deletes_its_message_or_lets_sqs_dead_letter_it(outcome):
    assert outcome.action in (Action.DELETE, Action.TO_DEAD_LETTER)


# --- SES's refusals: NOT_SENT, row by row -------------------------------------------------------------------

# exception, receives, newer keys registered -> outcome, ledger, recorded, effects (logs aside)
REFUSALS = [
    (
        SendFailed("MessageRejected: bad"),
        1,
        False,
        Outcome.FAILED,
        OnClaim.RECORD,
        FAILED,
        [GiveBackCount, SaveFailedCopy],
    ),
    (
        SendFailed("MessageRejected: bad"),
        LAST,
        False,
        Outcome.FAILED,
        OnClaim.RECORD,
        FAILED,
        [GiveBackCount, SaveFailedCopy],
    ),
    (
        KeysRejected("InvalidClientTokenId"),
        1,
        False,
        Outcome.FAILED,
        OnClaim.RECORD,
        FAILED,
        [GiveBackCount, SaveFailedCopy],
    ),
    (KeysRejected("InvalidClientTokenId"), 1, True, Outcome.RETRY, OnClaim.UNCLAIM, None, [GiveBackCount]),
    (SendThrottled("Throttling"), 1, False, Outcome.THROTTLED, OnClaim.UNCLAIM, None, [GiveBackCount, SlowPacing]),
    (SendThrottled("Throttling"), LAST, False, Outcome.THROTTLED, OnClaim.UNCLAIM, None, [GiveBackCount, SlowPacing]),
    (QuotaExhausted("daily quota"), 1, False, Outcome.QUOTA_REACHED, OnClaim.UNCLAIM, None, [GiveBackCount]),
    (TransientSendError("500"), 1, False, Outcome.RETRY, OnClaim.UNCLAIM, None, [GiveBackCount]),
    (TransientSendError("500"), LAST - 1, False, Outcome.RETRY, OnClaim.UNCLAIM, None, [GiveBackCount]),
    (
        TransientSendError("500"),
        LAST,
        False,
        Outcome.DEAD_LETTER,
        OnClaim.RECORD,
        FAILED,
        [GiveBackCount, SaveFailedCopy],
    ),
    (
        TenantNotReady("NotFound tenant"),
        1,
        False,
        Outcome.RETRY,
        OnClaim.UNCLAIM,
        None,
        [GiveBackCount, ForgetSesTenant],
    ),
    (
        TenantNotReady("NotFound tenant"),
        LAST,
        False,
        Outcome.DEAD_LETTER,
        OnClaim.RECORD,
        FAILED,
        [GiveBackCount, ForgetSesTenant, SaveFailedCopy],
    ),
    (SendOutcomeUnknown("ReadTimeout"), 1, False, Outcome.IN_FLIGHT, OnClaim.LEAVE, None, []),
    (SendOutcomeUnknown("ReadTimeout"), LAST, False, Outcome.IN_FLIGHT, OnClaim.LEAVE, None, []),
]


@pytest.mark.parametrize(("exc", "receives", "newer", "outcome", "ledger", "recorded", "effects"), REFUSALS)
def test_each_refusal_of_ses_decides_its_outcome_ledger_effect_and_side_effects(
    exc, receives, newer, outcome, ledger, recorded, effects
):
    asked: list[bool] = []

    def newer_keys() -> bool:
        asked.append(True)
        return newer

    decision = decisions.not_sent(exc, EMAIL, QUEUE, SLOT, receives, newer_keys)
    assert (decision.outcome, decision.ledger, decision.recorded) == (outcome, ledger, recorded)
    assert _kinds(decision) == effects
    assert decision.ledger is outcome.on_claim  # the table's column, for a claimed recipient
    assert bool(asked) == isinstance(exc, KeysRejected)  # newer keys are looked up for a keys refusal only


def test_a_last_try_records_why_it_gave_up_and_where_the_message_went():
    decision = decisions.not_sent(TransientSendError("503"), EMAIL, QUEUE, SLOT, LAST, lambda: False)
    assert decision.reason == f"503 (gave up after {LAST} tries; message in the dead-letter queue)"
    assert decisions.not_sent(SendFailed("bad"), EMAIL, QUEUE, SLOT, 1, lambda: False).reason == "bad"


def test_throttling_slows_the_drainers_own_pacing():
    decision = decisions.not_sent(SendThrottled("Throttling"), EMAIL, QUEUE, SLOT, 1, lambda: False)
    assert SlowPacing(QUEUE, SLOT, 2.0, 5.0) in decision.effects


def test_the_refusals_table_covers_every_error_the_ses_adapter_raises_most_specific_first():
    assert not_sent_rule(KeysRejected("x")) is NOT_SENT[KeysRejected]
    assert not_sent_rule(TenantNotReady("x")) is NOT_SENT[TenantNotReady]
    with pytest.raises(KeyError):
        not_sent_rule(ValueError("not SES's"))


# exception, reason the tenant's pause gives (None: the account's sending is paused) -> outcome, effects
SES_PAUSES = [
    (
        "SES paused it: bounces",
        Outcome.TENANT_PAUSED,
        [GiveBackCount(EMAIL.user_id), PauseTenant("acme", SES, "SES paused it: bounces")],
    ),
    (None, Outcome.QUOTA_REACHED, [GiveBackCount(EMAIL.user_id)]),
]


@pytest.mark.parametrize(("reason", "outcome", "effects"), SES_PAUSES)
def test_ses_pausing_a_tenant_pauses_it_here_and_the_accounts_pause_stops_the_drain(reason, outcome, effects):
    decision = decisions.ses_paused(TenantSendingPaused("SendingPausedException"), EMAIL, QUEUE, reason)
    assert decision.outcome is outcome and decision.ledger is OnClaim.UNCLAIM
    assert [e for e in decision.effects if not isinstance(e, Log)] == effects


# --- the gate, the campaign, the claim ----------------------------------------------------------------------

# suppressed, tenant known, tenant paused -> outcome (None: it may go on), recorded, reason
GATES = [
    ("complained", True, False, Outcome.SUPPRESSED, SUPPRESSED, "complained"),
    ("complained", False, True, Outcome.SUPPRESSED, SUPPRESSED, "complained"),
    (None, False, False, Outcome.FAILED, FAILED, decisions.UNKNOWN_TENANT_REASON),
    (None, True, True, Outcome.TENANT_PAUSED, None, None),
    (None, True, False, None, None, None),
]


@pytest.mark.parametrize(("suppressed", "known", "paused", "outcome", "recorded", "reason"), GATES)
def test_the_gate_decides_suppressed_unknown_and_paused_tenants_before_any_send(
    suppressed, known, paused, outcome, recorded, reason
):
    decision = decisions.gate(EMAIL, suppressed, known, paused)
    if outcome is None:
        assert decision is None
        return
    assert (decision.outcome, decision.recorded, decision.reason) == (outcome, recorded, reason)
    assert decision.ledger is outcome.on_claim
    assert (SaveFailedCopy(EMAIL) in decision.effects) == (recorded == FAILED)


# deadline passed, the campaign's state -> outcome, recorded, whether its state was read
CAMPAIGNS = [
    (True, "cancelled", Outcome.EXPIRED, EXPIRED, False),
    (False, "cancelled", Outcome.CANCELLED, CANCELLED, True),
    (False, "paused", Outcome.CAMPAIGN_PAUSED, None, True),
    (False, None, None, None, True),
]


@pytest.mark.parametrize(("past", "state", "outcome", "recorded", "read"), CAMPAIGNS)
def test_a_stopped_campaign_records_or_parks_and_an_expired_one_is_not_asked(past, state, outcome, recorded, read):
    email = QueuedEmail(**{**EMAIL.__dict__, "deadline_ms": 1_000})
    reads: list[bool] = []

    def said() -> str | None:
        reads.append(True)
        return state

    decision = decisions.campaign_says(email, 2_000 if past else 500, said)
    assert bool(reads) == read
    if outcome is None:
        assert decision is None
        return
    assert (decision.outcome, decision.recorded) == (outcome, recorded)


# found final, orphaned -> outcome
CLAIMS = [
    (True, False, Outcome.DUPLICATE),
    (True, True, Outcome.DUPLICATE),
    (False, True, Outcome.ORPHANED),
    (False, False, Outcome.IN_FLIGHT),
]


@pytest.mark.parametrize(("final", "orphaned", "outcome"), CLAIMS)
def test_a_recipient_claimed_elsewhere_is_left_to_its_claim(final, orphaned, outcome):
    decision = decisions.claimed_elsewhere(EMAIL, SENT, final=final, orphaned=orphaned, claimed_until=42)
    assert decision.outcome is outcome and decision.ledger is OnClaim.LEAVE
    assert decision.claim_until_ms == (42 if outcome is Outcome.ORPHANED else None)


def test_a_sent_email_is_recorded_sent_with_ses_message_id():
    decision = decisions.sent(EMAIL, "ses-1")
    assert (decision.outcome, decision.ledger, decision.recorded, decision.message_id) == (
        Outcome.SENT,
        OnClaim.RECORD,
        SENT,
        "ses-1",
    )
    assert decision.effects == ()


def test_an_unreadable_message_is_recorded_unattributed_and_an_unfetched_one_only_retried():
    unreadable = decisions.unreadable(QUEUE, "{not json", "bad")
    assert unreadable.outcome is Outcome.RETRY and unreadable.ledger is OnClaim.LEAVE
    assert RecordUnattributed("{not json", f"unreadable queued message in {QUEUE}: bad") in unreadable.effects
    unfetched = decisions.payload_unavailable(QUEUE, "EndpointConnectionError")
    assert unfetched.outcome is Outcome.RETRY and _kinds(unfetched) == []


# --- the executor, on fakes ---------------------------------------------------------------------------------


class Journal:
    """Every collaborator of the executor at once: each call noted, in order."""

    def __init__(self, *, pause_takes: bool = True, save_fails: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self._pause_takes = pause_takes
        self._save_fails = save_fails

    def unclaim(self, claim: Claim) -> None:
        self.calls.append(("unclaim",))

    def finished(
        self, claim, user_id, campaign_id, address, state, *, reason=None, message_id=None, sent_at_s=None
    ) -> bool:
        self.calls.append(("record", state, reason, message_id))
        return True

    def unattributed(self, body: str, reason: str) -> bool:
        self.calls.append(("unattributed", body))
        return True

    def pause(self, user_id: str, owner: str, reason: str) -> bool:
        self.calls.append(("pause", user_id, owner, reason))
        return self._pause_takes

    def forget(self, user_id: str) -> None:
        self.calls.append(("forget", user_id))

    def give_back(self, user_id: str) -> None:
        self.calls.append(("give back", user_id))

    def save(self, email: QueuedEmail) -> None:
        self.calls.append(("save copy", email.recipient_email))
        if self._save_fails:
            raise OSError("S3 down")

    def of(self, queue_name: str, slot: int) -> Journal:
        self.calls.append(("pacing", queue_name, slot))
        return self

    def slow_down(self, factor: float, for_seconds: float) -> None:
        self.calls.append(("slow", factor, for_seconds))


def _executor(journal: Journal) -> Executor:
    return Executor(
        LedgerSide(journal, journal),  # type: ignore[arg-type]
        journal,
        journal,
        SendState(journal, None, journal),  # type: ignore[arg-type]
        journal,  # type: ignore[arg-type]
    )


CLAIM = Claim("acme#c1", "ann@example.org", "token")

# decision -> the executor's calls, in order
APPLIED = [
    (decisions.sent(EMAIL, "ses-1"), [("record", SENT, None, "ses-1")]),
    (
        decisions.not_sent(SendFailed("bad"), EMAIL, QUEUE, SLOT, 1, lambda: False),
        [("give back", "acme"), ("save copy", "ann@example.org"), ("record", FAILED, "bad", None)],
    ),
    (
        decisions.not_sent(SendThrottled("slow down"), EMAIL, QUEUE, SLOT, 1, lambda: False),
        [("give back", "acme"), ("pacing", QUEUE, SLOT), ("slow", 2.0, 5.0), ("unclaim",)],
    ),
    (
        decisions.not_sent(TenantNotReady("tenant"), EMAIL, QUEUE, SLOT, 1, lambda: False),
        [("give back", "acme"), ("forget", "acme"), ("unclaim",)],
    ),
    (decisions.not_sent(SendOutcomeUnknown("timeout"), EMAIL, QUEUE, SLOT, 1, lambda: False), []),
    (
        decisions.ses_paused(TenantSendingPaused("paused"), EMAIL, QUEUE, "bounces"),
        [("give back", "acme"), ("unclaim",), ("pause", "acme", SES, "bounces")],
    ),
    (decisions.gate(EMAIL, None, True, True), [("unclaim",)]),
    (decisions.gate(EMAIL, "complained", True, False), [("record", SUPPRESSED, "complained", None)]),
    (decisions.claimed_elsewhere(EMAIL, SENT, final=True, orphaned=False, claimed_until=None), []),
]


@pytest.mark.parametrize(("decision", "calls"), APPLIED)
def test_the_executor_applies_side_effects_first_then_the_ledger_then_what_tells_others(decision, calls):
    journal = Journal()
    _executor(journal).apply(replace(decision, claim=CLAIM, email=EMAIL))
    assert journal.calls == calls


def test_a_failed_copy_that_cannot_be_saved_does_not_keep_the_failure_from_the_ledger():
    journal = Journal(save_fails=True)
    decision = decisions.gate(EMAIL, None, False, False)
    assert decision.outcome is Outcome.FAILED
    _executor(journal).apply(replace(decision, claim=CLAIM, email=EMAIL))
    assert journal.calls[-1] == ("record", FAILED, decisions.UNKNOWN_TENANT_REASON, None)


def test_without_a_claim_the_executor_leaves_the_ledger_alone():
    journal = Journal()
    _executor(journal).apply(decisions.unreadable(QUEUE, "{x", "bad"))
    assert journal.calls == [("unattributed", "{x")]
