"""One received message, from its body to its outcome: read → claim → gate → pace → SES → record.

Decide, then do: each step reads what it must and decides (chalicelib.send.decisions, pure); the decision
names the outcome, its ledger effect and its side effects, and the executor (chalicelib.send.executor)
applies it. What the drain does with the SQS message afterwards is the outcome table's business
(chalicelib.send.outcomes), not this module's. The order is the exactly-once contract (docs/exactly-once.md):
the recipient is claimed in the ledger before anything is sent, the campaign and the tenant's pauses are
asked again after the wait for the rate slot (a cancel or a pause wins over every send not yet on its way
to SES), and the outcome is recorded
before the message may be deleted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail, Sender
from chalicelib.core.drainer_shares import drainers_for, share
from chalicelib.core.errors import MessageInvalid, TenantSendingPaused
from chalicelib.core.mime import OutgoingEmail, compose, dated
from chalicelib.core.resources import SEND_VISIBILITY_TIMEOUT_S
from chalicelib.send import decisions
from chalicelib.send.executor import Executor
from chalicelib.send.identity import NO_KEYS_REASON
from chalicelib.send.outcomes import NOT_SENT_ERRORS, Decision, Outcome, Verdict
from chalicelib.send.sides import Content, GateReads, QueueRef, SendState, SesSide
from chalicelib.stores.ledger_model import FINAL, Claim, Entry
from chalicelib.stores.ports import LedgerClaims
from chalicelib.stores.tenant_model import Tenant

# A claim older than this whose message came back belongs to a drainer that died (a send takes seconds;
# the message is back only after its visibility timeout).
ORPHANED_AFTER_MS = SEND_VISIBILITY_TIMEOUT_S * 1000
CANCELLED_REASON = decisions.CANCELLED_REASON
# How old SES's status of a tenant may be when one of its sends was refused (the threads that meet the
# refusal together share one read).
PAUSE_STATUS_MAX_AGE_S = 5.0

# (user, lower-cased address) -> why: recipients of a receive batch found suppressed since they were queued.
Suppressed = Mapping[tuple[str, str], str]


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

    def deliver(self, queue: QueueRef, message: dict[str, Any], suppressed: Suppressed) -> Verdict:
        """Take one message of `queue` (its drainer's slot) to its outcome."""
        read = self._read(queue.name, message)
        if isinstance(read, Verdict):
            return read
        email, body = read
        claim = self._claim(email)
        if isinstance(claim, Decision):
            return Verdict(self._executor.apply(claim), email, body, claim.claim_until_ms)
        try:
            tenant = self._gate_reads.tenants.get(email.user_id)
            why = self._suppression(email, suppressed, via_s3=body is not message["Body"])
            gate = self._gate(email, claim, tenant, why)
        except Exception as exc:
            return Verdict(self._not_now(email, claim, "its gate", exc), email, body)
        if isinstance(gate, Tenant):
            outcome, drainers = self._send(queue, email, claim, gate, message)
        else:
            outcome, drainers = gate, 1
        sent_at = message.get("Attributes", {}).get("SentTimestamp")
        lag = int(time.time() * 1000) - int(sent_at) if outcome is Outcome.SENT and sent_at else None
        return Verdict(outcome, email, body, lag_ms=lag, drainers=drainers)

    def _read(self, queue_name: str, message: dict[str, Any]) -> tuple[QueuedEmail, str] | Verdict:
        """The queued email, fetched from S3 when the message is a pointer to it."""
        try:
            body = self._content.payloads.unwrap(message["Body"])
        except Exception as exc:  # S3 unreachable: try again later
            return Verdict(self._executor.apply(decisions.payload_unavailable(queue_name, type(exc).__name__)))
        try:
            return QueuedEmail.from_json(body), body
        except MessageInvalid as exc:
            return Verdict(self._executor.apply(decisions.unreadable(queue_name, body, str(exc))), body=body)

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

    def _gate(
        self, email: QueuedEmail, claim: Claim, tenant: Tenant | None, suppressed: str | None
    ) -> Outcome | Tenant:
        """Whether it may be sent at all: not suppressed, its tenant known and not paused, its campaign going.
        The outcome when it may not (a tenant the registry does not know is failed); else the tenant to send as."""
        paused = tenant is not None and self._gate_reads.tenants.pause_of(email.user_id) is not None
        decision = decisions.gate(email, suppressed, tenant is not None, paused) or self._campaign_says(email)
        if decision is None and tenant is not None:
            return tenant
        assert decision is not None  # the gate decides every tenant the registry does not know (failed)
        return self._do(decision, claim, email)

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

    def _not_now(self, email: QueuedEmail, claim: Claim, step: str, exc: Exception) -> Outcome:
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
        return self._do(decisions.claimed(Outcome.RETRY, email), claim, email)

    def _do(self, decision: Decision, claim: Claim, email: QueuedEmail) -> Outcome:
        return self._executor.apply(decision, claim, email)

    def _send(
        self, queue: QueueRef, email: QueuedEmail, claim: Claim, tenant: Tenant, message: dict[str, Any]
    ) -> tuple[Outcome, int]:
        """The outcome, and how many drainers the email's rate needs (slot 0 starts the others)."""
        identity = self._ses.identity
        try:
            sender = identity.sender_for(email, tenant, queue.free)
        except Exception as exc:  # KMS throttled or unavailable: the keys are read again at the next try
            return self._not_now(email, claim, "its SES keys", exc), 1
        if sender is None:
            return self._do(decisions.claimed(Outcome.FAILED, email, reason=NO_KEYS_REASON), claim, email), 1
        try:
            withdrawn = identity.from_withdrawn(email, sender) if queue.free else None
        except Exception as exc:  # the claim could not be read: not sent now, asked again at the next try
            return self._not_now(email, claim, "its From address's owner", exc), 1
        if withdrawn is not None:
            return self._do(decisions.claimed(Outcome.FAILED, email, reason=withdrawn), claim, email), 1
        rate = identity.rate_for(queue.name, sender)
        max_rate = self._settings.drainer_max_rate
        mine, drainers = share(rate, queue.slot, max_rate), drainers_for(rate, max_rate)
        if mine <= 0:  # this drainer's band of the rate is empty: the drainers below it send this email
            return self._do(decisions.claimed(Outcome.FEWER_DRAINERS, email), claim, email), drainers
        return self._paced_send(queue, mine, email, claim, sender, message), drainers

    def _paced_send(
        self,
        queue: QueueRef,
        share_of_rate: float,
        email: QueuedEmail,
        claim: Claim,
        sender: Sender,
        message: dict[str, Any],
    ) -> Outcome:
        """Wait for a turn within this drainer's share of the rate, ask the campaign once more, send, record.

        A refusal is decided and applied before the slot is done with (as SES's answer is part of the send);
        a sent email is recorded after, so that the ledger's write does not hold the pacing's window."""
        ses_tenant = self._ses_tenant(email, sender) if queue.free else None
        if queue.free and ses_tenant is None:  # its SES tenant is not set up: tried again later
            return self._do(decisions.claimed(Outcome.RETRY, email), claim, email)
        pacing = self._state.pacings.of(queue.name, queue.slot)
        mime = self._mime(email, sender)
        slots = pacing.acquire(share_of_rate)
        try:
            try:
                stopped = self._stopped_now(email)
            except Exception as exc:
                return self._not_now(email, claim, "its pauses, after the rate's wait", exc)
            if stopped is not None:
                return self._do(stopped, claim, email)
            self._state.sent_ahead.take(email.user_id, share_of_rate)
            started_s = time.time()  # the second it counts in: the rate's slot, not when the ledger was written
            message_id = self._ses.api.send(sender, email.recipient_email, mime, platform=queue.free, tenant=ses_tenant)
        except NOT_SENT_ERRORS as exc:
            return self._do(self._refused(exc, queue, email, sender, message), claim, email)
        finally:
            pacing.done(slots)
        return self._do(decisions.sent(email, message_id, started_s), claim, email)

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
