"""send_emails' work: drain one queue through SES at its tenant's rate.

Receives up to 10 messages at a time, paces every send through the rate limiter, and records every
outcome before a message is deleted. It stops before the Lambda's time runs out and says so, so the
handler can hand on to a fresh invocation; two empty long polls in a row mean the queue is drained.
"""

from __future__ import annotations

import enum
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.core import log, metrics
from chalicelib.core.aws import NO_SUCH_QUEUE
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail, Sender, expired_reason
from chalicelib.core.errors import (
    KeysRejected,
    MessageInvalid,
    QuotaExhausted,
    SendFailed,
    SendOutcomeUnknown,
    SendThrottled,
    TransientSendError,
)
from chalicelib.core.links import LinkSigner
from chalicelib.core.metrics import QueueLag
from chalicelib.core.resources import MAX_RECEIVE_COUNT, SEND_VISIBILITY_TIMEOUT_S
from chalicelib.queueing.enqueuer import Enqueuer, Outgoing
from chalicelib.send.mime import OutgoingEmail, build_mime
from chalicelib.send.rate_limiter import QueuePacing
from chalicelib.send.sent_ahead import SentAhead
from chalicelib.send.ses_sender import SesSender
from chalicelib.stores.campaign_control import CANCELLED, PAUSED, CampaignControl
from chalicelib.stores.campaign_stats import BufferedStats, CampaignStats
from chalicelib.stores.failed_copies import FailedCopies
from chalicelib.stores.ledger import (
    EXPIRED,
    FAILED,
    FINAL,
    SENT,
    SUPPRESSED,
    UNATTRIBUTED,
    Claim,
    Entry,
    Ledger,
    message_key,
    unattributed_day,
)
from chalicelib.stores.payloads import PayloadStore
from chalicelib.stores.reputation import Reputation
from chalicelib.stores.schedule import ScheduleStore, held_bucket
from chalicelib.stores.suppression import Suppressions
from chalicelib.stores.tenants import Tenant, TenantRegistry

EMPTY_POLLS_TO_FINISH = 2
# A claim outlives its message's invisibility six times over. If its holder dies after SES accepted the
# email and before recording it, the message comes back after the visibility timeout (5 min) but finds
# the claim still held, and waits: SES's Send event, which records the email sent, has 30 minutes to
# arrive before the email is sent again. (With claim and visibility expiring together, the soak test
# sent two emails twice when its events ran more than 5 minutes late.) An email whose holder died before
# calling SES waits as long; a dead sender is rare, a duplicate is what we promise never to send.
# (`Settings.claim_hold_s`, MOONSEND_CLAIM_HOLD_S, defaults to this.)
CLAIM_HOLD_S = 6 * SEND_VISIBILITY_TIMEOUT_S
# A claim older than this whose message came back belongs to a sender that died (a send takes seconds;
# the message is back only after its visibility timeout).
ORPHANED_AFTER_MS = SEND_VISIBILITY_TIMEOUT_S * 1000
MAX_THROTTLE_BACKOFF_S = 900
MAX_SQS_DELAY_S = 900
THROTTLES_ATTRIBUTE = "moonsend-throttles"
# The campaign id of a paused free-plan tenant's held batches (ids may not start with `_`).
HELD_TENANT_CAMPAIGN = "_held"
# Sends run concurrently, each paced by the limiter, so that a 50 ms SES call does not cap a tenant
# at 20 per second; at most MAX_AHEAD received messages wait for their slot.
SEND_WORKERS = 48
MAX_AHEAD = 200
# Why email on a tenant's own queue without keys fails rather than going out through the platform's account.
NO_KEYS_REASON = (
    "no SES keys for this email: it was queued for the tenant's own SES account, whose keys are no longer "
    "registered; email on a tenant's queue is never sent through the platform's account"
)


class Outcome(enum.Enum):
    SENT = "sent"  # recorded, delete the message
    FAILED = "failed"  # recorded with its reason, delete the message
    THROTTLED = "throttled"  # back on the queue later, slow down
    RETRY = "retry"  # transient: back on the queue after a growing delay (SQS dead-letters after too many)
    DEAD_LETTER = "dead-letter"  # recorded as failed after its last try: SQS moves it to the dead-letter queue
    STOP = "stop"  # the SES account can send no more today: stop draining
    DUPLICATE = "duplicate"  # the recipient already has its outcome: delete without sending
    SUPPRESSED = "suppressed"  # suppressed since it was queued: recorded, deleted, not sent
    HELD = "held"  # another copy of it is being sent right now: look again in a moment
    ORPHANED = "orphaned"  # claimed longer ago than a send takes: its sender died; wait for SES's Send event
    PAUSED = "paused"  # its tenant is paused: held, not sent, nothing recorded against it
    CAMPAIGN_PAUSED = "campaign-paused"  # its campaign is paused: held for later, the queue goes on
    CANCELLED = "cancelled"  # its campaign is cancelled: recorded, deleted, not sent
    EXPIRED = "expired"  # past its campaign's deadline (scheduledAt + expiresAfter): recorded, deleted, not sent


