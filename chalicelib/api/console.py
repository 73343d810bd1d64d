"""The console's routes: `/` leads to it; sign-in with the tenant's API key; sign-out; the campaigns page;
the console's own static assets. A page finds its caller from the session cookie
(chalicelib.console.sessions), as an API route does from its key, and answers a refusal with an HTML page
(chalicelib.api.answers.page); no page reads a table itself: each calls the services the API calls.

Forms that change something are checked twice: their Origin must be the stage's own (a sign-in form posted
from another site is refused before any session exists), and a signed-in form carries its session's CSRF
token. The cookie is HttpOnly and SameSite=Strict, Secure when the request came over HTTPS (a deployed
stage), and scoped to the console's path.
"""

from __future__ import annotations

import urllib.parse
from http.cookies import CookieError, SimpleCookie
from typing import Any

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.principal import Role
from chalicelib.console import pages
from chalicelib.console.sessions import ABSOLUTE_S, Session
from chalicelib.control.campaign_reads import STATES
from chalicelib.core.errors import Refused

COOKIE = "moonsend_session"
FORMS = ["application/x-www-form-urlencoded"]
MAX_FORM_BYTES = 4096  # a sign-in or sign-out form is a few hundred bytes
STALE_FORM = "This form is not one the console gave you: reload the page and try again."
WRONG_KEY = "That key does not sign in to any tenant. Check it, or ask your operator for a new one."


def base_path(request: Request) -> str:
    """The stage's own prefix of every path (`/api` on API Gateway's URL; "" locally or on a custom domain
    mapped at its root): the request's full path less the path the route saw."""
    full = str(request.context.get("path") or "")
    seen = str(request.to_original_event().get("path") or full)
    return full[: len(full) - len(seen)] if seen and full.endswith(seen) else ""


def _secure(request: Request) -> bool:
    return request.headers.get("x-forwarded-proto", "").lower() == "https"


def _secret(request: Request) -> str | None:
    try:
        jar = SimpleCookie(request.headers.get("cookie", ""))
    except CookieError:
        return None
    found = jar.get(COOKIE)
    return found.value if found is not None else None


def _cookie(request: Request, value: str, max_age: int) -> str:
    secure = "; Secure" if _secure(request) else ""
    path = f"{base_path(request)}/console"
    return f"{COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"


def _same_origin(request: Request) -> bool:
    """A form's Origin, when the browser sends one, is the stage's own."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    scheme = "https" if _secure(request) else "http"
    return origin == f"{scheme}://{request.headers.get('host', '')}"


def _form(request: Request) -> dict[str, str]:
    raw = request.raw_body or b""
    if len(raw) > MAX_FORM_BYTES:
        return {}
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return {k: v[0] for k, v in urllib.parse.parse_qs(text, max_num_fields=10).items()}


def _redirect(location: str, cookie: str | None = None) -> Response:
    headers: answers.Headers = {"Location": location, "Cache-Control": "no-store"}
    if cookie is not None:
        headers["Set-Cookie"] = cookie
    return Response(body="", status_code=303, headers=headers)


def _page(request: Request, template: str, status: int = 200, session: Session | None = None, **ctx: Any) -> Response:
    role = Role(session.role).name.lower() if session is not None else None
    shown = {"active": None, **ctx}  # what the frame reads, for pages that do not say
    html = pages.render(template, base=base_path(request), session=session, role_name=role, **shown)
    return answers.page(html, status)


def _refused(request: Request, status: int, title: str, detail: str, session: Session | None = None) -> Response:
    return _page(request, "error.html", status, session, title=title, detail=detail)


def routes() -> Blueprint:
    """A fresh blueprint of the console's routes (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/", methods=["GET"])
    def root() -> Response:
        return _redirect(f"{base_path(bp.current_request)}/console")

    @bp.route("/console", methods=["GET"])
    def campaigns() -> Response:
        request = bp.current_request
        session = wiring.container().sessions.find(_secret(request))
        if session is None:
            return _redirect(f"{base_path(request)}/console/sign-in")
        query = dict(request.query_params or {})
        try:
            page = wiring.container().campaign_reads.list_for(session.tenant_id, query)
        except Refused as refused:
            return _refused(request, answers.status_of(refused), "That list cannot be shown", refused.detail, session)
        return _page(
            request,
            "campaigns.html",
            session=session,
            title="Campaigns",
            active="campaigns",
            campaigns=page["campaigns"],
            next=page["next"],
            states=STATES,
            state=query.get("state") if query.get("state") in STATES else None,
        )

    @bp.route("/console/sign-in", methods=["GET"])
    def sign_in_page() -> Response:
        request = bp.current_request
        if wiring.container().sessions.find(_secret(request)) is not None:
            return _redirect(f"{base_path(request)}/console")
        return _page(request, "sign_in.html", title="Sign in", problem=None)

    @bp.route("/console/sign-in", methods=["POST"], content_types=FORMS)
    def sign_in() -> Response:
        request = bp.current_request
        if not _same_origin(request):
            return _refused(request, 403, "Refused", "This form was sent from another site.")
        key = _form(request).get("key", "").strip()
        tenant = wiring.container().reports.authenticate(f"Bearer {key}") if key else None
        if tenant is None:
            return _page(request, "sign_in.html", 401, title="Sign in", problem=WRONG_KEY)
        secret, _session = wiring.container().sessions.start(tenant, None, Role.ADMIN)
        return _redirect(f"{base_path(request)}/console", _cookie(request, secret, ABSOLUTE_S))

    @bp.route("/console/sign-out", methods=["POST"], content_types=FORMS)
    def sign_out() -> Response:
        request = bp.current_request
        sessions, secret = wiring.container().sessions, _secret(request)
        session = sessions.find(secret)
        if session is not None and not (_same_origin(request) and session.carries(_form(request).get("csrf"))):
            return _refused(
                request, 403, "Refused", "This form is not one the console gave you: reload and try again.", session
            )
        sessions.end(secret)
        return _redirect(f"{base_path(request)}/console/sign-in", _cookie(request, "", 0))

    @bp.route("/console/static/{name}", methods=["GET"])
    def static(name: str) -> Response:
        found = pages.static_file(name)
        if found is None:
            return _refused(bp.current_request, 404, "Not found", "There is no such file.")
        body, kind = found
        headers: answers.Headers = {
            "Content-Type": kind,
            "Cache-Control": "public, max-age=300",
            "X-Content-Type-Options": "nosniff",
        }
        return Response(body=body, status_code=200, headers=headers)

    return bp
