"""precompile_email: validate a recipient event, render it, and queue it for its tenant.

Order of work for one SNS message: validate the envelope, remember the tenant's settings, look the
recipients up in the ledger (a redelivered event finds them recorded and queues nothing again),
compile the campaign (once per container), render each new recipient, put them on the tenant's queue
in batches, then record them in the ledger (queued, or rejected with the reason) and count them. A
crash anywhere before the record leaves the recipients unrecorded, so Lambda's retry of the event
does the work again; the sender's claim makes a second queued copy harmless. Nothing is dropped.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import (
    MAX_DELAY_S,
    PrecompileRequest,
    QueuedEmail,
    RejectedRecipient,
    envelope_ids,
    expired_reason,
    is_email,
    parse_precompile_message,
)
from chalicelib.core.errors import FieldError, MessageInvalid, RenderFailed, SenderRefused, TemplateInvalid
from chalicelib.core.links import LinkSigner
from chalicelib.core.routing import queue_for
from chalicelib.ingest.renderer import TemplateCache, template_variables
from chalicelib.ingest.tracking import add_tracking
from chalicelib.queueing.enqueuer import Enqueuer, Outgoing
from chalicelib.queueing.tenant_queues import TenantQueues
from chalicelib.stores.campaign_sender import CampaignSenders, SenderSnapshot
from chalicelib.stores.campaign_stats import CampaignStats
from chalicelib.stores.daily_cap import DailyCap, batch_id, cap_reason
from chalicelib.stores.free_senders import FreeAddresses
from chalicelib.stores.ledger import EXPIRED, REJECTED, SUPPRESSED, UNATTRIBUTED, Ledger, message_key, unattributed_day
from chalicelib.stores.payloads import PayloadStore
from chalicelib.stores.schedule import ScheduleStore
from chalicelib.stores.suppression import Suppressions
from chalicelib.stores.tenants import AccountOf, TenantRegistry

# Recorded states of a recipient that did not take a share of the free plan's daily cap (the others were
# queued under it). A recipient expired by the sender did take one: counted as not, the cap errs by one.
NOT_UNDER_CAP = frozenset({REJECTED, SUPPRESSED, EXPIRED})


@dataclass
class PrecompileResult:
    user_id: str | None
    campaign_id: str | None
    queue: str | None = None
    queued: int = 0
    scheduled: int = 0  # held in the schedule store until the campaign's time
    expired: int = 0  # past the campaign's deadline already: recorded, not rendered
    duplicates: int = 0  # recipients the ledger already had (a redelivered event)
    rejected: list[RejectedRecipient] = field(default_factory=list)
    suppressed: list[tuple[str, str]] = field(default_factory=list)  # (address, why): recorded, not queued


class Precompiler:
    def __init__(
        self,
        settings: Settings,
        templates: TemplateCache,
        tenants: TenantRegistry,
        queues: TenantQueues,
        enqueuer: Enqueuer,
        stats: CampaignStats,
        ledger: Ledger,
        campaign_senders: CampaignSenders,
        free_addresses: FreeAddresses,
        account_of: AccountOf,
        payloads: PayloadStore | None = None,
        daily_cap: DailyCap | None = None,
        suppressions: Suppressions | None = None,
        links: LinkSigner | None = None,
        schedule: ScheduleStore | None = None,
    ) -> None:
        self._settings = settings
        self._templates = templates
        self._tenants = tenants
        self._queues = queues
        self._enqueuer = enqueuer
        self._stats = stats
        self._ledger = ledger
        self._campaign_senders = campaign_senders
        self._free_addresses = free_addresses
        self._account_of = account_of
        self._payloads = payloads
        self._daily_cap = daily_cap
        self._suppressions = suppressions
        self._links = links
        self._schedule = schedule

    def handle(self, raw: str) -> PrecompileResult:
        try:
            request = parse_precompile_message(raw)
        except MessageInvalid as exc:
            return self._reject_message(raw, exc)
        except (RecursionError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            # Data no check foresaw (JSON nested past the parser's limit, say): recorded as invalid, never lost.
            reason = "not valid JSON (nested too deeply)" if isinstance(exc, RecursionError) else type(exc).__name__
            return self._reject_message(raw, MessageInvalid([FieldError("message", f"could not be read: {reason}")]))
        return self._precompile(request, raw)

    def _reject_message(self, raw: str, exc: MessageInvalid) -> PrecompileResult:
        """An unusable envelope: recorded, never dropped, and recorded once however often it is redelivered.

        With a valid tenant and campaign id, each recipient it names is rejected in that campaign with
        the reason (or the message itself, under its digest, if it names none). Without them (not JSON,
        a hostile userId) there is no campaign to put it in: it goes to the `_unattributed` tenant under
        the day's date (an id no tenant can have), where `moonsend status` counts it and `moonsend
        recipients --user _unattributed --campaign <date>` lists the reasons.
        """
        user_id, campaign_id = envelope_ids(raw)
        reason = str(exc)
        emails = _named_recipients(raw)
        result = PrecompileResult(user_id, campaign_id)
        result.rejected = [RejectedRecipient(e, reason) for e in emails] or [RejectedRecipient(None, reason)]
        if user_id and campaign_id:
            records = [(e, reason) for e in emails] or [(message_key(raw), reason)]
        else:
            user_id, campaign_id = UNATTRIBUTED, unattributed_day()
            records = [(message_key(raw), f"{reason}{_given_ids(raw)}")]
        log.warning("message rejected", user=user_id, campaign=campaign_id, reason=records[0][1])
        new = self._ledger.record_rejected(user_id, campaign_id, records)
        if new:  # a redelivered bad message finds itself recorded and is not counted twice
            self._stats.add(user_id, campaign_id, rejected=new, error=records[0][1])
        return result

    def _precompile(self, req: PrecompileRequest, raw: str) -> PrecompileResult:
        result = PrecompileResult(req.user_id, req.campaign.id)
        named = [r.email for r in req.recipients] + [r.email for r in req.rejected if r.email]
        known = self._ledger.recorded(req.user_id, req.campaign.id, named)
        fresh = [r for r in req.recipients if r.key not in known]
        result.rejected = [r for r in req.rejected if not (r.email and r.email.lower() in known)]
        result.duplicates = len(req.recipients) - len(fresh)
        try:
            sender = self._fix_sender(req)
        except SenderRefused as exc:
            reason = str(exc)
            result.rejected.extend(RejectedRecipient(r.email, reason) for r in fresh)
            log.warning("sender refused", user=req.user_id, campaign=req.campaign.id, reason=reason)
            return self._finish(req, raw, result, [])
        if self._suppressions is not None and fresh:
            blocked = self._suppressions.check(req.user_id, [r.email for r in fresh])
            if blocked:
                result.suppressed = [(r.email, blocked[r.key]) for r in fresh if r.key in blocked]
                fresh = [r for r in fresh if r.key not in blocked]
        now = time.time()
        deadline = req.campaign.deadline(now)
        deadline_ms = int(deadline * 1000) if deadline is not None else None
        if deadline_ms is not None and deadline_ms <= now * 1000 and fresh:
            # Its time is long past (a message held up somewhere): nothing to render, nothing to send.
            reason = expired_reason(deadline_ms)
            result.expired = self._ledger.record_unsent(
                req.user_id, req.campaign.id, EXPIRED, [r.email for r in fresh], reason
            )
            self._stats.add(req.user_id, req.campaign.id, expired=result.expired, error=reason)
            fresh = []
        due = req.campaign.scheduled_at
        # Scheduled further ahead than the releaser looks: into the schedule store. Sooner: onto the
        # queue now, delayed by SQS until its time.
        store = self._schedule is not None and due is not None and due > now + 2 * self._settings.schedule_lead_s
        delay = min(MAX_DELAY_S, math.ceil(due - now)) if due is not None and not store and due > now else 0
        try:
            compiled = self._templates.get(
                req.campaign.id, req.campaign.subject, req.campaign.body, strict=req.campaign.strict
            )
        except TemplateInvalid as exc:
            reason = f"template: {exc}"
            result.rejected.extend(RejectedRecipient(r.email, reason) for r in fresh)
            log.warning(
                "template invalid", user=req.user_id, campaign=req.campaign.id, reason=reason, recipients=len(fresh)
            )
            return self._finish(req, raw, result, [])

        outgoing: list[Outgoing] = []
        encode = QueuedEmail.encoder(req.user_id, sender.plan, sender.queued_sender(), req.campaign.id, deadline_ms)
        # Signing a link costs an HMAC per recipient: only for templates that show it.
        links = self._links if "unsubscribe_url" in req.campaign.body + req.campaign.subject else None
        tracking = self._links if req.campaign.tracking else None
        # Stored ones are wrapped when released.
        wrap = self._payloads.wrap if self._payloads is not None and not store else None
        user_id, campaign_id = req.user_id, req.campaign.id
        for r in fresh:  # hundreds per message: names looked up once, above
            extra = {"unsubscribe_url": links.unsubscribe_url(user_id, campaign_id, r.email)} if links else None
            try:
                rendered = compiled.render(template_variables(r.email, r.metadata, campaign_id, extra))
                html_body = rendered.body
                if tracking:
                    html_body = add_tracking(html_body, tracking, user_id, campaign_id, r.email)
                body = encode(rendered.subject, html_body, r.email)
            except RenderFailed as exc:
                result.rejected.append(RejectedRecipient(r.email, f"render: {exc}"))
                continue
            except MemoryError:  # the container's trouble, not the recipient's: Lambda retries the event
                raise
            except Exception as exc:  # whatever this recipient's data makes raise: its rejection, not the batch's
                reason = f"render: {type(exc).__name__}: {str(exc)[:200]}"
                result.rejected.append(RejectedRecipient(r.email, reason))
                continue
            if wrap is not None:
                body = wrap(user_id, campaign_id, body)
            outgoing.append(Outgoing(r.email, body, delay))

        if outgoing and req.plan == "free" and self._daily_cap is not None and self._daily_cap.cap > 0:
            # The batch is the whole message, so a retry names the same one however much of it is recorded.
            share = self._daily_cap.share(
                req.user_id, len(outgoing), batch_id(req.campaign.id, (r.key for r in req.recipients))
            )
            fit = share.allowed
            if share.repeated:
                # Part of the share may have gone already (queued, even sent, before a crash or by a
                # concurrent duplicate): the rest goes to the first of those not recorded, in the message's
                # order, which are the ones the first try had let through.
                fit -= sum(1 for r in req.recipients if r.key in known and known[r.key] not in NOT_UNDER_CAP)
            fit = max(0, fit)
            if fit < len(outgoing):
                reason = cap_reason(self._daily_cap.cap)
                result.rejected.extend(RejectedRecipient(o.key, reason) for o in outgoing[fit:])
                outgoing = outgoing[:fit]

        queued: list[str] = []
        if outgoing and store:
            assert self._schedule is not None and due is not None
            queue = queue_for(self._settings.resources, req.user_id, req.plan)
            stored = self._schedule.put(
                user_id=req.user_id,
                campaign_id=req.campaign.id,
                plan=req.plan,
                queue=queue,
                due_ms=int(due * 1000),
                deadline_ms=deadline_ms,
                emails=[(o.key, o.body) for o in outgoing],
            )
            result.queue = queue
            return self._finish(req, raw, result, [], scheduled=[o.key for o in outgoing], bucket=stored.bucket)
        if outgoing:
            queue = queue_for(self._settings.resources, req.user_id, req.plan)
            url = self._queues.ensure(queue, req.user_id)
            failures = self._enqueuer.send(url, outgoing)
            failed = {f.key for f in failures}
            result.queue = queue
            queued = [o.key for o in outgoing if o.key not in failed]
            result.rejected.extend(RejectedRecipient(f.key, f"enqueue: {f.reason}") for f in failures)
        return self._finish(req, raw, result, queued)

    def _fix_sender(self, req: PrecompileRequest) -> SenderSnapshot:
        """The sender every email of this campaign goes out with; SenderRefused when this message may not
        send as it says (another free tenant's From, keys of another account, another sender than the
        campaign's first message had)."""
        free = req.plan == "free"
        if free:  # checked first: a refused address never becomes the tenant's registered From
            self._free_addresses.claim(req.user_id, req.sender.email_address, int(time.time() * 1000))
        keys = self._tenants.accept(req.user_id, req.plan, req.sender, self._account_of)
        sender = SenderSnapshot.of(req.plan, req.sender, None if free else keys)
        self._campaign_senders.fix(req.user_id, req.campaign.id, sender)
        return sender

    def _finish(
        self,
        req: PrecompileRequest,
        raw: str,
        result: PrecompileResult,
        queued: list[str],
        scheduled: list[str] | None = None,
        bucket: str | None = None,
    ) -> PrecompileResult:
        # Recorded only where the sender has not already been faster; counted as queued either way.
        self._ledger.record_queued(req.user_id, req.campaign.id, queued)
        result.queued = len(queued)
        if scheduled:
            result.scheduled = self._ledger.record_scheduled(req.user_id, req.campaign.id, scheduled)
        if req.campaign.scheduled_at or req.campaign.expires_after_s:
            deadline = req.campaign.deadline(time.time())
            self._stats.note_schedule(
                req.user_id,
                req.campaign.id,
                int(req.campaign.scheduled_at * 1000) if req.campaign.scheduled_at else None,
                int(deadline * 1000) if deadline else None,
                bucket,
            )
        suppressed = self._ledger.record_suppressed(req.user_id, req.campaign.id, result.suppressed)
        # Even an invalid address is recorded under what was given, when it can be a key at all; an entry
        # with no usable address (not an object, no email) under the message's digest and its place in
        # the message (the reason starts with it: `recipients[3]: ...`), so that it is listed with its
        # reason and recorded once however often the message comes.
        records: list[tuple[str, str]] = []
        digest = ""  # the message's digest, computed once and only when needed
        for r in result.rejected:
            if _keyable(r.email):
                records.append((r.email, r.reason))  # type: ignore[arg-type]
                continue
            digest = digest or message_key(raw)
            records.append((f"{digest}-{r.reason.split(':', 1)[0]}", r.reason))
        rejected = self._ledger.record_rejected(req.user_id, req.campaign.id, records)
        if len(result.rejected) <= 20:  # one line per recipient for small batches, a summary for big
            for r in result.rejected:
                log.info(
                    "recipient rejected", user=req.user_id, campaign=req.campaign.id, recipient=r.email, reason=r.reason
                )
        self._stats.add(
            req.user_id,
            req.campaign.id,
            queued=result.queued,
            rejected=rejected,
            **({"suppressed": suppressed} if suppressed else {}),
            **({"scheduled": result.scheduled} if result.scheduled else {}),
            error=result.rejected[-1].reason if result.rejected else None,
        )
        log.info(
            "precompiled",
            user=req.user_id,
            campaign=req.campaign.id,
            queue=result.queue,
            queued=result.queued,
            scheduled=result.scheduled,
            expired=result.expired,
            rejected=len(result.rejected),
            duplicates=result.duplicates,
        )
        return result


def _given_ids(raw: str | bytes | dict[str, Any]) -> str:
    """` (userId given: '../x')`: the ids a rejected message carried, shortened, so its sender can find it.

    Ids are not secrets; the sender's keys are never echoed."""
    try:
        d = json.loads(raw) if isinstance(raw, str | bytes) else raw
        campaign = d.get("campaign") if isinstance(d.get("campaign"), dict) else {}
        given = [("userId", d.get("userId")), ("campaign.id", campaign.get("id"))]
    except (ValueError, AttributeError, TypeError, RecursionError):
        return ""
    shown = [f"{name} given: {v[:60]!r}{'...' if len(v) > 60 else ''}" for name, v in given if isinstance(v, str)]
    return f" ({', '.join(shown)})" if shown else ""


def _keyable(email: str | None) -> bool:
    return bool(email) and len(email.encode("utf-8")) <= 254 and email.isprintable()  # type: ignore[union-attr]


def _named_recipients(raw: str) -> list[str]:
    """The valid addresses an (invalid) message names, so that each can be recorded as rejected."""
    try:
        d = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    if not isinstance(d, dict):
        return []
    items = d.get("recipients") if isinstance(d.get("recipients"), list) else [d.get("recipient")]
    out: list[str] = []
    for r in items:
        if isinstance(r, dict) and is_email(r.get("email")) and r["email"].lower() not in {e.lower() for e in out}:
            out.append(r["email"])
    return out
