"""One received message, from its body to its outcome: read → claim → gate → pace → SES, then apply.

Decide, then do: each step reads what it must and decides (chalicelib.send.decisions, pure); the first
step that settles the message returns its Decision (the outcome, its ledger effect, its side effects, its
message's Action), and `deliver` hands it once to the executor (chalicelib.send.executor). What the drain
does with the SQS message afterwards is the Action's business (chalicelib.send.drainer), not this module's.
The order is the exactly-once contract (docs/exactly-once.md): the recipient is claimed in the ledger before
anything is sent, the campaign and the tenant's pauses are asked again after the wait for the rate slot (a
cancel or a pause wins over every send not yet on its way to SES), and the outcome is recorded before the
message may be deleted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail, Sender
from chalicelib.core.drainer_shares import drainers_for, share
from chalicelib.core.errors import MessageInvalid, TenantSendingPaused
from chalicelib.core.mime import OutgoingEmail, compose, dated
from chalicelib.core.resources import SEND_VISIBILITY_TIMEOUT_S
from chalicelib.send import decisions
from chalicelib.send.executor import Executor, LedgerNotWritten
from chalicelib.send.identity import NO_KEYS_REASON
from chalicelib.send.outcomes import NOT_SENT_ERRORS, Decision, Outcome
from chalicelib.send.rate_limiter import QueuePacing
from chalicelib.send.sides import Content, GateReads, QueueRef, SendState, SesSide
from chalicelib.stores.ledger_model import FINAL
from chalicelib.stores.ports.ledger import Claim, Entry, LedgerClaims
from chalicelib.stores.ports.tenants import Tenant

# A claim older than this whose message came back belongs to a drainer that died (a send takes seconds;
# the message is back only after its visibility timeout).
ORPHANED_AFTER_MS = SEND_VISIBILITY_TIMEOUT_S * 1000
CANCELLED_REASON = decisions.CANCELLED_REASON
# How old SES's status of a tenant may be when one of its sends was refused (the threads that meet the
# refusal together share one read).
PAUSE_STATUS_MAX_AGE_S = 5.0

# (user, lower-cased address) -> why: recipients of a receive batch found suppressed since they were queued.
Suppressed = Mapping[tuple[str, str], str]


class _Slot:
    """The rate slot a send took, given back exactly once: before a sent email is recorded (the ledger's write
    must not hold the pacing's window), after a refusal is applied (a throttle slows the pacing before the
    next send takes a slot). `asked_ses`: whether SES was asked, so whether an email may have gone."""

    def __init__(self) -> None:
        self._pacing: QueuePacing | None = None
        self._held: list[Any] | None = None
        self.asked_ses = False

    def take(self, pacing: QueuePacing, share_of_rate: float) -> None:
        self._pacing, self._held = pacing, pacing.acquire(share_of_rate)

    def free(self) -> None:
        if self._pacing is not None and self._held is not None:
            held, self._held = self._held, None
            self._pacing.done(held)


class Delivery:
    def __init__(
        self,
        settings: Settings,
        claims: LedgerClaims,
        ses: SesSide,
        gate: GateReads,
        state: SendState,
        content: Content,
        executor: Executor,
    ) -> None:
        self._settings = settings
        self._claims = claims
        self._ses = ses
        self._gate_reads = gate
        self._state = state
        self._content = content
        self._executor = executor

    def deliver(self, queue: QueueRef, message: dict[str, Any], suppressed: Suppressed) -> Decision:
        """Take one message of `queue` (its drainer's slot) to its outcome: decided by the steps below, then
        applied once, here, by the executor. The drain acts on the SQS message after."""
        slot = _Slot()
        try:
            decision = self._decide(queue, message, suppressed, slot)
            if decision.outcome is Outcome.SENT:
                slot.free()
            decision = self._apply(decision, slot)
        finally:
            slot.free()
        sent_at = message.get("Attributes", {}).get("SentTimestamp")
        if decision.outcome is Outcome.SENT and sent_at:  # from queueing to sending and recording
            decision = replace(decision, lag_ms=int(time.time() * 1000) - int(sent_at))
        return decision

    def _apply(self, decision: Decision, slot: _Slot) -> Decision:
        """The decision carried out. One whose ledger write fails (throttled past the SDK's retries) before SES
        was asked sent nothing: its claim is given back and the message tried again after a back-off, rather
        than the drain failing and the recipient waiting out the claim (30 minutes). After SES was asked, the
        error stands: the claim is kept, and SES's Send event records what was sent."""
        try:
            self._executor.apply(decision)
            return decision
        except LedgerNotWritten as exc:
            if slot.asked_ses or decision.email is None or decision.outcome is Outcome.RETRY:
                raise
            retry = self._not_now(decision.email, f"its {decision.outcome.value} outcome's write", exc)
            retry = replace(
                retry, email=decision.email, body=decision.body, claim=decision.claim, drainers=decision.drainers
            )
            self._executor.apply(retry)
            return retry

    def _decide(self, queue: QueueRef, message: dict[str, Any], suppressed: Suppressed, slot: _Slot) -> Decision:
        read = self._read(queue.name, message)
        if isinstance(read, Decision):
            return read
        email, body = read
        claim = self._claim(email)
        if isinstance(claim, Decision):  # another copy's claim: this delivery holds none
            return replace(claim, email=email, body=body)
        try:
            tenant = self._gate_reads.tenants.get(email.user_id)
            why = self._suppression(email, suppressed, via_s3=body is not message["Body"])
            gate = self._gate(email, tenant, why)
        except Exception as exc:
            gate = self._not_now(email, "its gate", exc)
        if isinstance(gate, Tenant):
            decision, drainers = self._send(queue, email, gate, message, slot)
        else:
            decision, drainers = gate, 1
        return replace(decision, email=email, body=body, claim=claim, drainers=drainers)

    def _read(self, queue_name: str, message: dict[str, Any]) -> tuple[QueuedEmail, str] | Decision:
        """The queued email, fetched from S3 when the message is a pointer to it."""
        try:
            body = self._content.payloads.unwrap(message["Body"])
        except Exception as exc:  # S3 unreachable: try again later
            return decisions.payload_unavailable(queue_name, type(exc).__name__)
        try:
            return QueuedEmail.from_json(body), body
        except MessageInvalid as exc:
            return replace(decisions.unreadable(queue_name, body, str(exc)), body=body)

    def _claim(self, email: QueuedEmail) -> Claim | Decision:
        """The recipient, claimed for this send; or why another copy has it (sent, being sent, orphaned)."""
        claim = self._claims.claim(email.user_id, email.campaign_id, email.recipient_email, self._settings.claim_hold_s)
        if not isinstance(claim, Entry):
            return claim
        orphaned = claim.updated_at is not None and time.time() * 1000 - claim.updated_at > ORPHANED_AFTER_MS
        return decisions.claimed_elsewhere(
            email, claim.state, final=claim.state in FINAL, orphaned=orphaned, claimed_until=claim.claimed_until
        )

    def _suppression(self, email: QueuedEmail, suppressed: Suppressed, *, via_s3: bool) -> str | None:
        key = (email.user_id, email.recipient_email.lower())
        if key in suppressed:
            return suppressed[key]
        if via_s3:  # not in the receive batch's look-up: its body was in S3
            return self._gate_reads.suppressions.check(email.user_id, [email.recipient_email]).get(key[1])
        return None

    def _gate(self, email: QueuedEmail, tenant: Tenant | None, suppressed: str | None) -> Decision | Tenant:
        """Whether it may be sent at all: not suppressed, its tenant known and not paused, its campaign going.
        The decision when it may not (a tenant the registry does not know is failed); else the tenant to send as."""
        paused = tenant is not None and self._gate_reads.tenants.pause_of(email.user_id) is not None
        decision = decisions.gate(email, suppressed, tenant is not None, paused) or self._campaign_says(email)
        if decision is None and tenant is not None:
            return tenant
        assert decision is not None  # the gate decides every tenant the registry does not know (failed)
        return decision

    def _campaign_says(self, email: QueuedEmail) -> Decision | None:
        """EXPIRED, CANCELLED or CAMPAIGN_PAUSED if the campaign is stopped (its state read if not expired)."""
        control = self._gate_reads.control
        return decisions.campaign_says(
            email, time.time() * 1000, lambda: control.state(email.user_id, email.campaign_id)
        )

    def _stopped_now(self, email: QueuedEmail) -> Decision | None:
        """After the wait for the rate slot: the campaign's state and the tenant's pauses, each at most a second
        old, so that a pause of either reaches every send within about two seconds of its answer."""
        stopped = self._campaign_says(email)
        if stopped is None and self._gate_reads.tenants.pause_of(email.user_id) is not None:
            stopped = decisions.claimed(Outcome.TENANT_PAUSED, email)
        return stopped

    def _not_now(self, email: QueuedEmail, step: str, exc: Exception) -> Decision:
        """A read before SES's call failed (a dependency throttled past the SDK's retries, or unavailable):
        nothing was sent, so the claim is given back and the message tried again after a back-off, rather
        than the invocation failing and every email it had claimed waiting out the claim (30 minutes)."""
        log.warning(
            "not sent now, will retry",
            user=email.user_id,
            campaign=email.campaign_id,
            step=step,
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        return decisions.claimed(Outcome.RETRY, email)

    def _send(
        self, queue: QueueRef, email: QueuedEmail, tenant: Tenant, message: dict[str, Any], slot: _Slot
    ) -> tuple[Decision, int]:
        """The decision, and how many drainers the email's rate needs (slot 0 starts the others)."""
        identity = self._ses.identity
        try:
            sender = identity.sender_for(email, tenant, queue.free)
        except Exception as exc:  # KMS throttled or unavailable: the keys are read again at the next try
            return self._not_now(email, "its SES keys", exc), 1
        if sender is None:
            return decisions.claimed(Outcome.FAILED, email, reason=NO_KEYS_REASON), 1
        try:
            withdrawn = identity.from_withdrawn(email, sender) if queue.free else None
        except Exception as exc:  # the claim could not be read: not sent now, asked again at the next try
            return self._not_now(email, "its From address's owner", exc), 1
        if withdrawn is not None:
            return decisions.claimed(Outcome.FAILED, email, reason=withdrawn), 1
        rate = identity.rate_for(queue.name, sender)
        max_rate = self._settings.drainer_max_rate
        mine, drainers = share(rate, queue.slot, max_rate), drainers_for(rate, max_rate)
        if mine <= 0:  # this drainer's band of the rate is empty: the drainers below it send this email
            return decisions.claimed(Outcome.FEWER_DRAINERS, email), drainers
        return self._paced_send(queue, mine, email, sender, message, slot), drainers

    def _paced_send(
        self,
        queue: QueueRef,
        share_of_rate: float,
        email: QueuedEmail,
        sender: Sender,
        message: dict[str, Any],
        slot: _Slot,
    ) -> Decision:
        """Wait for a turn within this drainer's share of the rate, ask the campaign once more, send.

        The slot is held until `deliver` has applied a refusal (SES's answer is part of the send), and freed
        before a sent email is recorded."""
        ses_tenant = self._ses_tenant(email, sender) if queue.free else None
        if queue.free and ses_tenant is None:  # its SES tenant is not set up: tried again later
            return decisions.claimed(Outcome.RETRY, email)
        mime = self._mime(email, sender)
        slot.take(self._state.pacings.of(queue.name, queue.slot), share_of_rate)
        try:
            stopped = self._stopped_now(email)
        except Exception as exc:
            return self._not_now(email, "its pauses, after the rate's wait", exc)
        if stopped is not None:
            return stopped
        self._state.sent_ahead.take(email.user_id, share_of_rate)
        started_s = time.time()  # the second it counts in: the rate's slot, not when the ledger was written
        slot.asked_ses = True
        try:
            message_id = self._ses.api.send(sender, email.recipient_email, mime, platform=queue.free, tenant=ses_tenant)
        except NOT_SENT_ERRORS as exc:
            return self._refused(exc, queue, email, sender, message)
        return decisions.sent(email, message_id, started_s)

    def _refused(
        self,
        exc: Exception,
        queue: QueueRef,
        email: QueuedEmail,
        sender: Sender,
        message: dict[str, Any],
    ) -> Decision:
        """SES did not take it (or its answer was lost): NOT_SENT's row, with what that row reads."""
        if isinstance(exc, TenantSendingPaused):
            return decisions.ses_paused(exc, email, queue.name, self._pause_reason(exc, email, sender))
        newer = self._ses.identity.newer_keys
        return decisions.not_sent(exc, email, queue.name, queue.slot, _receives(message), lambda: newer(email, sender))

    def _region(self, sender: Sender) -> str:
        return sender.region or self._settings.region

    def _ses_tenant(self, email: QueuedEmail, sender: Sender) -> str | None:
        """The SES tenant a platform send goes through, set up on its first send (None: not now)."""
        try:
            return self._ses.ses_tenants.ensure(email.user_id, sender.email_address, self._region(sender))
        except Exception as exc:
            log.warning("SES tenant not set up, will retry", user=email.user_id, error=f"{type(exc).__name__}: {exc}")
            return None

    def _pause_reason(self, exc: TenantSendingPaused, email: QueuedEmail, sender: Sender) -> str | None:
        """Why SES paused this tenant, with SES's cause where SES's status gives one; None when SES's pause
        is the whole account's (its status says the tenant is not paused and the account may not send)."""
        ses_tenants, region = self._ses.ses_tenants, self._region(sender)
        try:
            status = ses_tenants.status(email.user_id, region, max_age_s=PAUSE_STATUS_MAX_AGE_S)
            if status is not None and not status.paused:  # read before the pause: read again
                status = ses_tenants.status(email.user_id, region, max_age_s=0)
        except Exception as error:
            log.warning("SES tenant status unknown", user=email.user_id, error=type(error).__name__)
            status = None
        if status is not None and status.paused:
            return status.reason
        if not self._ses.api.sending_enabled(sender, platform=True):
            return None
        # SES's status lags its refusal, or could not be read: the refusal named this tenant.
        return f"SES refused sending for SES tenant {ses_tenants.name_of(email.user_id)}: {exc}"

    def _mime(self, email: QueuedEmail, sender: Sender) -> bytes:
        """The message as sent: composed by precompile, dated now."""
        if email.mime is not None:
            return dated(email.mime)
        # Queued before precompile composed it: composed here, as precompile would have.
        return dated(
            compose(
                OutgoingEmail(
                    from_address=sender.email_address,
                    from_name=sender.from_name,
                    to=email.recipient_email,
                    subject=email.subject,
                    html=email.body or "",
                    user_id=email.user_id,
                    campaign_id=email.campaign_id,
                    unsubscribe_url=self._content.links.unsubscribe_url(
                        email.user_id, email.campaign_id, email.recipient_email
                    ),
                )
            )
        )


def _receives(message: dict[str, Any]) -> int:
    return int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