# Outcomes recorded in the ledger, whose message is deleted, and the DrainResult counter of each.
_RECORDED = {
    Outcome.SENT: "sent",
    Outcome.FAILED: "failed",
    Outcome.SUPPRESSED: "suppressed",
    Outcome.DUPLICATE: "duplicates",
    Outcome.CANCELLED: "cancelled",
    Outcome.EXPIRED: "expired",
}


@dataclass
class DrainResult:
    queue_name: str
    sent: int = 0
    failed: int = 0
    throttled: int = 0
    retried: int = 0
    duplicates: int = 0
    suppressed: int = 0
    cancelled: int = 0
    expired: int = 0
    # MessageId -> (tenant, campaign, address, queued JSON) of email to hold (its campaign or tenant is paused)
    held: dict[str, tuple[str, str, str, str]] = field(default_factory=dict, repr=False)
    # (tenant, lower-cased address) -> why: recipients found suppressed by this drain's batch look-ups.
    suppressed_now: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    dead_lettered: int = 0
    lag: QueueLag = field(default_factory=QueueLag)
    tenants: set[str] = field(default_factory=set)
    unfinished: bool = False  # stopped for the deadline: hand on to a new invocation
    stopped_reason: str | None = None


class Drainer:
    def __init__(
        self,
        settings: Settings,
        sqs: Any,
        tenants: TenantRegistry,
        stats: CampaignStats,
        ses: SesSender,
        ledger: Ledger,
        payloads: PayloadStore | None = None,
        suppressions: Suppressions | None = None,
        links: LinkSigner | None = None,
        reputation: Reputation | None = None,
        control: CampaignControl | None = None,
        failed_copies: FailedCopies | None = None,
        schedule: ScheduleStore | None = None,
    ) -> None:
        self._settings = settings
        self._sqs = sqs
        self._tenants = tenants
        self._stats = BufferedStats(stats)
        # The reputation guard's denominator, counted before each send (see SentAhead for why).
        self._sent_ahead = SentAhead(reputation) if reputation is not None else None
        self._ses = ses
        self._ledger = ledger
        self._payloads = payloads
        self._suppressions = suppressions
        self._links = links
        self._control = control
        self._failed_copies = failed_copies
        self._schedule = schedule
        self._owners: dict[str, str] = {}  # tenant queue -> its tenant (the queue's tag)
        # One pacing per queue per container, so a re-invocation that lands in the same
        # container goes on from the last slot instead of starting with a fresh window.
        self._pacing: dict[str, QueuePacing] = {}
        self._lock = threading.Lock()
        self._orphaned_until: dict[str, int] = {}  # message id -> its recipient's claim expiry (epoch ms)

    def pacing(self, queue_name: str) -> QueuePacing:
        """The queue's pacing: each send at its own campaign's rate, the queue never over the highest."""
        with self._lock:
            if queue_name not in self._pacing:
                self._pacing[queue_name] = QueuePacing()
            return self._pacing[queue_name]

    def rate_for(self, queue_name: str, sender: Sender) -> float:
        """The free queue's platform rate, or the campaign's rate within the tenant's SES account's own."""
        if queue_name == self._settings.resources.free_queue.name:
            return self._settings.free_rate_per_second
        rate = min(sender.rate_per_second, self._settings.max_rate_per_second)
        try:
            rate = min(rate, self._ses.quota(sender).max_send_rate)
        except Exception as exc:
            log.warning("quota unavailable", queue=queue_name, error=type(exc).__name__)
        return rate

    def drain(self, queue_name: str, remaining_ms: Callable[[], int]) -> DrainResult:
        """Drain until the queue is empty, the deadline nears, or SES says stop for today.

        Receiving runs ahead of sending (up to `_ahead()` messages held), so the limiter, not the
        receive-send-delete round trip, sets the pace. Finished messages are deleted in batches.
        """
        result = DrainResult(queue_name)
        try:
            url = self._sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in NO_SUCH_QUEUE:
                raise
            # Removed for idleness after its alarm fired (chalicelib.jobs.idle_queues): nothing to send.
            result.stopped_reason = "the queue does not exist"
            log.info("drain skipped", queue=queue_name, reason=result.stopped_reason)
            return result
        paused = self._paused_owner(queue_name, url)
        if paused:
            # Before receiving anything: receiving would count against the messages' redelivery budget.
            result.stopped_reason = paused
            log.info("drain skipped", queue=queue_name, reason=paused)
            return result
        inflight: dict[Future[Outcome], dict[str, Any]] = {}
        # This drain's own: the container's Drainer may run several drains at once (the local stack does).
        finished: queue.SimpleQueue[Future[Outcome]] = queue.SimpleQueue()
        to_delete: list[dict[str, Any]] = []
        empty_polls = 0
        with ThreadPoolExecutor(max_workers=SEND_WORKERS, thread_name_prefix="send") as pool:
            while True:
                self._collect(url, inflight, finished, to_delete, result, wait=False)
                if len(to_delete) >= 10:
                    self._delete(url, to_delete)
                if result.stopped_reason:
                    break
                if remaining_ms() < self._settings.deadline_margin_ms:
                    result.unfinished = True
                    break
                room = self._ahead(queue_name) - len(inflight)
                if room <= 0:
                    self._collect(url, inflight, finished, to_delete, result, wait=True)
                    continue
                messages = self._sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=min(10, room),
                    WaitTimeSeconds=0 if inflight else self._settings.long_poll_seconds,
                    MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
                    MessageAttributeNames=[THROTTLES_ATTRIBUTE],
                ).get("Messages", [])
                if not messages:
                    if inflight:
                        self._collect(url, inflight, finished, to_delete, result, wait=True)
                        continue
                    empty_polls += 1
                    if empty_polls >= EMPTY_POLLS_TO_FINISH:
                        break
                    continue
                empty_polls = 0
                result.suppressed_now.update(self._suppressed_in(messages))
                for m in messages:
                    future = pool.submit(self._send_one, queue_name, m, result)
                    inflight[future] = m
                    future.add_done_callback(finished.put)
            # Whatever was started is finished and recorded before the drain hands on or ends.
            while inflight:
                self._collect(url, inflight, finished, to_delete, result, wait=True)
        self._delete(url, to_delete)
        self._stats.flush()
        if self._sent_ahead is not None:
            self._sent_ahead.settle()
        log.info(
            "drain ended",
            queue=queue_name,
            sent=result.sent,
            failed=result.failed,
            throttled=result.throttled,
            retried=result.retried,
            duplicates=result.duplicates,
            dead_lettered=result.dead_lettered,
            lag_mean_ms=round(result.lag.mean_ms),
            lag_max_ms=result.lag.max_ms,
            unfinished=result.unfinished,
            stopped=result.stopped_reason,
        )
        self._emit_metrics(queue_name, result)
        return result

    def _emit_metrics(self, queue_name: str, result: DrainResult) -> None:
        free = queue_name == self._settings.resources.free_queue.name
        counts = {
            "Sent": result.sent,
            "Failed": result.failed,
            "Throttled": result.throttled,
            "Retried": result.retried,
            "Duplicates": result.duplicates,
            "DeadLettered": result.dead_lettered,
        }
        try:
            metrics.emit(
                metrics.drain_record(
                    stage=self._settings.stage,
                    plan="free" if free else "paid",
                    queue=queue_name,
                    tenant=None if free or len(result.tenants) != 1 else next(iter(result.tenants)),
                    counts=counts,
                    lag=result.lag,
                )
            )
        except Exception as exc:  # metrics must never fail a drain whose outcomes are recorded
            log.warning("metrics not emitted", queue=queue_name, error=type(exc).__name__)

    def _ahead(self, queue_name: str) -> int:
        """How many messages to hold: a second and a half of sends, at least two batches.

        Each message spends the ledger claim, its slot, the SES call and the ledger record in flight;
        holding fewer than that round trip's worth caps the rate below the tenant's."""
        with self._lock:
            pacing = self._pacing.get(queue_name)
        rate = (pacing.rate if pacing else 0.0) or 10.0
        return max(20, min(MAX_AHEAD, math.ceil(rate * 1.5) + 10))

    def _collect(
        self,
        url: str,
        inflight: dict[Future[Outcome], dict[str, Any]],
        finished: queue.SimpleQueue[Future[Outcome]],
        to_delete: list[dict[str, Any]],
        result: DrainResult,
        *,
        wait: bool,
    ) -> None:
        if not inflight:
            return
        done: list[Future[Outcome]] = []
        try:
            # Finished sends announce themselves on a queue, so collecting costs nothing per send still
            # running (scanning up to MAX_AHEAD futures after every receive cost a third of a core at 500/s).
            done.append(finished.get(timeout=0.2) if wait else finished.get_nowait())
            while True:
                done.append(finished.get_nowait())
        except queue.Empty:
            pass
        to_hold: list[tuple[dict[str, Any], Outcome]] = []
        for future in done:
            m = inflight.pop(future)
            outcome = future.result()
            counter = _RECORDED.get(outcome)
            if counter:  # the outcome is in the ledger: the message can go
                setattr(result, counter, getattr(result, counter) + 1)
                to_delete.append(m)
            elif outcome is Outcome.CAMPAIGN_PAUSED:
                result.retried += 1
                to_hold.append((m, outcome))
            elif outcome is Outcome.THROTTLED:
                result.throttled += 1
                self._requeue_later(url, m)
            elif outcome is Outcome.PAUSED:
                result.retried += 1
                if self._is_free(url):
                    to_hold.append((m, outcome))  # the shared queue goes on for the other free tenants
                else:
                    result.held.pop(m.get("MessageId", ""), None)
                    self._visible_now(url, m)  # and stop: later drains check the pause before receiving
                    result.stopped_reason = "tenant paused"
            elif outcome in (Outcome.HELD, Outcome.ORPHANED) and _receives(m) >= MAX_RECEIVE_COUNT - 1:
                # A claim is live and this copy has one receive left: back off once more and SQS would
                # dead-letter it with no outcome recorded. A fresh copy starts its count again, soon for a
                # sender at work; for a dead one's (whose Send event is what it waits for) just after its
                # claim expires (at most SQS's 15 minutes of delay; it waits again if the claim is longer).
                result.retried += 1
                self._requeue_fresh(url, m, self._requeue_delay(outcome, m))
            elif outcome in (Outcome.HELD, Outcome.ORPHANED, Outcome.RETRY):
                result.retried += 1
                with self._lock:
                    self._orphaned_until.pop(m.get("MessageId", ""), None)
                self._back_off(url, m)
            elif outcome is Outcome.DEAD_LETTER:
                result.dead_lettered += 1
                self._release_to_dead_letter(url, m)
            else:
                result.stopped_reason = "daily quota exhausted or sending paused"
        if to_hold:
            self._hold_all(url, to_hold, to_delete, result)

    def _delete(self, url: str, messages: list[dict[str, Any]]) -> None:
        while messages:
            batch, messages[:] = messages[:10], messages[10:]
            resp = self._sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)],
            )
            failed = {bad["Id"] for bad in resp.get("Failed", [])}
            for bad in resp.get("Failed", []):
                # Recorded already; if it comes back, the next drain sees it again.
                log.warning("delete failed", code=bad.get("Code"), reason=bad.get("Message"))
            if self._payloads is not None:
                for i, m in enumerate(batch):
                    if str(i) not in failed:
                        self._discard(m["Body"])

    def _send_one(self, queue_name: str, message: dict[str, Any], result: DrainResult) -> Outcome:
        body = message["Body"]
        attributes = message.get("Attributes", {})
        receives = int(attributes.get("ApproximateReceiveCount", "1"))
        if self._payloads is not None:
            try:
                body = self._payloads.unwrap(body)
            except Exception as exc:  # S3 unreachable: try again later
                log.warning("payload unavailable, will retry", queue=queue_name, error=type(exc).__name__)
                return Outcome.RETRY
        try:
            email = QueuedEmail.from_json(body)
        except MessageInvalid as exc:
            # No recipient to record it against: recorded under `_unattributed` by its digest (once,
            # however often it comes back), and left for SQS to move to the dead-letter queue, where an
            # operator finds it (14 days).
            reason = f"unreadable queued message in {queue_name}: {exc}"
            log.error("unreadable queued message", queue=queue_name, reason=reason)
            day = unattributed_day()
            if self._ledger.record_rejected(UNATTRIBUTED, day, [(message_key(body), reason)]):
                self._stats.add(UNATTRIBUTED, day, rejected=1, error=reason)
            return Outcome.RETRY
        claim = self._ledger.claim(email.user_id, email.campaign_id, email.recipient_email, self._settings.claim_hold_s)
        if isinstance(claim, Entry):
            if claim.state in FINAL:  # a duplicate of an email that has its outcome: drop it
                log.info(
                    "duplicate dropped",
                    user=email.user_id,
                    campaign=email.campaign_id,
                    recipient=email.recipient_email,
                    state=claim.state,
                )
                return Outcome.DUPLICATE
            if claim.updated_at is not None and time.time() * 1000 - claim.updated_at > ORPHANED_AFTER_MS:
                if claim.claimed_until:  # when to look again if this copy must go back (see _collect)
                    with self._lock:
                        self._orphaned_until[message.get("MessageId", "")] = claim.claimed_until
                return Outcome.ORPHANED  # its claim expires in claim_hold_s; the Send event may come first
            return Outcome.HELD  # a copy is being sent now
        result.tenants.add(email.user_id)
        why = self._suppressed_now(email, result, via_s3=body is not message["Body"])
        if why:
            self._ledger.finish(claim, SUPPRESSED, reason=why)
            self._stats.add(email.user_id, email.campaign_id, suppressed=1, error=why)
            return Outcome.SUPPRESSED
        outcome = self._send_claimed(queue_name, email, claim, receives)
        if outcome is Outcome.CAMPAIGN_PAUSED or outcome is Outcome.PAUSED:
            result.held[message.get("MessageId", "")] = (email.user_id, email.campaign_id, email.recipient_email, body)
        if outcome is Outcome.SENT and "SentTimestamp" in attributes:
            result.lag.add(int(time.time() * 1000) - int(attributes["SentTimestamp"]))
        return outcome

    def _suppressed_in(self, messages: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
        """One look-up per receive batch: which of these recipients were suppressed since queued."""
        if self._suppressions is None:
            return {}
        by_user: dict[str, list[str]] = {}
        for m in messages:
            try:
                email = QueuedEmail.from_json(m["Body"])
            except MessageInvalid:
                continue  # an S3 pointer (checked alone when sent) or unreadable (recorded when sent)
            by_user.setdefault(email.user_id, []).append(email.recipient_email)
        found: dict[tuple[str, str], str] = {}
        for user, emails in by_user.items():
            for address, why in self._suppressions.check(user, emails).items():
                found[(user, address)] = why
        return found

    def _suppressed_now(self, email: QueuedEmail, result: DrainResult, *, via_s3: bool) -> str | None:
        key = (email.user_id, email.recipient_email.lower())
        if key in result.suppressed_now:
            return result.suppressed_now[key]
        if via_s3 and self._suppressions is not None:  # not in the batch look-up: its body was in S3
            return self._suppressions.check(email.user_id, [email.recipient_email]).get(key[1])
        return None

    def _campaign_says(self, email: QueuedEmail, claim: Claim) -> Outcome | None:
        """EXPIRED, CANCELLED (recorded) or CAMPAIGN_PAUSED (claim given back) if the campaign is stopped."""
        if email.deadline_ms is not None and time.time() * 1000 >= email.deadline_ms:
            reason = expired_reason(email.deadline_ms)
            self._ledger.finish(claim, EXPIRED, reason=reason)
            self._stats.add(email.user_id, email.campaign_id, expired=1, error=reason)
            return Outcome.EXPIRED
        if self._control is None:
            return None
        state = self._control.state(email.user_id, email.campaign_id)
        if state == CANCELLED:
            self._ledger.finish(claim, CANCELLED, reason="campaign cancelled before this email was sent")
            self._stats.add(email.user_id, email.campaign_id, cancelled=1)
            return Outcome.CANCELLED
        if state == PAUSED:
            self._ledger.release(claim)
            return Outcome.CAMPAIGN_PAUSED
        return None

    def _sender_for(self, email: QueuedEmail, tenant: Tenant, free: bool) -> Sender | None:
        """The sender this email goes out with: its campaign's (in the queued email) and the keys it names.

        None for email on a tenant's queue without keys to send it with: it is never sent through the
        platform's account, whatever the tenant's plan is now. Email queued before senders were fixed per
        campaign carries no key version and takes the tenant's registered settings where it says nothing."""
        s, registered = email.sender, tenant.sender
        from_address = str(s.get("emailAddress") or registered.email_address)
        from_name = str(s["fromName"]) if isinstance(s.get("fromName"), str) else registered.from_name
        region = s.get("region", registered.region)
        region = region if isinstance(region, str) and region else None
        rate = _positive(s.get("ratePerSecond")) or registered.rate_per_second
        if free:
            return Sender(from_address, from_name, region, None, None, rate)
        version = _key_version(email)
        keys = tenant.sending_keys(version)
        if keys is None and version is not None:  # registered after this container's cached read
            fresh = self._tenants.get(email.user_id, fresh=True)
            keys = fresh.sending_keys(version) if fresh else None
        if keys is None:
            return None
        return Sender(from_address, from_name, region, keys.api_key, keys.api_secret, rate)

    def _newer_keys(self, email: QueuedEmail, used: Sender) -> bool:
        """Whether the registry (read afresh) has other keys for this email than the ones AWS just refused."""
        tenant = self._tenants.get(email.user_id, fresh=True)
        keys = tenant.sending_keys(_key_version(email)) if tenant else None
        return keys is not None and keys.api_key != used.api_key

    def _send_claimed(self, queue_name: str, email: QueuedEmail, claim: Claim, receives: int = 1) -> Outcome:
        tenant = self._tenants.get(email.user_id)
        if tenant is None:
            return self._fail(email, claim, "tenant unknown: no sender settings registered")
        if tenant.paused_reason:
            self._ledger.release(claim)
            return Outcome.PAUSED
        held = self._campaign_says(email, claim)
        if held is not None:
            return held
        free = queue_name == self._settings.resources.free_queue.name
        sender = self._sender_for(email, tenant, free)
        if sender is None:
            return self._fail(email, claim, NO_KEYS_REASON)
        pacing = self.pacing(queue_name)
        rate = self.rate_for(queue_name, sender)
        mime = build_mime(
            OutgoingEmail(
                from_address=sender.email_address,
                from_name=sender.from_name,
                to=email.recipient_email,
                subject=email.subject,
                html=email.body,
                user_id=email.user_id,
                campaign_id=email.campaign_id,
                unsubscribe_url=(
                    self._links.unsubscribe_url(email.user_id, email.campaign_id, email.recipient_email)
                    if self._links
                    else None
                ),
            )
        )
        slots = pacing.acquire(rate)
        try:
            # Again after the wait for the slot: a cancel wins over every send not yet on its way to SES.
            held = self._campaign_says(email, claim)
            if held is not None:
                return held
            if self._sent_ahead is not None:
                self._sent_ahead.take(email.user_id)
            message_id = self._ses.send(sender, email.recipient_email, mime, platform=free)
        except SendThrottled:
            self._not_sent(email)
            pacing.slow_down(2.0, 5.0)
            self._ledger.release(claim)
            return Outcome.THROTTLED
        except QuotaExhausted as exc:
            self._not_sent(email)
            log.warning("sending stopped", queue=queue_name, user=email.user_id, reason=str(exc))
            self._ledger.release(claim)
            return Outcome.STOP
        except KeysRejected as exc:
            self._not_sent(email)
            if self._newer_keys(email, sender):  # rotated since this container's cached read: retried with them
                log.info("keys rotated, will retry", user=email.user_id, queue=queue_name)
                self._ledger.release(claim)
                return Outcome.RETRY
            return self._fail(email, claim, str(exc))
        except SendFailed as exc:
            self._not_sent(email)
            return self._fail(email, claim, str(exc))
        except SendOutcomeUnknown as exc:
            # SES may have accepted it (so it stays counted). The claim is kept: no copy goes out before SES's
            # Send event has had the claim's lifetime to record it sent (then the copy is dropped), as for a
            # sender that died.
            log.warning("send outcome unknown, claim kept", user=email.user_id, queue=queue_name, reason=str(exc))
            return Outcome.HELD
        except TransientSendError as exc:
            self._not_sent(email)
            if receives >= MAX_RECEIVE_COUNT:
                # Its last try: record why before SQS moves it to the dead-letter queue.
                self._fail(email, claim, f"{exc} (gave up after {receives} tries; message in the dead-letter queue)")
                return Outcome.DEAD_LETTER
            log.warning("send error, will retry", user=email.user_id, queue=queue_name, reason=str(exc))
            self._ledger.release(claim)
            return Outcome.RETRY
        finally:
            pacing.done(slots)
        if self._ledger.finish(claim, SENT, message_id=message_id):
            self._stats.add(email.user_id, email.campaign_id, sent=1)
        else:  # SES's Send event was faster (and counted it), or the claim expired and was retaken: expected
            log.debug(
                "sent, but its outcome was already recorded",
                user=email.user_id,
                campaign=email.campaign_id,
                recipient=email.recipient_email,
                message_id=message_id,
            )
        # DEBUG: the ledger is the per-email record; a line per email at INFO would cost CPU at high rates
        # and CloudWatch Logs ingestion on every email. Each drain logs a summary at INFO.
        log.debug("sent", user=email.user_id, campaign=email.campaign_id, queue=queue_name, message_id=message_id)
        return Outcome.SENT

    def _not_sent(self, email: QueuedEmail) -> None:
        """SES refused or throttled it: the send counted ahead for the reputation guard was not made."""
        if self._sent_ahead is not None:
            self._sent_ahead.give_back(email.user_id)

    def _fail(self, email: QueuedEmail, claim: Claim, reason: str) -> Outcome:
        if self._failed_copies is not None:  # kept first, so that retry-failed finds every failed one's email
            try:
                self._failed_copies.save(email)
            except Exception as exc:  # the failure is still recorded; only its retry is not possible
                log.warning("failed email not kept for retry", user=email.user_id, error=type(exc).__name__)
        self._ledger.finish(claim, FAILED, reason=reason)
        self._stats.add(email.user_id, email.campaign_id, failed=1, error=reason)
        log.info(
            "send failed",
            user=email.user_id,
            campaign=email.campaign_id,
            recipient=email.recipient_email,
            reason=reason,
        )
        return Outcome.FAILED

    def _discard(self, body: str) -> None:
        assert self._payloads is not None
        try:
            self._payloads.discard(body)
        except Exception as exc:
            log.warning("payload not deleted", error=type(exc).__name__)

    def _requeue_later(self, url: str, message: dict[str, Any]) -> None:
        """Put a throttled email back with a growing delay, as a fresh message.

        Throttling is not the email's fault: holding the same message invisible would count each try
        against the queue's maxReceiveCount and a throttling storm would dead-letter good email. A new
        copy starts its count afresh; the copy is sent before the original is deleted, so a crash in
        between leaves two copies, and the ledger's claim sends one.
        """
        throttles = int(message.get("MessageAttributes", {}).get(THROTTLES_ATTRIBUTE, {}).get("StringValue", "0"))
        delay = min(MAX_SQS_DELAY_S, 2 ** min(throttles + 1, 10))
        self._sqs.send_message(
            QueueUrl=url,
            MessageBody=message["Body"],
            DelaySeconds=delay,
            MessageAttributes={THROTTLES_ATTRIBUTE: {"DataType": "Number", "StringValue": str(throttles + 1)}},
        )
        self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def _requeue_delay(self, outcome: Outcome, message: dict[str, Any]) -> int:
        """Seconds until a held copy's fresh twin should be looked at: a live sender's claim ends within
        seconds (32 s); a dead one's when the claim expires (a second after, at most SQS's 15 minutes)."""
        with self._lock:
            until = self._orphaned_until.pop(message.get("MessageId", ""), None)
        if outcome is not Outcome.ORPHANED:
            return 2**MAX_RECEIVE_COUNT
        if until is None:
            return MAX_SQS_DELAY_S
        return max(2**MAX_RECEIVE_COUNT, min(MAX_SQS_DELAY_S, math.ceil(until / 1000 - time.time()) + 1))

    def _visible_now(self, url: str, message: dict[str, Any]) -> None:
        self._sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)

    def _release_to_dead_letter(self, url: str, message: dict[str, Any]) -> None:
        """Make it visible now: the next receive exceeds maxReceiveCount and SQS dead-letters it."""
        self._visible_now(url, message)

    def _is_free(self, url: str) -> bool:
        return url.rstrip("/").rsplit("/", 1)[-1] == self._settings.resources.free_queue.name

    def _paused_owner(self, queue_name: str, url: str) -> str | None:
        """`tenant paused: <why>` when a tenant queue's owner is paused (from the queue's tenant tag)."""
        if queue_name == self._settings.resources.free_queue.name:
            return None
        owner = self._owners.get(queue_name)
        if owner is None:
            try:
                tags = self._sqs.list_queue_tags(QueueUrl=url).get("Tags", {})
            except Exception as exc:  # cannot tell: drain, and check each message instead
                log.warning("queue owner unknown", queue=queue_name, error=type(exc).__name__)
                return None
            owner = tags.get("moonsend:tenant", "")
            self._owners[queue_name] = owner
        tenant = self._tenants.get(owner) if owner else None
        return f"tenant paused: {tenant.paused_reason}" if tenant and tenant.paused_reason else None

    def _hold_all(
        self,
        url: str,
        items: list[tuple[dict[str, Any], Outcome]],
        to_delete: list[dict[str, Any]],
        result: DrainResult,
    ) -> None:
        """Take paused email off the queue into the schedule store's held partitions, until resumed.

        One stored batch per paused campaign (or paused free-plan tenant) per collect. After storing,
        the pause is read again without the cache: if a resume came in meanwhile (and its release of the
        held email may have run before this batch was stored), the batch goes straight back onto the
        queue. Without a store, or if storing fails, the email is held on the queue as a delayed copy."""
        queue_name = url.rstrip("/").rsplit("/", 1)[-1]
        groups: dict[tuple[str, str | None], list[tuple[dict[str, Any], str, str]]] = {}
        for m, outcome in items:
            held = result.held.pop(m.get("MessageId", ""), None)
            if held is None or self._schedule is None:
                self._hold(url, m)
                continue
            user, campaign, address, body = held
            key = (user, campaign if outcome is Outcome.CAMPAIGN_PAUSED else None)
            groups.setdefault(key, []).append((m, address, body))
        for (user, campaign), group in groups.items():
            emails = [(address, body) for _m, address, body in group]
            try:
                batch = self._schedule.put(
                    user_id=user,
                    campaign_id=campaign or HELD_TENANT_CAMPAIGN,
                    plan="free" if self._is_free(url) else "paid",
                    queue=queue_name,
                    due_ms=0,
                    deadline_ms=None,
                    emails=emails,
                    bucket=held_bucket(user, campaign),
                )
            except Exception as exc:
                log.warning("held email not stored, kept on the queue", user=user, error=type(exc).__name__)
                for m, _a, _b in group:
                    self._hold(url, m)
                continue
            if not self._still_paused(user, campaign):
                # As every email goes on a queue: one over the queue's size goes to S3 with a pointer (held
                # email was read whole, so without this it would be refused and stay held for good).
                wrap = self._payloads.wrap if self._payloads is not None else None
                back = [
                    Outgoing(key=a, body=wrap(user, _campaign_of(b, campaign), b) if wrap else b) for a, b in emails
                ]
                failures = Enqueuer(self._sqs).send(url, back)
                if not failures:
                    self._schedule.remove(batch)
            to_delete.extend(m for m, _a, _b in group)

    def _still_paused(self, user: str, campaign: str | None) -> bool:
        if campaign is not None:
            return self._control is not None and self._control.state(user, campaign, fresh=True) == PAUSED
        tenant = self._tenants.get(user, fresh=True)
        return bool(tenant and tenant.paused_reason)

    def _hold(self, url: str, message: dict[str, Any]) -> None:
        """Put a paused tenant's email back for later as a fresh message (its redelivery budget intact)."""
        self._sqs.send_message(QueueUrl=url, MessageBody=message["Body"], DelaySeconds=MAX_SQS_DELAY_S)
        self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def _back_off(self, url: str, message: dict[str, Any]) -> None:
        delay = min(MAX_THROTTLE_BACKOFF_S, 2 ** min(_receives(message), 10))
        try:
            self._sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=delay
            )
        except ClientError as exc:
            # SQS delivered this message twice and the other copy's sender has deleted it: nothing to
            # back off. (Any other refusal leaves the message to come back after its visibility timeout.)
            log.info("back-off not applied", queue=url.rsplit("/", 1)[-1], code=exc.response["Error"]["Code"])

    def _requeue_fresh(self, url: str, message: dict[str, Any], delay_s: int) -> None:
        """The same email back on the queue as a new message, after `delay_s`, and this one deleted."""
        self._sqs.send_message(QueueUrl=url, MessageBody=message["Body"], DelaySeconds=delay_s)
        try:
            self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        except ClientError as exc:  # deleted already by the other copy's sender: the new copy finds it sent
            log.info("requeued copy's original already gone", code=exc.response["Error"]["Code"])


def _receives(message: dict[str, Any]) -> int:
    return int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))


def _key_version(email: QueuedEmail) -> int | None:
    """The version of the tenant's keys the email was queued with (None: queued before versions)."""
    version = email.sender.get("keyVersion")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _positive(value: object) -> float | None:
    """A rate from a queued email, or None when it has none (or a value no rate can be)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and math.isfinite(value):
        return float(value)
    return None


def _campaign_of(body: str, known: str | None) -> str:
    """The campaign of a held email (a paused free-plan tenant's batch mixes campaigns)."""
    if known is not None:
        return known
    try:
        return QueuedEmail.from_json(body).campaign_id
    except MessageInvalid:
        return HELD_TENANT_CAMPAIGN
