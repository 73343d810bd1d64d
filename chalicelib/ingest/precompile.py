"""precompile_email: validate a recipient event, render it, and queue it for its tenant.

One SNS message goes through named steps, each on the message's `_Job`: the recipients the ledger does
not know yet (a redelivered event finds its recipients recorded and queues nothing again) → the Sender
fixed for the campaign → the suppressed taken out → the expired taken out → the templates compiled
(once per container) → each recipient rendered → the free plan's daily cap → into the schedule store or
onto the queue → everything recorded (queued, or rejected with the reason) and counted. A crash anywhere
before the record leaves the recipients unrecorded, so Lambda's retry of the event does the work again;
the drainer's claim makes a second queued copy harmless. Nothing is dropped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import (
    MAX_DELAY_S,
    PrecompileRequest,
    QueuedEmail,
    Recipient,
    RejectedRecipient,
    expired_reason,
    pack_mime,
)
from chalicelib.core.errors import FieldError, MessageInvalid, RenderFailed, SenderRefused, TemplateInvalid
from chalicelib.core.links import LinkSigner
from chalicelib.core.message_parser import parse_precompile_message
from chalicelib.core.mime import OutgoingEmail, compose
from chalicelib.core.routing import queue_for
from chalicelib.ingest.rejection import record_key, rejection_records, rejects_of_message
from chalicelib.ingest.renderer import CompiledCampaign, TemplateCache, template_variables
from chalicelib.ingest.tracking import add_tracking
from chalicelib.queueing.drain_starter import DrainStarter
from chalicelib.queueing.email_queue import EmailQueue
from chalicelib.queueing.enqueuer import Outgoing
from chalicelib.stores.daily_cap import batch_id, cap_reason
from chalicelib.stores.ledger_model import EXPIRED, REJECTED, SUPPRESSED
from chalicelib.stores.ports.campaigns import CampaignSchedule, SenderFix, SenderSnapshot
from chalicelib.stores.ports.ledger import LedgerReads
from chalicelib.stores.ports.schedule import ParkingStore
from chalicelib.stores.ports.sending import DailyShare, FreeAddressRecords
from chalicelib.stores.ports.suppression import SuppressionList
from chalicelib.stores.ports.tenants import AccountOf, KeyVersion, TenantRecords
from chalicelib.stores.recorder import Recorder

# Recorded states of a recipient that did not take a share of the free plan's daily cap (the others were
# queued under it). A recipient expired by the drainer did take one: counted as not, the cap errs by one.
NOT_UNDER_CAP = frozenset({REJECTED, SUPPRESSED, EXPIRED})


@dataclass
class PrecompileResult:
    user_id: str | None
    campaign_id: str | None
    queue: str | None = None
    queued: int = 0
    scheduled: int = 0  # kept in the schedule store until the campaign's time
    expired: int = 0  # past the campaign's deadline already: recorded, not rendered
    duplicates: int = 0  # recipients the ledger already had (a redelivered event)
    known_rejected: set[str] = field(default_factory=set)  # of those, the ones it had rejected (never queued)
    rejected: list[RejectedRecipient] = field(default_factory=list)
    suppressed: list[tuple[str, str]] = field(default_factory=list)  # (address, why): recorded, not queued


@dataclass
class _Job:
    """One message on its way through the steps."""

    req: PrecompileRequest
    raw: str
    recorder: Recorder  # this message's: its counts written once, when it is done
    result: PrecompileResult
    known: dict[str, str | None] = field(default_factory=dict)  # lower-cased address -> recorded state
    fresh: list[Recipient] = field(default_factory=list)  # still to be rendered and queued
    outgoing: list[Outgoing] = field(default_factory=list)  # rendered, not yet queued
    queued: list[str] = field(default_factory=list)
    scheduled: list[str] = field(default_factory=list)
    bucket: str | None = None  # the schedule store minute of its scheduled email
    now: float = field(default_factory=time.time)

    @property
    def deadline_ms(self) -> int | None:
        deadline = self.req.campaign.deadline(self.now)
        return int(deadline * 1000) if deadline is not None else None

    def reject(self, recipients: list[Recipient], reason: str) -> None:
        self.result.rejected.extend(RejectedRecipient(r.email, reason) for r in recipients)


@dataclass(frozen=True)
class SenderChecks:
    """Who may send as a message's sender (the step that fixes it): the tenant registered with its keys, a free
    tenant's claim of its From, and the campaign's first sender held to."""

    tenants: TenantRecords
    free_addresses: FreeAddressRecords
    account_of: AccountOf
    campaign_senders: SenderFix


@dataclass(frozen=True)
class RecipientChecks:
    """Which recipients go on: not recorded already, not suppressed, within the free plan's daily cap."""

    recorded: LedgerReads
    suppressions: SuppressionList
    daily_cap: DailyShare


