"""The console's frame: `/` leads to it; sign-in with the tenant's API key; sign-out; its static assets.
The campaign pages are chalicelib.api.console_campaigns; what every console route does with HTTP (the
session cookie, forms and their checks, pages and refusals) is chalicelib.api.console_http. No page reads a
table itself: each calls the services the API calls.
"""

from __future__ import annotations

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.console_http import (
    FORMS,
    STALE_FORM,
    base_path,
    cookie,
    form,
    from_console,
    page,
    redirect,
    refused,
    same_origin,
    secret,
)
from chalicelib.api.principal import Role
from chalicelib.console import pages
from chalicelib.console.sessions import ABSOLUTE_S

WRONG_KEY = "That key does not sign in to any tenant. Check it, or ask your operator for a new one."
SLOWED = "Too many wrong keys from your address. Try again in {minutes} minutes."


def _client(request: Request) -> str:
    """The address the request came from, as API Gateway saw it."""
    return str((request.context.get("identity") or {}).get("sourceIp") or "unknown")


def routes() -> Blueprint:
    """A fresh blueprint of the console's routes (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/", methods=["GET"])
    def root() -> Response:
        return redirect(f"{base_path(bp.current_request)}/console")

    @bp.route("/console/sign-in", methods=["GET"])
    def sign_in_page() -> Response:
        request = bp.current_request
        if wiring.container().sessions.find(secret(request)) is not None:
            return redirect(f"{base_path(request)}/console")
        return page(request, "sign_in.html", title="Sign in", problem=None)

    @bp.route("/console/sign-in", methods=["POST"], content_types=FORMS)
    def sign_in() -> Response:
        request = bp.current_request
        if not same_origin(request):
            return refused(request, 403, "Refused", "This form was sent from another site.")
        guard, client = wiring.container().sign_in_guard, _client(request)
        wait_s = guard.wait_s(client)
        if wait_s:
            slowed = page(
                request, "sign_in.html", 429, title="Sign in", problem=SLOWED.format(minutes=-(-wait_s // 60))
            )
            slowed.headers["Retry-After"] = str(wait_s)
            return slowed
        key = form(request).get("key", "").strip()
        tenant = wiring.container().reports.authenticate(f"Bearer {key}") if key else None
        if tenant is None:
            guard.wrong_key(client)
            return page(request, "sign_in.html", 401, title="Sign in", problem=WRONG_KEY)
        minted, _session = wiring.container().sessions.start(tenant, None, Role.ADMIN)
        return redirect(f"{base_path(request)}/console", cookie(request, minted, ABSOLUTE_S))

    @bp.route("/console/sign-out", methods=["POST"], content_types=FORMS)
    def sign_out() -> Response:
        request = bp.current_request
        sessions, held = wiring.container().sessions, secret(request)
        session = sessions.find(held)
        if session is not None and not from_console(request, session):
            return refused(request, 403, "Refused", STALE_FORM, session)
        sessions.end(held)
        return redirect(f"{base_path(request)}/console/sign-in", cookie(request, "", 0))

    @bp.route("/console/static/{name}", methods=["GET"])
    def static(name: str) -> Response:
        found = pages.static_file(name)
        if found is None:
            return refused(bp.current_request, 404, "Not found", "There is no such file.")
        body, kind = found
        # A page names each asset with its content's hash (pages.asset_url): that name's bytes never change.
        query: dict[str, str] = dict(bp.current_request.query_params or {})
        versioned = query.get("v") == pages.asset_version(name)
        headers: answers.Headers = {
            "Content-Type": kind,
            "Cache-Control": "public, max-age=31536000, immutable" if versioned else "public, max-age=300",
            "X-Content-Type-Options": "nosniff",
        }
        return Response(body=body, status_code=200, headers=headers)

    return bp
