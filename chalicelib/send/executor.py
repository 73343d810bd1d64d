"""The send path's one executor: applies a Decision (chalicelib.send.outcomes), its effects by their type,
once per delivery, at its end (the drain then acts on the SQS message, chalicelib.send.drainer).

The order is fixed here, for every decision: the side effects that must come first (the guard's count
given back, the failed copy saved so that retry-failed finds every failed one's email), then the ledger
effect (record, or give the claim back), then those that tell others (a tenant's pause).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.core import log
from chalicelib.core.contract import QueuedEmail
from chalicelib.send.outcomes import (
    Decision,
    Effect,
    ForgetSesTenant,
    GiveBackCount,
    Log,
    OnClaim,
    PauseTenant,
    RecordUnattributed,
    SaveFailedCopy,
    SlowPacing,
)
from chalicelib.send.ports import SesTenantForget
from chalicelib.send.sides import LedgerSide, SendState
from chalicelib.stores.failed_copies import FailedCopies
from chalicelib.stores.ports.ledger import Claim
from chalicelib.stores.ports.tenants import TenantRecords


class LedgerNotWritten(Exception):
    """A decision's ledger effect (its outcome recorded, or its claim given back) failed: its side effects before
    the ledger are applied, none after. The error the store raised is its cause."""


class Executor:
    def __init__(
        self,
        ledger: LedgerSide,
        tenants: TenantRecords,
        ses_tenants: SesTenantForget,
        state: SendState,
        failed_copies: FailedCopies,
    ) -> None:
        self._ledger = ledger
        self._tenants = tenants
        self._ses_tenants = ses_tenants
        self._state = state
        self._failed_copies = failed_copies
        self._handlers: dict[type[Effect], Callable[[Any], None]] = {
            GiveBackCount: self._give_back,
            ForgetSesTenant: self._forget,
            SlowPacing: self._slow,
            SaveFailedCopy: self._save_copy,
            PauseTenant: self._pause,
            RecordUnattributed: self._unattributed,
            Log: self._log,
        }

    def apply(self, decision: Decision) -> None:
        """Carry the decision out: its effects, and its ledger effect on the claim it holds (if the delivery
        claimed the recipient); LedgerNotWritten if that failed."""
        for effect in decision.effects:
            if not effect.after_ledger:
                self._handlers[type(effect)](effect)
        if decision.claim is not None and decision.email is not None:
            try:
                self._on_ledger(decision, decision.claim, decision.email)
            except Exception as exc:  # throttled past the SDK's retries, or unavailable
                raise LedgerNotWritten(f"{type(exc).__name__}: {exc}") from exc
        for effect in decision.effects:
            if effect.after_ledger:
                self._handlers[type(effect)](effect)

    def _on_ledger(self, decision: Decision, claim: Claim, email: QueuedEmail) -> None:
        if decision.ledger is OnClaim.UNCLAIM:
            self._ledger.claims.unclaim(claim)
        elif decision.ledger is OnClaim.RECORD and decision.recorded is not None:
            self._ledger.recorder.finished(
                claim,
                email.user_id,
                email.campaign_id,
                email.recipient_email,
                decision.recorded,
                reason=decision.reason,
                message_id=decision.message_id,
                sent_at_s=decision.sent_at_s,
            )

    def _give_back(self, effect: GiveBackCount) -> None:
        self._state.sent_ahead.give_back(effect.user_id)  # counted ahead for the reputation guard, not sent

    def _forget(self, effect: ForgetSesTenant) -> None:
        self._ses_tenants.forget(effect.user_id)

    def _slow(self, effect: SlowPacing) -> None:
        self._state.pacings.of(effect.queue_name, effect.slot).slow_down(effect.factor, effect.for_seconds)

    def _save_copy(self, effect: SaveFailedCopy) -> None:
        try:
            self._failed_copies.save(effect.email)
        except Exception as exc:  # the failure is still recorded; only its retry is not possible
            log.warning("failed email not kept for retry", user=effect.email.user_id, error=type(exc).__name__)

    def _pause(self, effect: PauseTenant) -> None:
        if self._tenants.pause(effect.user_id, effect.owner, effect.reason):
            log.warning("tenant paused by SES", user=effect.user_id, reason=effect.reason)

    def _unattributed(self, effect: RecordUnattributed) -> None:
        self._ledger.recorder.unattributed(effect.body, effect.reason)

    def _log(self, effect: Log) -> None:
        _LOG_AT[effect.level](effect.event, **dict(effect.fields))


_LOG_AT: dict[str, Callable[..., None]] = {"info": log.info, "warning": log.warning, "error": log.error}