@dataclass(frozen=True)
class Rendering:
    """Templates compiled once per container, and the signed links put into each email."""

    templates: TemplateCache
    links: LinkSigner


@dataclass(frozen=True)
class Outlets:
    """Where rendered email goes: onto its queue (and its drain started), or into the schedule store."""

    email_queue: EmailQueue
    drains: DrainStarter
    schedule: ParkingStore


class Precompiler:
    def __init__(
        self,
        settings: Settings,
        senders: SenderChecks,
        recipients: RecipientChecks,
        rendering: Rendering,
        outlets: Outlets,
        recorder: Recorder,
        schedule_notes: CampaignSchedule,
    ) -> None:
        self._settings = settings
        self._tenants = senders.tenants
        self._free_addresses = senders.free_addresses
        self._account_of = senders.account_of
        self._campaign_senders = senders.campaign_senders
        self._recorded = recipients.recorded
        self._suppressions = recipients.suppressions
        self._daily_cap = recipients.daily_cap
        self._templates = rendering.templates
        self._links = rendering.links
        self._email_queue = outlets.email_queue
        self._drains = outlets.drains
        self._schedule = outlets.schedule
        self._recorder = recorder
        self._schedule_notes = schedule_notes  # a campaign's time and deadline, kept beside its counters

    def handle(self, raw: str) -> PrecompileResult:
        # One counter write per message: its counts are gathered (its own, not another invocation's that
        # shares the container) and written when it is done.
        recorder = self._recorder.gathering()
        try:
            return self._handle(raw, recorder)
        finally:
            recorder.flush()

    def _handle(self, raw: str, recorder: Recorder) -> PrecompileResult:
        try:
            request = parse_precompile_message(raw)
        except MessageInvalid as exc:
            return self._reject_message(raw, exc, recorder)
        except (RecursionError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            # Data no check foresaw (JSON nested past the parser's limit, say): recorded as invalid, never lost.
            reason = "not valid JSON (nested too deeply)" if isinstance(exc, RecursionError) else type(exc).__name__
            invalid = MessageInvalid([FieldError("message", f"could not be read: {reason}")])
            return self._reject_message(raw, invalid, recorder)
        return self._run(request, raw, recorder)

    def handle_request(self, request: PrecompileRequest) -> PrecompileResult:
        """A request built by moonsend itself (a digest's email), not parsed from a producer's message: the
        same steps, without the contract's limits on what a producer may send (a digest's items are larger
        metadata than a recipient's)."""
        recorder = self._recorder.gathering()
        try:
            return self._run(request, "", recorder)
        finally:
            recorder.flush()

    def _run(self, request: PrecompileRequest, raw: str, recorder: Recorder) -> PrecompileResult:
        job = _Job(request, raw, recorder, PrecompileResult(request.user_id, request.campaign.id))
        self._new_recipients(job)
        try:
            sender = self._fix_sender(job.req)
        except SenderRefused as exc:
            job.reject(job.fresh, str(exc))
            log.warning("sender refused", user=request.user_id, campaign=request.campaign.id, reason=str(exc))
            return self._finish(job)
        self._drop_suppressed(job)
        self._drop_expired(job)
        compiled = self._compile(job)
        if compiled is not None:
            self._render(job, compiled, sender)
            self._within_daily_cap(job)
            self._put_away(job)
        return self._finish(job)

    def _reject_message(self, raw: str, exc: MessageInvalid, recorder: Recorder) -> PrecompileResult:
        """An unusable envelope: recorded (chalicelib.ingest.rejection says where), never dropped."""
        r = rejects_of_message(raw, exc)
        log.warning("message rejected", user=r.user_id, campaign=r.campaign_id, reason=r.records[0][1])
        recorder.rejected(r.user_id, r.campaign_id, r.records)
        return PrecompileResult(r.given_user, r.given_campaign, rejected=r.rejected)

    def _new_recipients(self, job: _Job) -> None:
        """The recipients the ledger has no record of: a redelivered message queues nothing again.

        A rejected recipient is looked up under the key its rejection is recorded under, never under its
        address as given: an address of any length may be rejected, and a key over DynamoDB's size fails
        the whole lookup, and with it every valid recipient of the message."""
        req = job.req
        keyed = [(r, record_key(r.email)) for r in req.rejected]
        named = [r.email for r in req.recipients] + [key for _, key in keyed if key is not None]
        job.known = self._recorded.recorded(req.user_id, req.campaign.id, named)
        job.fresh = [r for r in req.recipients if r.key not in job.known]
        job.result.rejected = [r for r, key in keyed if key is None or key.lower() not in job.known]
        job.result.duplicates = len(req.recipients) - len(job.fresh)
        job.result.known_rejected = {r.key for r in req.recipients if job.known.get(r.key) == REJECTED}

    def _fix_sender(self, req: PrecompileRequest) -> SenderSnapshot:
        """The Sender every email of this campaign goes out with; SenderRefused when this message may not
        send as it says (another free tenant's From, keys of another account, another sender than the
        campaign's first message had)."""
        free = req.plan == "free"
        served = self._settings.region
        if req.sender.region not in (None, served):
            # The stage's configuration set, events topic and SES tenants are in its own region: a send from
            # another would have no events (no bounce, complaint or delivery recorded, no suppression).
            raise SenderRefused(
                f"sender.region {req.sender.region} is not served by this stage, which sends from {served} only "
                "(SES's events of a send from another region could not reach it)"
            )
        if free:  # checked first: a refused address never becomes the tenant's registered From
            self._free_addresses.claim(req.user_id, req.sender.email_address, int(time.time() * 1000))
        if req.registered:
            keys = self._registered_keys(req)
        elif req.sender.key_version is not None and not free:
            keys = self._named_keys(req, req.sender.key_version)
        else:
            keys = self._tenants.accept(req.user_id, req.plan, req.sender, self._account_of)
        sender = SenderSnapshot.of(req.plan, req.sender, None if free else keys)
        self._campaign_senders.fix(req.user_id, req.campaign.id, sender, req.campaign.subject)
        return sender

    def _registered_keys(self, req: PrecompileRequest) -> KeyVersion | None:
        """The current keys of a tenant whose registered sender this request carries (a digest's run)."""
        if req.plan == "free":
            return None
        tenant = self._tenants.get(req.user_id)
        if tenant is None or tenant.current_keys is None:
            raise SenderRefused(f"tenant {req.user_id} has no registered SES keys")
        return tenant.current_keys

    def _named_keys(self, req: PrecompileRequest, version: int) -> KeyVersion:
        """The registered keys a message moonsend published names (chalicelib.produce): only with moonsend's
        proof, so that no producer sends through a tenant's account without its keys."""
        proof = req.sender.key_proof or ""
        if not self._links.sender_proven(proof, req.user_id, req.campaign.id, version):
            raise SenderRefused("sender.keyProof: not moonsend's proof for this tenant, campaign and key version")
        tenant = self._tenants.get(req.user_id)
        named = next((k for k in tenant.keys if k.version == version), None) if tenant else None
        if named is None:
            raise SenderRefused(f"sender.keyVersion: tenant {req.user_id} has no key version {version} registered")
        return named

    def _drop_suppressed(self, job: _Job) -> None:
        if not job.fresh:
            return
        blocked = self._suppressions.check(job.req.user_id, [r.email for r in job.fresh])
        if blocked:
            job.result.suppressed = [(r.email, blocked[r.key]) for r in job.fresh if r.key in blocked]
            job.fresh = [r for r in job.fresh if r.key not in blocked]

    def _drop_expired(self, job: _Job) -> None:
        """Its time long past (a message held up somewhere): nothing to render, nothing to send."""
        deadline_ms = job.deadline_ms
        if deadline_ms is None or deadline_ms > job.now * 1000 or not job.fresh:
            return
        emails = [r.email for r in job.fresh]
        job.result.expired = job.recorder.unsent(
            job.req.user_id, job.req.campaign.id, EXPIRED, emails, expired_reason(deadline_ms)
        )
        job.fresh = []
        job.recorder.flush()  # counted now: a crash before the message is done would otherwise lose it

    def _compile(self, job: _Job) -> CompiledCampaign | None:
        c = job.req.campaign
        try:
            return self._templates.get(c.id, c.subject, c.body, strict=c.strict)
        except TemplateInvalid as exc:
            reason = f"template: {exc}"
            job.reject(job.fresh, reason)
            log.warning(
                "template invalid", user=job.req.user_id, campaign=c.id, reason=reason, recipients=len(job.fresh)
            )
            return None

    def _render(self, job: _Job, compiled: CompiledCampaign, sender: SenderSnapshot) -> None:
        """Each fresh recipient rendered into its queued email; a recipient whose data fails is rejected alone."""
        req, delay = job.req, self._delay(job)
        user_id, campaign_id = req.user_id, req.campaign.id
        encode = QueuedEmail.encoder(user_id, sender.plan, sender.queued_sender(), campaign_id, job.deadline_ms)
        shows_unsubscribe = "unsubscribe_url" in req.campaign.body + req.campaign.subject
        tracking = self._links if req.campaign.tracking else None
        for r in job.fresh:  # hundreds per message: names looked up once, above
            # The List-Unsubscribe header carries it whether the template shows it or not.
            unsubscribe_url = self._links.unsubscribe_url(user_id, campaign_id, r.email)
            extra = {"unsubscribe_url": unsubscribe_url} if shows_unsubscribe else None
            try:
                rendered = compiled.render(template_variables(r.email, r.metadata, campaign_id, extra))
                html_body = rendered.body
                if tracking:
                    html_body = add_tracking(html_body, tracking, user_id, campaign_id, r.email)
                composed = compose(
                    OutgoingEmail(
                        sender.email_address,
                        sender.from_name,
                        r.email,
                        rendered.subject,
                        html_body,
                        user_id,
                        campaign_id,
                        unsubscribe_url,
                    )
                )
                job.outgoing.append(Outgoing(r.email, encode(rendered.subject, pack_mime(composed), r.email), delay))
            except RenderFailed as exc:
                job.result.rejected.append(RejectedRecipient(r.email, f"render: {exc}"))
            except MemoryError:  # the container's trouble, not the recipient's: Lambda retries the event
                raise
            except Exception as exc:  # whatever this recipient's data makes raise: its rejection, not the batch's
                job.result.rejected.append(
                    RejectedRecipient(r.email, f"render: {type(exc).__name__}: {str(exc)[:200]}")
                )

    def _stored(self, job: _Job) -> bool:
        """Scheduled further ahead than the releaser looks: into the schedule store."""
        due = job.req.campaign.scheduled_at
        return due is not None and due > job.now + 2 * self._settings.schedule_lead_s

    def _delay(self, job: _Job) -> int:
        """Due sooner than the store takes: onto the queue now, delayed by SQS until its time."""
        due = job.req.campaign.scheduled_at
        if due is None or due <= job.now or self._stored(job):
            return 0
        return min(MAX_DELAY_S, math.ceil(due - job.now))

    def _within_daily_cap(self, job: _Job) -> None:
        """The free plan's daily cap: what does not fit today is rejected with the reason."""
        req = job.req
        if not job.outgoing or req.plan != "free" or self._daily_cap.cap <= 0:
            return
        # The batch is the whole message, so a retry names the same one however much of it is recorded.
        share = self._daily_cap.share(
            req.user_id, len(job.outgoing), batch_id(req.campaign.id, (r.key for r in req.recipients))
        )
        fit = share.allowed
        if share.repeated:
            # Part of the share may have gone already (queued, even sent, before a crash or by a concurrent
            # duplicate): the rest goes to the first of those not recorded, in the message's order, which
            # are the ones the first try had let through.
            fit -= sum(1 for r in req.recipients if r.key in job.known and job.known[r.key] not in NOT_UNDER_CAP)
        fit = max(0, fit)
        if fit < len(job.outgoing):
            reason = cap_reason(self._daily_cap.cap)
            job.result.rejected.extend(RejectedRecipient(o.key, reason) for o in job.outgoing[fit:])
            job.outgoing = job.outgoing[:fit]

    def _put_away(self, job: _Job) -> None:
        """Into the schedule store (wrapped for the queue when released) or onto the tenant's queue."""
        if not job.outgoing:
            return
        req = job.req
        queue = queue_for(self._settings.resources, req.user_id, req.plan)
        job.result.queue = queue
        if self._stored(job):
            stored = self._schedule.put(
                user_id=req.user_id,
                campaign_id=req.campaign.id,
                plan=req.plan,
                queue=queue,
                due_ms=int((req.campaign.scheduled_at or 0) * 1000),
                deadline_ms=job.deadline_ms,
                emails=[(o.key, o.body) for o in job.outgoing],
            )
            job.scheduled, job.bucket = [o.key for o in job.outgoing], stored.bucket
            return
        failures = self._email_queue.put(queue, req.user_id, req.campaign.id, job.outgoing)
        failed = {f.key for f in failures}
        job.queued = [o.key for o in job.outgoing if o.key not in failed]
        job.result.rejected.extend(RejectedRecipient(f.key, f"enqueue: {f.reason}") for f in failures)
        if job.queued:  # its first email in seconds, not when the queue's alarm wakes (a minute, or 15)
            delay = self._delay(job)
            self._drains.ensure(queue, int((job.now + delay) * 1000) if delay else None)

    def _finish(self, job: _Job) -> PrecompileResult:
        """Record and count every recipient of the message, and say what was done in one log line."""
        req, result = job.req, job.result
        user_id, campaign_id = req.user_id, req.campaign.id
        result.queued = job.recorder.queued(user_id, campaign_id, job.queued)
        result.scheduled = job.recorder.scheduled(user_id, campaign_id, job.scheduled)
        if req.campaign.scheduled_at or req.campaign.expires_after_s:
            scheduled_ms = int(req.campaign.scheduled_at * 1000) if req.campaign.scheduled_at else None
            self._schedule_notes.note_schedule(user_id, campaign_id, scheduled_ms, job.deadline_ms, job.bucket)
        job.recorder.suppressed(user_id, campaign_id, result.suppressed)
        job.recorder.rejected(user_id, campaign_id, rejection_records(result.rejected, job.raw))
        log.info(
            "precompiled",
            user=user_id,
            campaign=campaign_id,
            queue=result.queue,
            queued=result.queued,
            scheduled=result.scheduled,
            expired=result.expired,
            rejected=len(result.rejected),
            duplicates=result.duplicates,
        )
        return result
