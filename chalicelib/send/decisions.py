"""The send path's decisions, pure: from what a delivery read, the Decision (chalicelib.send.outcomes).

Nothing here calls a store or SES: what a decision needs is passed in (a thunk where the read is asked
for only on one row, as the campaign's state after its deadline, or newer keys after a keys refusal), and
what it does is returned as data for the executor (chalicelib.send.executor). tests/unit/test_send_outcomes.py
holds the exactly-once rules (docs/exactly-once.md) to these, row by row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from chalicelib.core.contract import QueuedEmail, expired_reason
from chalicelib.core.resources import MAX_RECEIVE_COUNT
from chalicelib.send.outcomes import (
    Decision,
    Effect,
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
from chalicelib.stores.campaign_control import CANCELLED, PAUSED
from chalicelib.stores.ledger_model import FAILED
from chalicelib.stores.pauses import SES

CANCELLED_REASON = "campaign cancelled before this email was sent"
UNKNOWN_TENANT_REASON = "tenant unknown: no sender settings registered"


def log(level: str, event: str, **fields: Any) -> Log:
    return Log(level, event, tuple(fields.items()))


def claimed(
    outcome: Outcome,
    email: QueuedEmail,
    *,
    reason: str | None = None,
    message_id: str | None = None,
    effects: tuple[Effect, ...] = (),
) -> Decision:
    """A claimed recipient's decision, its ledger effect as its outcome's row has it. A failure's email is
    kept for retry-failed before it is recorded."""
    if outcome.recorded == FAILED:
        effects = (*effects, SaveFailedCopy(email))
    return Decision(outcome, outcome.on_claim, outcome.recorded, reason, message_id, effects)


def unclaimed(outcome: Outcome, *effects: Effect, claim_until_ms: int | None = None) -> Decision:
    """A message with no claim of this delivery's (unread, unreadable, or another copy's): the ledger left as is."""
    return Decision(outcome, OnClaim.LEAVE, effects=effects, claim_until_ms=claim_until_ms)


def payload_unavailable(queue_name: str, error: str) -> Decision:
    """S3 did not give the body: tried again later."""
    return unclaimed(Outcome.RETRY, log("warning", "payload unavailable, will retry", queue=queue_name, error=error))


def unreadable(queue_name: str, body: str, error: str) -> Decision:
    """No recipient to record it against: recorded under `_unattributed`, and left for SQS to move to the
    dead-letter queue, where an operator finds it (14 days)."""
    reason = f"unreadable queued message in {queue_name}: {error}"
    return unclaimed(
        Outcome.RETRY,
        log("error", "unreadable queued message", queue=queue_name, reason=reason),
        RecordUnattributed(body, reason),
    )


def claimed_elsewhere(
    email: QueuedEmail, state: str | None, *, final: bool, orphaned: bool, claimed_until: int | None
) -> Decision:
    """The recipient's claim is not this delivery's: it has its outcome (a duplicate, dropped), its drainer
    died (claimed longer ago than a send takes: its claim expires in claim_hold_s, and SES's Send event may
    come first), or another copy is being sent right now."""
    if final:
        return unclaimed(
            Outcome.DUPLICATE,
            log("info", "duplicate dropped", user=email.user_id, campaign=email.campaign_id, state=state),
        )
    if orphaned:
        return unclaimed(Outcome.ORPHANED, claim_until_ms=claimed_until)
    return unclaimed(Outcome.IN_FLIGHT)


def gate(email: QueuedEmail, suppressed: str | None, tenant_known: bool, tenant_paused: bool) -> Decision | None:
    """Whether it may be sent at all (None: it may, as far as its recipient and tenant go). A tenant the
    registry does not know is failed; a paused one's email is parked, its claim given back."""
    if suppressed:
        return claimed(Outcome.SUPPRESSED, email, reason=suppressed)
    if not tenant_known:
        return claimed(Outcome.FAILED, email, reason=UNKNOWN_TENANT_REASON)
    if tenant_paused:
        return claimed(Outcome.TENANT_PAUSED, email)
    return None


def campaign_says(email: QueuedEmail, now_ms: float, state: Callable[[], str | None]) -> Decision | None:
    """EXPIRED or CANCELLED (recorded), CAMPAIGN_PAUSED (claim given back), or None: the campaign goes on.
    Its state is read only when the email is not past its deadline."""
    if email.deadline_ms is not None and now_ms >= email.deadline_ms:
        return claimed(Outcome.EXPIRED, email, reason=expired_reason(email.deadline_ms))
    said = state()
    if said == CANCELLED:
        return claimed(Outcome.CANCELLED, email, reason=CANCELLED_REASON)
    if said == PAUSED:
        return claimed(Outcome.CAMPAIGN_PAUSED, email)
    return None


def sent(email: QueuedEmail, message_id: str, at_s: float | None = None) -> Decision:
    return replace(claimed(Outcome.SENT, email, message_id=message_id), sent_at_s=at_s)


def not_sent(
    exc: Exception, email: QueuedEmail, queue_name: str, slot: int, receives: int, newer_keys: Callable[[], bool]
) -> Decision:
    """SES did not take it (any refusal but the tenant's pause, `ses_paused`): NOT_SENT's row for it."""
    rule = not_sent_rule(exc)
    user = email.user_id
    effects: list[Effect] = []
    if rule.gives_back_count:
        effects.append(GiveBackCount(user))
    if rule.forgets_ses_tenant:
        effects.append(ForgetSesTenant(user))
    if rule.slows_pacing:
        effects.append(SlowPacing(queue_name, slot))
    outcome, reason = rule.outcome, str(exc)
    if rule.with_newer_keys is not None and newer_keys():  # rotated since this container's cached read
        outcome = rule.with_newer_keys
    elif rule.on_last_try is not None and receives >= MAX_RECEIVE_COUNT:
        # Its last try: why is recorded before SQS moves it to the dead-letter queue.
        outcome = rule.on_last_try
        reason = f"{exc} (gave up after {receives} tries; message in the dead-letter queue)"
    if outcome is Outcome.IN_FLIGHT:
        # SES may have accepted it (so it stays counted). The claim is kept: no copy goes out before SES's
        # Send event has had the claim's lifetime to record it sent (then the copy is dropped), as for a
        # sender that died.
        effects.append(log("warning", "send outcome unknown, claim kept", user=user, queue=queue_name, reason=reason))
    elif outcome is Outcome.QUOTA_REACHED:
        effects.append(log("warning", "sending stopped", queue=queue_name, user=user, reason=reason))
    elif outcome is Outcome.RETRY:
        effects.append(log("warning", "send not made, will retry", user=user, queue=queue_name, reason=reason))
    return claimed(outcome, email, reason=reason if outcome.recorded else None, effects=tuple(effects))


def ses_paused(exc: Exception, email: QueuedEmail, queue_name: str, reason: str | None) -> Decision:
    """SES would not send for this tenant. `reason`: the tenant's pause as SES's status gives it, or SES's
    refusal naming the tenant; None when the whole account's sending is paused (then the drain stops, as
    for an exhausted quota). Otherwise the tenant is paused here: its email is parked (held, never failed),
    and the other free tenants' goes on."""
    give_back = GiveBackCount(email.user_id)
    if reason is None:
        stop = log("warning", "sending stopped", queue=queue_name, user=email.user_id, reason=str(exc))
        return claimed(Outcome.QUOTA_REACHED, email, effects=(give_back, stop))
    return claimed(Outcome.TENANT_PAUSED, email, effects=(give_back, PauseTenant(email.user_id, SES, reason)))
