"""One received message, from its body to its outcome: read → claim → gate → pace → SES → record.

Each step either hands on or ends the message in a Verdict (chalicelib.send.outcomes); what the drain does
with the SQS message afterwards is the outcome table's business, not this module's. The order is the
exactly-once contract (docs/exactly-once.md): the recipient is claimed in the ledger before anything is
sent, the campaign is asked again after the wait for the rate slot (a cancel wins over every send not yet
on its way to SES), and the outcome is recorded before the message may be deleted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail, Sender, expired_reason
from chalicelib.core.drainer_shares import drainers_for, share
from chalicelib.core.errors import (
    KeysRejected,
    MessageInvalid,
    QuotaExhausted,
    SendFailed,
    SendOutcomeUnknown,
    SendThrottled,
    TenantNotReady,
    TenantSendingPaused,
    TransientSendError,
)
from chalicelib.core.links import LinkSigner
from chalicelib.core.mime import OutgoingEmail, compose, dated
from chalicelib.core.resources import MAX_RECEIVE_COUNT, SEND_VISIBILITY_TIMEOUT_S
from chalicelib.send.identity import NO_KEYS_REASON, SendingIdentity
from chalicelib.send.outcomes import Outcome, Verdict
from chalicelib.send.ports import SesSend
from chalicelib.send.rate_limiter import Pacings
from chalicelib.send.sent_ahead import SentAhead
from chalicelib.stores.campaign_control import CANCELLED, PAUSED
from chalicelib.stores.failed_copies import FailedCopies
from chalicelib.stores.ledger_model import EXPIRED, FAILED, FINAL, SENT, SUPPRESSED, Claim, Entry
from chalicelib.stores.pauses import SES
from chalicelib.stores.payloads import PayloadStore
from chalicelib.stores.ports import ControlState, LedgerClaims, SesTenantSetup, SuppressionCheck, TenantGuard
from chalicelib.stores.recorder import Recorder
from chalicelib.stores.tenant_model import Tenant

# A claim older than this whose message came back belongs to a sender that died (a send takes seconds;
# the message is back only after its visibility timeout).
ORPHANED_AFTER_MS = SEND_VISIBILITY_TIMEOUT_S * 1000
CANCELLED_REASON = "campaign cancelled before this email was sent"
# How old SES's status of a tenant may be when one of its sends was refused (the threads that meet the
# refusal together share one read).
PAUSE_STATUS_MAX_AGE_S = 5.0

# (user, lower-cased address) -> why: recipients of a receive batch found suppressed since they were queued.
Suppressed = Mapping[tuple[str, str], str]


class Delivery:
    def __init__(
        self,
        settings: Settings,
        tenants: TenantGuard,
        identity: SendingIdentity,
        ledger: LedgerClaims,
        recorder: Recorder,
        ses: SesSend,
        ses_tenants: SesTenantSetup,
        pacings: Pacings,
        sent_ahead: SentAhead,
        payloads: PayloadStore,
        suppressions: SuppressionCheck,
        links: LinkSigner,
        control: ControlState,
        failed_copies: FailedCopies,
    ) -> None:
        self._settings = settings
        self._tenants = tenants
        self._identity = identity
        self._ledger = ledger
        self._recorder = recorder
        self._ses = ses
        self._ses_tenants = ses_tenants
        self._pacings = pacings
        self._sent_ahead = sent_ahead
        self._payloads = payloads
        self._suppressions = suppressions
        self._links = links
        self._control = control
        self._failed_copies = failed_copies

    def deliver(self, queue_name: str, slot: int, message: dict[str, Any], suppressed: Suppressed) -> Verdict:
        """Take one message of drainer `slot` of `queue_name` to its outcome."""
        read = self._read(queue_name, message)
        if isinstance(read, Verdict):
            return read
        email, body = read
        claim = self._claim(email)
        if isinstance(claim, Verdict):
            return Verdict(claim.outcome, email, body, claim.claim_until_ms)
        tenant = self._tenants.get(email.user_id)
        why = self._suppression(email, suppressed, via_s3=body is not message["Body"])
        gate = self._gate(email, claim, tenant, why)
        if isinstance(gate, Tenant):
            outcome, drainers = self._send(queue_name, slot, email, claim, gate, message)
        else:
            outcome, drainers = gate, 1
        sent_at = message.get("Attributes", {}).get("SentTimestamp")
        lag = int(time.time() * 1000) - int(sent_at) if outcome is Outcome.SENT and sent_at else None
        return Verdict(outcome, email, body, lag_ms=lag, drainers=drainers)

    def _read(self, queue_name: str, message: dict[str, Any]) -> tuple[QueuedEmail, str] | Verdict:
        """The queued email, fetched from S3 when the message is a pointer to it."""
        try:
            body = self._payloads.unwrap(message["Body"])
        except Exception as exc:  # S3 unreachable: try again later
            log.warning("payload unavailable, will retry", queue=queue_name, error=type(exc).__name__)
            return Verdict(Outcome.RETRY)
        try:
            return QueuedEmail.from_json(body), body
        except MessageInvalid as exc:
            # No recipient to record it against: recorded under `_unattributed` (once, however often it comes
            # back), and left for SQS to move to the dead-letter queue, where an operator finds it (14 days).
            reason = f"unreadable queued message in {queue_name}: {exc}"
            log.error("unreadable queued message", queue=queue_name, reason=reason)
            self._recorder.unattributed(body, reason)
            return Verdict(Outcome.RETRY, body=body)

    def _claim(self, email: QueuedEmail) -> Claim | Verdict:
        """The recipient, claimed for this send; or why another copy has it (sent, being sent, orphaned)."""
        claim = self._ledger.claim(email.user_id, email.campaign_id, email.recipient_email, self._settings.claim_hold_s)
        if not isinstance(claim, Entry):
            return claim
        if claim.state in FINAL:  # a duplicate of an email that has its outcome: drop it
            log.info("duplicate dropped", user=email.user_id, campaign=email.campaign_id, state=claim.state)
            return Verdict(Outcome.DUPLICATE)
        if claim.updated_at is not None and time.time() * 1000 - claim.updated_at > ORPHANED_AFTER_MS:
            # Its claim expires in claim_hold_s; SES's Send event for it may come first.
            return Verdict(Outcome.ORPHANED, claim_until_ms=claim.claimed_until)
        return Verdict(Outcome.IN_FLIGHT)

    def _suppression(self, email: QueuedEmail, suppressed: Suppressed, *, via_s3: bool) -> str | None:
        key = (email.user_id, email.recipient_email.lower())
        if key in suppressed:
            return suppressed[key]
        if via_s3:  # not in the receive batch's look-up: its body was in S3
            return self._suppressions.check(email.user_id, [email.recipient_email]).get(key[1])
        return None

    def _gate(
        self, email: QueuedEmail, claim: Claim, tenant: Tenant | None, suppressed: str | None
    ) -> Outcome | Tenant:
        """Whether it may be sent at all: not suppressed, its tenant known and not paused, its campaign going.
        The outcome when it may not (a tenant the registry does not know is failed); else the tenant to send as."""
        if suppressed:
            return self._record(claim, email, SUPPRESSED, suppressed, Outcome.SUPPRESSED)
        if tenant is None:
            return self._fail(email, claim, "tenant unknown: no sender settings registered")
        if tenant.paused_reason:
            self._ledger.unclaim(claim)
            return Outcome.TENANT_PAUSED
        stopped = self._campaign_says(email, claim)
        return tenant if stopped is None else stopped

    def _campaign_says(self, email: QueuedEmail, claim: Claim) -> Outcome | None:
        """EXPIRED, CANCELLED (recorded) or CAMPAIGN_PAUSED (claim given back) if the campaign is stopped."""
        if email.deadline_ms is not None and time.time() * 1000 >= email.deadline_ms:
            return self._record(claim, email, EXPIRED, expired_reason(email.deadline_ms), Outcome.EXPIRED)
        state = self._control.state(email.user_id, email.campaign_id)
        if state == CANCELLED:
            return self._record(claim, email, CANCELLED, CANCELLED_REASON, Outcome.CANCELLED)
        if state == PAUSED:
            self._ledger.unclaim(claim)
            return Outcome.CAMPAIGN_PAUSED
        return None

    def _send(
        self, queue_name: str, slot: int, email: QueuedEmail, claim: Claim, tenant: Tenant, message: dict[str, Any]
    ) -> tuple[Outcome, int]:
        """The outcome, and how many drainers the email's rate needs (slot 0 starts the others)."""
        free = queue_name == self._settings.resources.free_queue.name
        sender = self._identity.sender_for(email, tenant, free)
        if sender is None:
            return self._fail(email, claim, NO_KEYS_REASON), 1
        rate = self._identity.rate_for(queue_name, sender)
        max_rate = self._settings.drainer_max_rate
        mine, drainers = share(rate, slot, max_rate), drainers_for(rate, max_rate)
        if mine <= 0:  # this drainer's band of the rate is empty: the drainers below it send this email
            self._ledger.unclaim(claim)
            return Outcome.FEWER_DRAINERS, drainers
        return self._paced_send(queue_name, slot, mine, email, claim, sender, message), drainers

    def _paced_send(
        self,
        queue_name: str,
        slot: int,
        share_of_rate: float,
        email: QueuedEmail,
        claim: Claim,
        sender: Sender,
        message: dict[str, Any],
    ) -> Outcome:
        """Wait for a turn within this drainer's share of the rate, ask the campaign once more, send, record."""
        free = queue_name == self._settings.resources.free_queue.name
        tenant = self._ses_tenant(email, sender) if free else None
        if free and tenant is None:  # its SES tenant is not set up: tried again later
            self._ledger.unclaim(claim)
            return Outcome.RETRY
        pacing = self._pacings.of(queue_name, slot)
        mime = self._mime(email, sender)
        slots = pacing.acquire(share_of_rate)
        try:
            stopped = self._campaign_says(email, claim)  # again, after the wait for the slot
            if stopped is not None:
                return stopped
            self._sent_ahead.take(email.user_id, share_of_rate)
            message_id = self._ses.send(sender, email.recipient_email, mime, platform=free, tenant=tenant)
        except SendOutcomeUnknown as exc:
            # SES may have accepted it (so it stays counted). The claim is kept: no copy goes out before SES's
            # Send event has had the claim's lifetime to record it sent (then the copy is dropped), as for a
            # sender that died.
            log.warning("send outcome unknown, claim kept", user=email.user_id, queue=queue_name, reason=str(exc))
            return Outcome.IN_FLIGHT
        except TenantSendingPaused as exc:
            self._sent_ahead.give_back(email.user_id)
            return self._ses_paused(exc, queue_name, email, claim, sender)
        except (SendThrottled, QuotaExhausted, KeysRejected, SendFailed, TransientSendError) as exc:
            self._sent_ahead.give_back(email.user_id)  # counted ahead for the reputation guard, not sent
            if isinstance(exc, TenantNotReady):
                self._ses_tenants.forget(email.user_id)
            if isinstance(exc, SendThrottled):
                pacing.slow_down(2.0, 5.0)
            return self._not_sent(exc, queue_name, email, claim, sender, _receives(message))
        finally:
            pacing.done(slots)
        self._recorder.finished(
            claim, email.user_id, email.campaign_id, email.recipient_email, SENT, message_id=message_id
        )
        return Outcome.SENT

    def _region(self, sender: Sender) -> str:
        return sender.region or self._settings.region

    def _ses_tenant(self, email: QueuedEmail, sender: Sender) -> str | None:
        """The SES tenant a platform send goes through, set up on its first send (None: not now)."""
        try:
            return self._ses_tenants.ensure(email.user_id, sender.email_address, self._region(sender))
        except Exception as exc:
            log.warning("SES tenant not set up, will retry", user=email.user_id, error=f"{type(exc).__name__}: {exc}")
            return None

    def _ses_paused(
        self, exc: TenantSendingPaused, queue_name: str, email: QueuedEmail, claim: Claim, sender: Sender
    ) -> Outcome:
        """SES would not send for this tenant. Unless the whole account's sending is paused (then the drain
        stops, as for an exhausted quota), the tenant is paused here, with SES's cause where SES's status
        gives one: its email is parked (held, never failed), and the other free tenants' goes on."""
        self._ledger.unclaim(claim)
        region = self._region(sender)
        try:
            status = self._ses_tenants.status(email.user_id, region, max_age_s=PAUSE_STATUS_MAX_AGE_S)
            if status is not None and not status.paused:  # read before the pause: read again
                status = self._ses_tenants.status(email.user_id, region, max_age_s=0)
        except Exception as error:
            log.warning("SES tenant status unknown", user=email.user_id, error=type(error).__name__)
            status = None
        if status is not None and status.paused:
            reason = status.reason
        elif not self._ses.sending_enabled(sender, platform=True):
            log.warning("sending stopped", queue=queue_name, user=email.user_id, reason=str(exc))
            return Outcome.QUOTA_REACHED
        else:  # SES's status lags its refusal, or could not be read: the refusal named this tenant
            reason = f"SES refused sending for SES tenant {self._ses_tenants.name_of(email.user_id)}: {exc}"
        if self._tenants.pause(email.user_id, SES, reason):
            log.warning("tenant paused by SES", user=email.user_id, reason=reason)
        return Outcome.TENANT_PAUSED

    def _not_sent(
        self, exc: Exception, queue_name: str, email: QueuedEmail, claim: Claim, sender: Sender, receives: int
    ) -> Outcome:
        """SES did not take it: failed for good, or the claim given back for a later try."""
        rotated = isinstance(exc, KeysRejected) and self._identity.newer_keys(email, sender)
        if isinstance(exc, SendFailed) and not rotated:
            return self._fail(email, claim, str(exc))
        if isinstance(exc, TransientSendError) and receives >= MAX_RECEIVE_COUNT:
            # Its last try: record why before SQS moves it to the dead-letter queue.
            self._fail(email, claim, f"{exc} (gave up after {receives} tries; message in the dead-letter queue)")
            return Outcome.DEAD_LETTER
        self._ledger.unclaim(claim)
        if isinstance(exc, SendThrottled):
            return Outcome.THROTTLED
        if isinstance(exc, QuotaExhausted):
            log.warning("sending stopped", queue=queue_name, user=email.user_id, reason=str(exc))
            return Outcome.QUOTA_REACHED
        # Keys rotated since this container's cached read (retried with them), or a transient error.
        log.warning("send not made, will retry", user=email.user_id, queue=queue_name, reason=str(exc))
        return Outcome.RETRY

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
                    unsubscribe_url=self._links.unsubscribe_url(
                        email.user_id, email.campaign_id, email.recipient_email
                    ),
                )
            )
        )

    def _fail(self, email: QueuedEmail, claim: Claim, reason: str) -> Outcome:
        try:  # kept first, so that retry-failed finds every failed one's email
            self._failed_copies.save(email)
        except Exception as exc:  # the failure is still recorded; only its retry is not possible
            log.warning("failed email not kept for retry", user=email.user_id, error=type(exc).__name__)
        return self._record(claim, email, FAILED, reason, Outcome.FAILED)

    def _record(self, claim: Claim, email: QueuedEmail, state: str, reason: str, outcome: Outcome) -> Outcome:
        self._recorder.finished(claim, email.user_id, email.campaign_id, email.recipient_email, state, reason=reason)
        return outcome


def _receives(message: dict[str, Any]) -> int:
    return int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
