"""The console's digests pages: the tenant's digests as `GET /digests` lists them (each with its schedule,
last and next run), and a digest's status as `GET /digests/{id}` answers it (what its last run did, and
whom and how much its next run would mail); senders and admins run one now, as `POST /digests/{id}/run`
does: at most one run asked for every few minutes, the page says when to ask again.
"""

from __future__ import annotations

import urllib.parse

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.console_http import (
    FORMS,
    base_path,
    page,
    read_notice,
    redirect,
    refused,
    signed_form,
    signed_in,
    signed_notice,
)
from chalicelib.api.principal import Role
from chalicelib.console.sessions import Session
from chalicelib.core.errors import Busy, NotFound, Refused

PAGE = 50
SAID = ("done", "period", "campaign")  # what a run's redirect says, in this order
NO_DIGEST = "This tenant has no such digest."


def _digest_path(digest_id: str) -> str:
    return f"/console/digests/{urllib.parse.quote(digest_id, safe='')}"


def _list(request: Request, session: Session) -> Response:
    given: dict[str, str] = dict(request.query_params or {})
    query = {"limit": str(PAGE), **({"after": given["after"]} if given.get("after") else {})}
    try:
        listed = wiring.container().tenant_api.digests(session.tenant_id, query)
    except Refused as why:
        return refused(request, answers.status_of(why), "That cannot be shown", why.detail, session)
    later = None
    if listed["next"]:
        later = f"{base_path(request)}/console/digests?{urllib.parse.urlencode({'after': listed['next']})}"
    return page(
        request,
        "digests.html",
        session=session,
        title="Digests",
        active="digests",
        digests=listed["digests"],
        later=later,
        read_on=bool(given.get("after")),
    )


def _digest(
    request: Request, session: Session, digest_id: str, status: int = 200, problem: str | None = None
) -> Response:
    try:
        shown = wiring.container().tenant_api.digest_status(session.tenant_id, digest_id)
    except NotFound:
        return refused(request, 404, "Not found", NO_DIGEST, session)
    said = read_notice(session, f"digest:{digest_id}", SAID, dict(request.query_params or {}))
    return page(
        request,
        "digest.html",
        status,
        session,
        title=f"Digest {digest_id}",
        active="digests",
        digest=shown,
        started=said if said.get("done") == "run" else None,
        may_run=session.role >= Role.SENDER,
        problem=problem,
    )


def _run(request: Request, digest_id: str) -> Response:
    def act(session: Session, _fields: dict[str, str]) -> Response:
        try:
            done = wiring.container().tenant_api.run_digest(session.tenant_id, digest_id)
        except NotFound:
            return refused(request, 404, "Not found", NO_DIGEST, session)
        except Busy as why:
            wait = why.retry_after_s
            detail = f"{why.detail} (in about {wait} s)" if wait else why.detail
            return _digest(request, session, digest_id, 429, detail)
        except Refused as why:
            return _digest(request, session, digest_id, answers.status_of(why), why.detail)
        said: dict[str, str | int] = {"done": "run", "period": done["period"], "campaign": done["campaign"]}
        notice = signed_notice(session, f"digest:{digest_id}", SAID, said)
        return redirect(f"{base_path(request)}{_digest_path(digest_id)}?{notice}")

    return signed_form(request, Role.SENDER, "run digests", act)


def routes() -> Blueprint:
    """A fresh blueprint of the digests pages (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/console/digests", methods=["GET"])
    def console_digests() -> Response:
        request = bp.current_request
        return signed_in(request, lambda session: _list(request, session))

    @bp.route("/console/digests/{digest_id}", methods=["GET"])
    def console_digest(digest_id: str) -> Response:
        request = bp.current_request
        return signed_in(request, lambda session: _digest(request, session, digest_id))

    @bp.route("/console/digests/{digest_id}/run", methods=["POST"], content_types=FORMS)
    def console_run_digest(digest_id: str) -> Response:
        return _run(bp.current_request, digest_id)

    return bp
