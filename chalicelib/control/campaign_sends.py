"""Sending without code: recipients uploaded and read, a campaign composed, previewed and sent, as the API's
routes (chalicelib.api.uploads, chalicelib.api.campaigns) and the console ask for them.

    POST /uploads                    {"format": "csv"|"jsonl", "filename": "...", "addressColumn": "..."}
                                     -> the upload, and the presigned form to POST the file to (S3)
    POST /uploads/{id}/read          the file is there: read it (in the background; 202)
    GET  /uploads/{id}               its state and report (rows, recipients, duplicates, refused, suppressed)
    GET  /uploads                    the tenant's uploads still kept (30 days)
    POST /campaigns/preview          {"subject", "body", "uploadId"?, "row"?, "recipient"?} -> rendered
    POST /campaigns                  {"subject", "body", "from"?, "scheduledAt"?, "uploadId" | "recipients"}
                                     with an Idempotency-Key header -> the campaign (201), published by
                                     upload_jobs (chalicelib.produce.fanout)

A campaign's message is checked by the contract's own parser (chalicelib.core.message_parser) and its
templates compiled by precompile's renderer before anything is kept: what the API accepts, precompile
takes. The campaign's id is the server's; the request's Idempotency-Key (kept REQUEST_KEPT_S) answers a
retried request with the campaign it made, never a second one.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.core.contract import MAX_RECIPIENTS_PER_MESSAGE, RejectedRecipient, iso_ms
from chalicelib.core.errors import (
    Conflict,
    FieldError,
    Invalid,
    MessageInvalid,
    NotFound,
    RenderFailed,
    TemplateInvalid,
    Unprocessable,
)
from chalicelib.core.fields import is_email, is_id, lone_surrogate
from chalicelib.core.message_parser import check_recipient, parse_precompile_message
from chalicelib.ingest.renderer import CompiledCampaign, template_variables
from chalicelib.produce.fanout import MAX_ENVELOPE_BYTES, send_event
from chalicelib.produce.reading import address_digest, recipient_lines
from chalicelib.produce.rows import FORMATS
from chalicelib.stores.campaign_stats import COUNTERS
from chalicelib.stores.daily_cap import DailyCap
from chalicelib.stores.ports.tenants import Tenant
from chalicelib.stores.upload_files import (
    CONTENT_TYPES,
    RECIPIENTS,
    REFUSED_ROWS,
    UPLOAD_LINK_S,
    UploadFiles,
)
from chalicelib.stores.uploads import PUBLISHING, READ, REQUEST_KEPT_S, WAITING, Send, Upload, Uploads

MAX_KEY_CHARS = 255
PREVIEW_WINDOW = 1024 * 1024
# A publication not heard of for this long is started again when its request is repeated (its
# invocations failed every retry); one that is making progress is left alone.
RESTART_AFTER_S = 120


class KeyReused(Unprocessable):
    """An Idempotency-Key given again with a different request (422, as the IETF's draft has it)."""


@dataclass(frozen=True)
class TenantFacts:
    """What a campaign is checked against of its tenant: its registered Sender, whether an address is one of
    its people (a test goes only to them), and the free plan's daily cap with the tenant's use of today's."""

    tenant: Callable[[str], Tenant | None]
    is_person: Callable[[str, str], bool]
    daily_cap: DailyCap


class CampaignSends:
    def __init__(
        self,
        uploads: Uploads,
        files: UploadFiles,
        facts: TenantFacts,
        start_job: Callable[[dict[str, Any]], None],
        reads: Callable[[str, str, Mapping[str, str] | None], dict[str, Any]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._reads = reads
        self._uploads = uploads
        self._files = files
        self._tenants = facts.tenant
        self._is_person = facts.is_person
        self._daily_cap = facts.daily_cap
        self._start_job = start_job  # upload_jobs invoked asynchronously with this event
        self._clock = clock

    # --- uploads -------------------------------------------------------------------------------------
    def new_upload(self, user: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
        g = given or {}
        kind = g.get("format", "csv")
        if kind not in FORMATS:
            raise Invalid(f"format: one of {', '.join(FORMATS)}")
        content_type = _text(g, "contentType", 100) or CONTENT_TYPES[kind][0]
        if content_type not in CONTENT_TYPES[kind]:
            raise Invalid(f"contentType: for {kind}, one of {', '.join(CONTENT_TYPES[kind])}")
        filename = _text(g, "filename", 200) or f"recipients.{kind}"
        column = _text(g, "addressColumn", 200)
        now = self._clock()
        upload = Upload(user, "up_" + secrets.token_urlsafe(12), WAITING, kind, filename, column, now, now)
        self._uploads.add(upload)
        form = self._files.upload_form(user, upload.upload_id, content_type)
        return {
            **self._upload_json(upload),
            "form": {
                **form,
                "method": "POST",
                "fileField": "file",
                "maxBytes": self._files.max_bytes,
                "expiresAt": iso_ms(int((now + UPLOAD_LINK_S) * 1000)),
            },
        }

    def read_upload(self, user: str, upload_id: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """Read the uploaded file (again, with another address column, once it was refused)."""
        upload = self._upload(user, upload_id)
        column = _text(given or {}, "addressColumn", 200)
        if not self._uploads.start_reading(upload, column, self._clock()):
            raise Conflict(f"upload {upload_id} is {upload.state}: it is read once", state=upload.state)
        self._start_job({"job": "read", "userId": user, "uploadId": upload_id})
        return self._upload_json(self._upload(user, upload_id))

    def show_upload(self, user: str, upload_id: str) -> dict[str, Any]:
        return self._upload_json(self._upload(user, upload_id))

    def list_uploads(self, user: str) -> dict[str, Any]:
        return {"uploads": [self._upload_json(u, links=False) for u in self._uploads.uploads(user)]}

    def _upload(self, user: str, upload_id: str) -> Upload:
        upload = self._uploads.upload(user, upload_id) if is_id(upload_id) else None
        if upload is None or self._clock() > upload.expires_at:
            raise NotFound()
        return upload

    def _upload_json(self, u: Upload, *, links: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": u.upload_id,
            "state": u.state,
            "format": u.format,
            "filename": u.filename,
            "addressColumn": (u.report or {}).get("addressColumn", u.address_column),
            "createdAt": iso_ms(int(u.created_at * 1000)),
            "keptUntil": iso_ms(int(u.expires_at * 1000)),
            "report": u.report,
            "problem": u.problem,
        }
        if links and u.report and u.report.get("refused"):
            key = self._files.key(u.user_id, u.upload_id, REFUSED_ROWS)
            d["refusedRowsUrl"] = self._files.link(key, f"{u.upload_id}-refused.csv")
        return d

    # --- preview -------------------------------------------------------------------------------------
    def preview(self, user: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """The subject and body rendered for one recipient as precompile renders them; a template's error
        with its line and column (`error`) rather than a refusal, for a page that previews as one types."""
        g = given or {}
        subject, body = _text(g, "subject", 2048) or "", _text(g, "body", 256 * 1024) or ""
        strict = g.get("strict", False)
        if not isinstance(strict, bool):
            raise Invalid("strict: true or false")
        recipient = self._preview_recipient(user, g)
        try:
            compiled = CompiledCampaign("preview", subject, body, strict=strict)
            extra = {"unsubscribe_url": "https://unsubscribe.invalid/preview"}
            rendered = compiled.render(
                template_variables(recipient["email"], recipient.get("metadata") or {}, "preview", extra)
            )
        except (TemplateInvalid, RenderFailed) as exc:
            return {"recipient": recipient, "subject": None, "html": None, "error": str(exc)}
        return {"recipient": recipient, "subject": rendered.subject, "html": rendered.body, "error": None}

    def _preview_recipient(self, user: str, g: Mapping[str, Any]) -> dict[str, Any]:
        if "recipient" in g:
            checked = check_recipient(g["recipient"], "recipient")
            if isinstance(checked, RejectedRecipient):
                raise Invalid(checked.reason)
            return {"email": checked.email, "metadata": checked.metadata}
        upload_id = _text(g, "uploadId", 200)
        if upload_id is None:
            return {"email": "ann@example.org", "metadata": {}}
        upload = self._read_upload(user, upload_id)
        row = g.get("row", 0)
        if isinstance(row, bool) or not isinstance(row, int) or row < 0:
            raise Invalid("row: a whole number from 0")
        key = self._files.key(user, upload.upload_id, RECIPIENTS)
        stored = self._files.stored(key)
        window = next(self._files.chunks(key, stored, 0, PREVIEW_WINDOW), b"") if stored else b""
        found = recipient_lines(window[: window.rfind(b"\n") + 1])
        if row >= len(found):
            raise Invalid(f"row: the preview reaches the upload's first {len(found):,} recipients")
        return dict(found[row])

    # --- the campaign ---------------------------------------------------------------------------------
    def show(self, user: str, campaign_id: str, query: Mapping[str, str] | None) -> dict[str, Any]:
        """The campaign as GET /campaigns/{id} shows it, with its publication when moonsend publishes it: a
        campaign none of whose messages precompile has taken yet is shown from its publication alone."""
        send = self._uploads.send(user, campaign_id) if is_id(campaign_id) else None
        try:
            shown = self._reads(user, campaign_id, query)
        except NotFound:
            if send is None:
                raise
            shown = _publishing_only(send)
        if send is not None:
            shown["publication"] = send_json(send)["publication"]
            _awaiting(shown, send)
        return shown

    def test(self, user: str, given: Mapping[str, Any] | None, idempotency_key: str | None) -> dict[str, Any]:
        """One email of the campaign as composed, to one of the tenant's own people (`to`), with the metadata of
        the upload's `row` when an upload is named: a campaign of its own (`test-...`), so that the campaign's
        counts never include it; on the free plan it counts against the day's cap as any email does."""
        g = dict(given or {})
        to = g.get("to")
        if not is_email(to) or not self._is_person(user, str(to).lower()):
            raise Invalid("to: one of the tenant's people (a test goes only to its own people)")
        metadata: dict[str, Any] = {}
        if g.get("uploadId") is not None:
            metadata = dict(self._preview_recipient(user, g).get("metadata") or {})
        compose = {k: v for k, v in g.items() if k not in ("to", "uploadId", "row", "recipients")}
        return self.create(
            user, {**compose, "recipients": [{"email": to, "metadata": metadata}]}, idempotency_key, test=True
        )

    def publish_again(self, user: str, campaign_id: str) -> None:
        """Start upload_jobs again on a publication a pause stopped (a resume's); nothing for any other."""
        send = self._uploads.send(user, campaign_id) if is_id(campaign_id) else None
        if send is not None and send.state == PUBLISHING:
            self._start_job(send_event(user, campaign_id))

    # --- send ----------------------------------------------------------------------------------------
    def create(
        self, user: str, given: Mapping[str, Any] | None, idempotency_key: str | None, *, test: bool = False
    ) -> dict[str, Any]:
        """The campaign the request makes (or made, asked again with the same key), its publication started."""
        key = _idempotency_key(idempotency_key)
        g = dict(given or {})
        fingerprint = hashlib.sha256(json.dumps(g, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        taken = self._uploads.request(user, key)
        if taken is not None:
            return self._again(user, g, fingerprint, taken)
        envelope, upload_id, total, inline = self._checked(user, g)
        campaign_id = _campaign_id(self._clock(), "test-" if test else "c")
        if not self._uploads.claim_request(user, key, fingerprint, campaign_id, self._clock()):
            taken = self._uploads.request(user, key)
            if taken is None:
                raise Conflict("the request's Idempotency-Key changed hands while it was taken: send it again")
            return self._again(user, g, fingerprint, taken)
        return self._start(user, campaign_id, envelope, upload_id, total, inline)

    def _again(self, user: str, g: dict[str, Any], fingerprint: str, taken: tuple[str, str]) -> dict[str, Any]:
        """A request whose key was taken: the same request answers its campaign (finishing what a crash left
        undone); another request with the key is refused."""
        if taken[0] != fingerprint:
            raise KeyReused(
                f"this Idempotency-Key was used for another request in the last {REQUEST_KEPT_S // 3600} hours; "
                "use a new key for a new campaign",
                campaign=taken[1],
            )
        send = self._uploads.send(user, taken[1])
        if send is None:  # the first try stopped between taking the key and recording the campaign
            envelope, upload_id, total, inline = self._checked(user, g)
            return self._start(user, taken[1], envelope, upload_id, total, inline)
        if send.state == PUBLISHING and (send.step == 0 or self._clock() - send.updated_at > RESTART_AFTER_S):
            # Not begun (the first try may have stopped before it started upload_jobs), or not heard of: started
            # again. Two at once publish at most one message twice, which precompile's ledger takes once.
            self._start_job(send_event(user, send.campaign_id))
        return send_json(send)

    def _start(
        self,
        user: str,
        campaign_id: str,
        envelope: dict[str, Any],
        upload_id: str,
        total: int,
        inline: list[dict[str, Any]] | None,
    ) -> dict[str, Any]:
        envelope["campaign"]["id"] = campaign_id
        if inline is not None:
            upload_id = f"in_{campaign_id}"
            body = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in inline)
            self._files.keep(self._files.key(user, upload_id, RECIPIENTS), body.encode("utf-8"), "application/jsonl")
        now = self._clock()
        send = Send(user, campaign_id, upload_id, PUBLISHING, envelope, 0, 0, total, 0, now, now)
        self._uploads.start_send(send)
        self._start_job(send_event(user, campaign_id))
        stored = self._uploads.send(user, campaign_id)
        return send_json(stored or send)

    def _checked(self, user: str, g: dict[str, Any]) -> tuple[dict[str, Any], str, int, list[dict[str, Any]] | None]:
        """The campaign's message without recipients, where its recipients are, how many, and the inline ones."""
        tenant = self._tenants(user)
        if tenant is None:
            raise Conflict(
                "no Sender is registered for this tenant yet: its first message to PrecompileEmail registers "
                "one, or an operator gives it a From address (moonsend tenant assign-from)"
            )
        envelope = self._envelope(tenant, g)
        if ("uploadId" in g) == ("recipients" in g):
            raise Invalid("give uploadId or recipients, one of them")
        inline: list[dict[str, Any]] | None = None
        suppressed = 0
        if "uploadId" in g:
            upload = self._read_upload(user, str(g["uploadId"]))
            report = upload.report or {}
            upload_id, total = upload.upload_id, int(report.get("recipients", 0))
            suppressed = int(report.get("suppressed", 0))  # recorded suppressed, never queued: not the cap's
            if total == 0:
                raise Conflict(f"upload {upload_id} has no recipients to send to")
        else:
            inline = _inline(g["recipients"])
            upload_id, total = "", len(inline)
        self._within_cap(user, envelope["userPlan"], total - suppressed)
        return envelope, upload_id, total, inline

    def _envelope(self, tenant: Tenant, g: dict[str, Any]) -> dict[str, Any]:
        registered = tenant.sender
        given_from = g.get("from") or {}
        if not isinstance(given_from, dict):
            raise Invalid('from: an object ({"emailAddress": ..., "fromName": ...})')
        address = given_from.get("emailAddress") or registered.email_address
        allowed = {registered.email_address.lower(), *(a.lower() for a in tenant.from_addresses)}
        if not isinstance(address, str) or address.lower() not in allowed:
            raise Invalid(f"from.emailAddress: one of the tenant's addresses ({', '.join(sorted(allowed))})")
        paid = tenant.plan == "paid" and tenant.current_keys is not None
        sender: dict[str, Any] = {
            "emailAddress": address,
            "fromName": given_from.get("fromName", registered.from_name),
            "ratePerSecond": registered.rate_per_second,
        }
        if registered.region:
            sender["region"] = registered.region
        if paid and tenant.current_keys is not None:
            sender["keyVersion"] = tenant.current_keys.version
        campaign: dict[str, Any] = {"id": "pending", "subject": g.get("subject"), "body": g.get("body")}
        for name in ("scheduledAt", "expiresAfter", "strict", "tracking"):
            if g.get(name) is not None:
                campaign[name] = g[name]
        envelope = {
            "userId": tenant.user_id,
            "userPlan": "paid" if paid else "free",
            "sender": sender,
            "campaign": campaign,
        }
        _check_envelope(envelope)
        return envelope

    def _within_cap(self, user: str, plan: str, total: int) -> None:
        cap = self._daily_cap.cap
        if plan != "free" or not cap:
            return
        used = self._daily_cap.used(user)
        if total > cap - used:
            raise Conflict(
                f"{total:,} recipients, but the free plan's daily cap of {cap:,} emails leaves {max(cap - used, 0):,} "
                "for today (UTC): nothing was sent; send fewer, or again tomorrow",
                recipients=total,
                dailyCap=cap,
                usedToday=used,
            )

    def _read_upload(self, user: str, upload_id: str) -> Upload:
        upload = self._upload(user, upload_id)
        if upload.state != READ:
            raise Conflict(f"upload {upload_id} is {upload.state}, not read: POST /uploads/{upload_id}/read first")
        return upload


def send_json(send: Send) -> dict[str, Any]:
    """A campaign's publication as the API shows it."""
    e = send.envelope
    return {
        "id": send.campaign_id,
        "subject": e["campaign"].get("subject"),
        "from": {"emailAddress": e["sender"]["emailAddress"], "fromName": e["sender"].get("fromName", "")},
        "scheduledAt": e["campaign"].get("scheduledAt"),
        "uploadId": None if send.upload_id.startswith("in_") else send.upload_id,
        "publication": {
            "state": send.state,
            "recipients": send.total,
            "published": send.published,
            "startedAt": iso_ms(int(send.created_at * 1000)),
            "updatedAt": iso_ms(int(send.updated_at * 1000)),
        },
    }


def _awaiting(shown: dict[str, Any], send: Send) -> None:
    """A campaign moonsend publishes is not done before every recipient it publishes has an outcome: while
    some are still being published, or not yet taken by precompile, it is sending, and its progress counts
    them all (the ledger records each one, sent or not)."""
    progress = shown["progress"]
    waiting = send.state == PUBLISHING or progress["accepted"] < send.total
    if not waiting or shown["state"] in ("cancelled", "paused"):
        return
    accepted = max(progress["accepted"], send.total)
    fraction = round(progress["final"] / accepted, 4) if accepted else None
    shown["progress"] = {**progress, "accepted": accepted, "fraction": fraction, "acceptedMayGrow": True}
    if shown["state"] == "done":
        shown["state"] = "sending"


def _publishing_only(send: Send) -> dict[str, Any]:
    """A campaign as listed, before precompile has taken any of its messages: nothing counted yet."""
    e = send.envelope
    return {
        "id": send.campaign_id,
        "subject": e["campaign"].get("subject"),
        "plan": e["userPlan"],
        "sender": {
            "emailAddress": e["sender"]["emailAddress"],
            "fromName": e["sender"].get("fromName", ""),
            "region": e["sender"].get("region"),
        },
        "ratePerSecond": e["sender"].get("ratePerSecond"),
        "createdAt": iso_ms(int(send.created_at * 1000)),
        "scheduledAt": e["campaign"].get("scheduledAt"),
        "state": "publishing",
        "counts": dict.fromkeys(COUNTERS, 0),
        "progress": {"final": 0, "accepted": 0, "fraction": None, "acceptedMayGrow": True},
        "achievedRatePerSecond": None,
        "lastError": None,
        "timeline": {"resolution": "minute", "minutes": [], "busiestSecond": None, "next": None},
    }


def _check_envelope(envelope: dict[str, Any]) -> None:
    """The message as precompile will parse it (one stand-in recipient), and its templates as it compiles them."""
    size = len(json.dumps(envelope, ensure_ascii=False).encode("utf-8"))
    if size > MAX_ENVELOPE_BYTES:
        raise Invalid(f"subject and body: {size:,} bytes; a campaign sent from moonsend takes {MAX_ENVELOPE_BYTES:,}")
    probe = {**envelope, "recipient": {"email": "probe@example.org"}}
    if "keyVersion" in envelope["sender"]:
        probe["sender"] = {**envelope["sender"], "keyProof": "checked-by-precompile"}
    try:
        request = parse_precompile_message(probe)
    except MessageInvalid as exc:
        raise Invalid("; ".join(_shown(e) for e in exc.errors)) from None
    c = request.campaign
    try:
        CompiledCampaign(c.id, c.subject, c.body, strict=c.strict)
    except TemplateInvalid as exc:
        raise Invalid(f"template: {exc}") from None


def _shown(error: FieldError) -> str:
    """A contract field's error in the API's words (`campaign.subject` is the request's `subject`)."""
    field = error.path.removeprefix("campaign.").replace("sender.emailAddress", "from.emailAddress")
    return f"{field.replace('sender.fromName', 'from.fromName')}: {error.reason}"


def _inline(given: object) -> list[dict[str, Any]]:
    if not isinstance(given, list) or not given:
        raise Invalid("recipients: a non-empty list")
    if len(given) > MAX_RECIPIENTS_PER_MESSAGE:
        raise Invalid(f"recipients: at most {MAX_RECIPIENTS_PER_MESSAGE:,} inline; upload more (POST /uploads)")
    out, seen, errors = [], set(), []
    for n, r in enumerate(given):
        if lone_surrogate(r, f"recipients[{n}]") is not None:
            errors.append(f"recipients[{n}]: not valid Unicode (a lone UTF-16 surrogate)")
            continue
        checked = check_recipient(r, f"recipients[{n}]")
        if isinstance(checked, RejectedRecipient):
            errors.append(checked.reason)
            continue
        digest = address_digest(checked.email)
        if digest not in seen:
            seen.add(digest)
            out.append({"email": checked.email, **({"metadata": checked.metadata} if checked.metadata else {})})
    if errors:
        shown = "; ".join(errors[:5])
        raise Invalid(f"{len(errors)} recipient(s) refused: {shown}{'; ...' if len(errors) > 5 else ''}")
    return out


def _idempotency_key(given: str | None) -> str:
    if not given:
        raise Invalid("Idempotency-Key: required (a new random value for each new campaign, the same for a retry)")
    if len(given) > MAX_KEY_CHARS or not given.isascii() or not given.isprintable():
        raise Invalid(f"Idempotency-Key: at most {MAX_KEY_CHARS} printable ASCII characters")
    return hashlib.sha256(given.encode("ascii")).hexdigest()


def _campaign_id(now: float, kind: str = "c") -> str:
    """The server's id for a new campaign (`c...`) or test (`test-...`): its UTC time, for order, and
    randomness, for uniqueness."""
    return kind + time.strftime("%Y%m%d-%H%M%S-", time.gmtime(now)) + secrets.token_hex(4)


def _text(g: Mapping[str, Any], name: str, most: int) -> str | None:
    """An optional string field: None when not given (or empty); Invalid when given as anything else."""
    if name not in g:
        return None
    value = g[name]
    if not isinstance(value, str) or len(value) > most:
        raise Invalid(f"{name}: a string of at most {most:,} characters")
    return value or None
