"""The console's way to send without code (chalicelib.control.campaign_sends, as the API's routes call it):

- `/console/send`: upload a file of recipients (the page's script POSTs it straight to S3 with the upload's
  presigned form, with its progress shown), and the tenant's recent uploads;
- `/console/uploads/{id}`: the upload's report as it is read (its live part refreshed until it is), its
  refused rows to download, the address column named again for a file refused; once read, the campaign
  written beside its preview (rendered as precompile renders it, in a sandboxed frame), a test to the
  person signed in, and a review of what will be sent (recipients, suppressed, when, from) before the send;
- the send itself, which lands on the campaign's page watching it go.

Every change is a signed form (origin and CSRF checked, the role of sender at least). The send carries the key
the compose page was given as its Idempotency-Key: a double click, or a reload of the review, makes one
campaign.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import urllib.parse
from datetime import datetime, timedelta
from typing import Any

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.console_http import (
    FORMS,
    base_path,
    page,
    redirect,
    refused,
    signed_form,
    signed_in,
)
from chalicelib.api.principal import Role
from chalicelib.console.sessions import Session
from chalicelib.core.errors import NotFound, Refused

# A compose form carries a subject and body of up to 128 KiB, percent-encoded (three bytes a byte at most).
MAX_COMPOSE_BYTES = 3 * 128 * 1024 + 8192
COMPOSED = ("subject", "body", "from", "at", "tz", "row", "request")
RECENT = 10


def _path(request: Request, rest: str = "") -> str:
    return f"{base_path(request)}/console{rest}"


def _send_page(request: Request, session: Session, status: int = 200, problem: str | None = None) -> Response:
    c = wiring.container()
    uploads = c.campaign_sends.list_uploads(session.tenant_id)["uploads"][:RECENT]
    return page(
        request,
        "send.html",
        status,
        session,
        connect=(c.upload_files.upload_origin(),),
        title="Send a campaign",
        active="send",
        uploads=uploads,
        sender=session.role >= Role.SENDER,
        problem=problem,
    )


def _new_upload(request: Request) -> Response:
    """The upload the page's script asked for, and its presigned form, as JSON (the script POSTs the file)."""

    def act(session: Session, fields: dict[str, str]) -> Response:
        given = {k: fields[k] for k in ("format", "filename", "addressColumn") if fields.get(k)}
        try:
            made = wiring.container().campaign_sends.new_upload(session.tenant_id, given)
        except Refused as why:
            return answers.refusal(why)
        read = _path(request, f"/uploads/{urllib.parse.quote(made['id'], safe='')}")
        return answers.ok({"id": made["id"], "form": made["form"], "page": read}, 201)

    return signed_form(request, Role.SENDER, "upload recipients", act)


def _read(request: Request, upload_id: str) -> Response:
    def act(session: Session, fields: dict[str, str]) -> Response:
        column = {"addressColumn": fields["addressColumn"].strip()} if fields.get("addressColumn", "").strip() else {}
        try:
            wiring.container().campaign_sends.read_upload(session.tenant_id, upload_id, column)
        except NotFound:
            return refused(
                request, 404, "Not found", "No such upload of this tenant (uploads are kept 30 days).", session
            )
        except Refused as why:
            return _upload_page(request, session, upload_id, answers.status_of(why), problem=why.detail)
        return redirect(_path(request, f"/uploads/{urllib.parse.quote(upload_id, safe='')}"))

    return signed_form(request, Role.SENDER, "read uploads", act)


def _upload_page(
    request: Request, session: Session, upload_id: str, status: int = 200, *, part: bool = False, **shown: Any
) -> Response:
    c = wiring.container()
    try:
        upload = c.campaign_sends.show_upload(session.tenant_id, upload_id)
    except NotFound:
        return refused(request, 404, "Not found", "No such upload of this tenant (uploads are kept 30 days).", session)
    here = _path(request, f"/uploads/{urllib.parse.quote(upload_id, safe='')}")
    tenant = c.tenant_view.get_for(session.tenant_id)
    composed = {k: "" for k in COMPOSED} | {"row": "1", "request": secrets.token_urlsafe(16)}
    composed |= shown.pop("composed", {})
    return page(
        request,
        "_upload_state.html" if part else "upload.html",
        status,
        session,
        title=f"Upload {upload['filename']}",
        active="send",
        upload=upload,
        here=here,
        refresh=f"{here}?part=state" if upload["state"] in ("waiting", "reading") else None,
        addresses=tenant["fromAddresses"] or ([tenant["sender"]["emailAddress"]] if tenant["sender"] else []),
        default_from=tenant["sender"]["emailAddress"] if tenant["sender"] else "",
        from_name=tenant["sender"]["fromName"] if tenant["sender"] else "",
        sender=session.role >= Role.SENDER,
        person=session.person,
        composed=composed,
        **{"problem": None, "notice": None, "preview": None, **shown},
    )


def _compose(request: Request, upload_id: str) -> Response:
    """The compose form's three buttons: preview beside the form, a test to the person signed in, or the
    review of what will be sent."""

    def act(session: Session, fields: dict[str, str]) -> Response:
        composed = {k: fields.get(k, "") for k in COMPOSED}
        given = _given(upload_id, composed)
        sends = wiring.container().campaign_sends
        action = fields.get("do", "preview")
        try:
            if action == "test":
                return _test(request, session, upload_id, composed, given)
            if action == "review":
                return _review(request, session, upload_id, composed, given)
            preview = sends.preview(session.tenant_id, {**given, "row": _row(composed)})
        except NotFound:
            return refused(
                request, 404, "Not found", "No such upload of this tenant (uploads are kept 30 days).", session
            )
        except Refused as why:
            return _upload_page(
                request, session, upload_id, answers.status_of(why), problem=why.detail, composed=composed
            )
        return _upload_page(request, session, upload_id, composed=composed, preview=preview)

    return signed_form(request, Role.SENDER, "send campaigns", act, MAX_COMPOSE_BYTES)


