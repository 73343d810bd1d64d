"""precompile_email: validate a recipient event, render it, and queue it for its tenant.

Order of work for one SNS message: validate the envelope, remember the tenant's settings, compile the
campaign (once per container), render each recipient, put them on the tenant's queue in batches, and
count what happened. Every recipient ends queued or rejected with a reason; nothing is dropped quietly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chalicelib import log
from chalicelib.campaign_stats import CampaignStats
from chalicelib.config import Settings
from chalicelib.contract import (
    PrecompileRequest,
    QueuedEmail,
    RejectedRecipient,
    envelope_ids,
    parse_precompile_message,
)
from chalicelib.enqueuer import Enqueuer, Outgoing
from chalicelib.errors import MessageInvalid, RenderFailed, TemplateInvalid
from chalicelib.payloads import PayloadStore
from chalicelib.renderer import TemplateCache, template_variables
from chalicelib.routing import queue_for
from chalicelib.tenant_queues import TenantQueues
from chalicelib.tenants import TenantRegistry


@dataclass
class PrecompileResult:
    user_id: str | None
    campaign_id: str | None
    queue: str | None = None
    queued: int = 0
    rejected: list[RejectedRecipient] = field(default_factory=list)


class Precompiler:
    def __init__(
        self,
        settings: Settings,
        templates: TemplateCache,
        tenants: TenantRegistry,
        queues: TenantQueues,
        enqueuer: Enqueuer,
        stats: CampaignStats,
        payloads: PayloadStore | None = None,
    ) -> None:
        self._settings = settings
        self._templates = templates
        self._tenants = tenants
        self._queues = queues
        self._enqueuer = enqueuer
        self._stats = stats
        self._payloads = payloads

    def handle(self, raw: str) -> PrecompileResult:
        try:
            request = parse_precompile_message(raw)
        except MessageInvalid as exc:
            return self._reject_message(raw, exc)
        return self._precompile(request)

    def _reject_message(self, raw: str, exc: MessageInvalid) -> PrecompileResult:
        user_id, campaign_id = envelope_ids(raw)
        reason = str(exc)
        log.warning("message rejected", user=user_id, campaign=campaign_id, reason=reason)
        if user_id and campaign_id:
            self._stats.add(user_id, campaign_id, rejected=1, error=reason)
        return PrecompileResult(user_id, campaign_id, rejected=[RejectedRecipient(None, reason)])

    def _precompile(self, req: PrecompileRequest) -> PrecompileResult:
        result = PrecompileResult(req.user_id, req.campaign.id, rejected=list(req.rejected))
        self._tenants.remember(req.user_id, req.plan, req.sender)
        try:
            compiled = self._templates.get(
                req.campaign.id, req.campaign.subject, req.campaign.body, strict=req.campaign.strict
            )
        except TemplateInvalid as exc:
            reason = f"template: {exc}"
            result.rejected.extend(RejectedRecipient(r.email, reason) for r in req.recipients)
            log.warning(
                "template invalid",
                user=req.user_id,
                campaign=req.campaign.id,
                reason=reason,
                recipients=len(req.recipients),
            )
            return self._finish(req, result)

        outgoing: list[Outgoing] = []
        public_sender = req.sender.public_dict()
        for r in req.recipients:
            try:
                rendered = compiled.render(template_variables(r.email, r.metadata, req.campaign.id))
            except RenderFailed as exc:
                result.rejected.append(RejectedRecipient(r.email, f"render: {exc}"))
                continue
            email = QueuedEmail(
                user_id=req.user_id,
                plan=req.plan,
                sender=public_sender,
                campaign_id=req.campaign.id,
                subject=rendered.subject,
                body=rendered.body,
                recipient_email=r.email,
            )
            body = email.to_json()
            if self._payloads is not None:
                body = self._payloads.wrap(req.user_id, req.campaign.id, body)
            outgoing.append(Outgoing(key=r.email, body=body))

        if outgoing:
            queue = queue_for(self._settings.resources, req.user_id, req.plan)
            url = self._queues.ensure(queue, req.user_id)
            failures = self._enqueuer.send(url, outgoing)
            result.queue = queue
            result.queued = len(outgoing) - len(failures)
            result.rejected.extend(RejectedRecipient(f.key, f"enqueue: {f.reason}") for f in failures)
        return self._finish(req, result)

    def _finish(self, req: PrecompileRequest, result: PrecompileResult) -> PrecompileResult:
        for r in result.rejected:
            log.info(
                "recipient rejected",
                user=req.user_id,
                campaign=req.campaign.id,
                recipient=r.email,
                reason=r.reason,
            )
        self._stats.add(
            req.user_id,
            req.campaign.id,
            queued=result.queued,
            rejected=len(result.rejected),
            error=result.rejected[-1].reason if result.rejected else None,
        )
        log.info(
            "precompiled",
            user=req.user_id,
            campaign=req.campaign.id,
            queue=result.queue,
            queued=result.queued,
            rejected=len(result.rejected),
        )
        return result