def _test(
    request: Request, session: Session, upload_id: str, composed: dict[str, str], given: dict[str, Any]
) -> Response:
    if session.person is None:
        detail = "A test goes to the person signed in: sign in with your address (a sign-in link), not the API key."
        return _upload_page(request, session, upload_id, 409, problem=detail, composed=composed)
    asked = {**given, "to": session.person, "row": _row(composed)}
    # The same composition tested again is the same test (a double click sends one); a changed one, a new one.
    key = hashlib.sha256(json.dumps([composed["request"], asked], sort_keys=True).encode()).hexdigest()
    done = wiring.container().campaign_sends.test(session.tenant_id, asked, key)
    notice = f"A test is on its way to {session.person} ({done['id']}): a campaign of its own, not counted in this one."
    return _upload_page(request, session, upload_id, composed=composed, notice=notice)


def _review(
    request: Request, session: Session, upload_id: str, composed: dict[str, str], given: dict[str, Any]
) -> Response:
    sends = wiring.container().campaign_sends
    preview = sends.preview(session.tenant_id, {**given, "row": _row(composed)})
    if preview["error"]:
        return _upload_page(
            request, session, upload_id, 400, problem=preview["error"], composed=composed, preview=preview
        )
    upload = sends.show_upload(session.tenant_id, upload_id)
    return page(
        request,
        "review.html",
        200,
        session,
        title="Review and send",
        active="send",
        upload=upload,
        composed=composed,
        given=given,
        preview=preview,
        problem=None,
        here=_path(request, f"/uploads/{urllib.parse.quote(upload_id, safe='')}"),
    )


def _send(request: Request, upload_id: str) -> Response:
    def act(session: Session, fields: dict[str, str]) -> Response:
        composed = {k: fields.get(k, "") for k in COMPOSED}
        sends = wiring.container().campaign_sends
        try:
            done = sends.create(session.tenant_id, _given(upload_id, composed), composed["request"] or None)
        except Refused as why:
            return _upload_page(
                request, session, upload_id, answers.status_of(why), problem=why.detail, composed=composed
            )
        return redirect(_path(request, f"/campaigns/{urllib.parse.quote(done['id'], safe='')}"))

    return signed_form(request, Role.SENDER, "send campaigns", act, MAX_COMPOSE_BYTES)


def _given(upload_id: str, composed: dict[str, str]) -> dict[str, Any]:
    """What POST /campaigns takes, from the compose form's fields."""
    given: dict[str, Any] = {"subject": composed["subject"], "body": composed["body"], "uploadId": upload_id}
    if composed["from"]:
        given["from"] = {"emailAddress": composed["from"]}
    at = _instant(composed["at"], composed["tz"])
    if at:
        given["scheduledAt"] = at
    return given


def _instant(local: str, offset_minutes: str) -> str | None:
    """`2026-12-01T09:00` in the browser's zone (its offset east of UTC, in minutes, as the page's script
    gives it; UTC without the script) as ISO 8601 with its offset; None when no time was given."""
    if not local.strip():
        return None
    try:
        at = datetime.fromisoformat(local.strip())
        minutes = int(offset_minutes or 0)
    except ValueError:
        return local.strip()  # the contract's parser names what is wrong with it
    if at.tzinfo is not None or not -24 * 60 < minutes < 24 * 60:
        return local.strip()
    return at.isoformat() + _offset(timedelta(minutes=minutes))


def _offset(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _row(composed: dict[str, str]) -> int:
    """The form's recipient number (from 1, as a person counts) as the preview's row (from 0)."""
    try:
        return max(0, int(composed.get("row") or 1) - 1)
    except ValueError:
        return 0


def routes() -> Blueprint:
    """A fresh blueprint of the send pages (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/console/send", methods=["GET"])
    def console_send() -> Response:
        request = bp.current_request
        return signed_in(request, lambda session: _send_page(request, session))

    @bp.route("/console/uploads", methods=["POST"], content_types=FORMS)
    def console_new_upload() -> Response:
        return _new_upload(bp.current_request)

    @bp.route("/console/uploads/{upload_id}", methods=["GET"])
    def console_upload(upload_id: str) -> Response:
        request = bp.current_request
        query: dict[str, str] = dict(request.query_params or {})
        part = query.get("part") == "state"
        return signed_in(request, lambda session: _upload_page(request, session, upload_id, part=part))

    @bp.route("/console/uploads/{upload_id}/read", methods=["POST"], content_types=FORMS)
    def console_read_upload(upload_id: str) -> Response:
        return _read(bp.current_request, upload_id)

    @bp.route("/console/uploads/{upload_id}/compose", methods=["POST"], content_types=FORMS)
    def console_compose(upload_id: str) -> Response:
        return _compose(bp.current_request, upload_id)

    @bp.route("/console/uploads/{upload_id}/send", methods=["POST"], content_types=FORMS)
    def console_send_upload(upload_id: str) -> Response:
        return _send(bp.current_request, upload_id)

    return bp
