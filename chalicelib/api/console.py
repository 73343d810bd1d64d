"""The console's frame: `/` leads to it; sign-in with an emailed link or the tenant's API key; sign-out; its
static assets.
The campaign pages are chalicelib.api.console_campaigns; what every console route does with HTTP (the
session cookie, forms and their checks, pages and refusals) is chalicelib.api.console_http. No page reads a
table itself: each calls the services the API calls.
"""

from __future__ import annotations

import ipaddress
import logging
import time

from botocore.exceptions import BotoCoreError, ClientError
from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.console_http import (
    FORMS,
    STALE_FORM,
    base_path,
    console_url,
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
from chalicelib.console.links import LINK_S
from chalicelib.console.mail import sign_in_mail
from chalicelib.console.people import address_of
from chalicelib.console.sessions import ABSOLUTE_S
from chalicelib.control.api_keys import key_hash
from chalicelib.core.fields import is_email

log = logging.getLogger(__name__)

WRONG_KEY = "That key does not sign in to any tenant. Check it, or ask your operator for a new one."
SLOWED = "Too many wrong keys from your address. Try again in {minutes} minutes."
LINKS_SLOWED = "Too many sign-in links asked for from your address. Try again in {minutes} minutes."
NOT_AN_ADDRESS = "That is not an email address."
NO_LINKS = "This stage does not email sign-in links: sign in with your tenant's API key, or ask your operator."
DEAD_LINK = (
    "This link does not sign in: it was used already, it expired (a link lasts 15 minutes), or it is not "
    "one of ours. Ask for a new one."
)
# A link request is answered after at least this long, whether a link was mailed or not: the time an
# answer takes must not tell that an address has an account either.
LINK_ANSWER_S = 1.0


def _client(request: Request) -> str:
    """Who the request came from, as API Gateway saw it: its address, or an IPv6 address's /64 (one host
    or network has a /64 of its own to pick from)."""
    given = str((request.context.get("identity") or {}).get("sourceIp") or "unknown")
    try:
        address = ipaddress.ip_address(given)
    except ValueError:
        return given
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


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
        return _sign_in(request, 200, None)

    @bp.route("/console/sign-in", methods=["POST"], content_types=FORMS)
    def sign_in() -> Response:
        request = bp.current_request
        if not same_origin(request):
            return refused(request, 403, "Refused", "This form was sent from another site.")
        guard, client = wiring.container().sign_in_guard, _client(request)
        wait_s = guard.take(client)  # counted before it is tried: a burst at once cannot pass a stale count
        if wait_s:
            return _slowed(request, SLOWED, wait_s)
        key = form(request).get("key", "").strip()
        tenant = wiring.container().api_keys.authenticate(f"Bearer {key}") if key else None
        if tenant is None:
            return _sign_in(request, 401, WRONG_KEY)
        guard.give_back(client)
        seen_from = (request.headers.get("user-agent", ""), client)
        minted, _session = wiring.container().sessions.start(tenant, None, Role.ADMIN, key_hash(key), seen_from)
        return redirect(f"{base_path(request)}/console", cookie(request, minted, ABSOLUTE_S))

    @bp.route("/console/sign-in/link", methods=["POST"], content_types=FORMS)
    def ask_for_link() -> Response:
        request = bp.current_request
        if not same_origin(request):
            return refused(request, 403, "Refused", "This form was sent from another site.")
        c, client = wiring.container(), _client(request)
        if not c.settings.console_from:
            return _sign_in(request, 409, NO_LINKS)
        c.console_mailer  # noqa: B018 (made before the clock starts: a cold client's time is not a member's alone)
        started = time.monotonic()
        wait_s = c.link_request_guard.take(client)
        if wait_s:
            return _slowed(request, LINKS_SLOWED, wait_s)
        address = address_of(form(request).get("address", ""))
        if not is_email(address):
            return _sign_in(request, 400, NOT_AN_ADDRESS)
        _mail_link(request, address)
        time.sleep(max(0.0, LINK_ANSWER_S - (time.monotonic() - started)))
        return page(request, "link_sent.html", title="Check your email", address=address, minutes=LINK_S // 60)

    @bp.route("/console/link/{token}", methods=["GET"])
    def link_page(token: str) -> Response:
        # Only read: a mail scanner or a preview that fetches the link does not use it up.
        request = bp.current_request
        link = wiring.container().sign_in_links.open(token)
        if link is None:
            return refused(request, 410, "This link does not sign in", DEAD_LINK)
        roles = {p.tenant_id: Role(p.role).name.lower() for p in link.memberships}
        shown = page(request, "link.html", title="Sign in", link=link, token=token, roles=roles)
        # Its assets' requests carry the origin alone, not the token. Not `no-referrer`: a browser then sends
        # its sign-in form with `Origin: null`, which the form's check refuses.
        shown.headers["Referrer-Policy"] = "strict-origin"
        return shown

    @bp.route("/console/link/{token}", methods=["POST"], content_types=FORMS)
    def use_link(token: str) -> Response:
        request = bp.current_request
        if not same_origin(request):
            return refused(request, 403, "Refused", "This form was sent from another site.")
        c, client = wiring.container(), _client(request)
        wait_s = c.sign_in_guard.take(client)
        if wait_s:
            return _slowed(request, SLOWED, wait_s)
        person = c.sign_in_links.use(token, form(request).get("tenant", ""))
        if person is None:
            return refused(request, 410, "This link does not sign in", DEAD_LINK)
        c.sign_in_guard.give_back(client)
        seen_from = (request.headers.get("user-agent", ""), client)
        minted, _session = c.sessions.start(person.tenant_id, person.address, person.role, None, seen_from)
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


def _sign_in(request: Request, status: int, problem: str | None) -> Response:
    links = bool(wiring.container().settings.console_from)
    return page(request, "sign_in.html", status, title="Sign in", problem=problem, links=links)


def _slowed(request: Request, said: str, wait_s: int) -> Response:
    slowed = _sign_in(request, 429, said.format(minutes=-(-wait_s // 60)))
    slowed.headers["Retry-After"] = str(wait_s)
    return slowed


def _mail_link(request: Request, address: str) -> None:
    """Mail `address` a sign-in link if it belongs to someone and has not had too many lately; whatever
    happens, the person asking is told the same."""
    c = wiring.container()
    if c.mailbox_guard.take(address):
        log.warning("sign-in link not mailed: too many asked for one address lately")
        return
    base = console_url(request)
    token = c.sign_in_links.request(address) if base else None
    if base is None or token is None or c.settings.console_from is None:
        return
    try:
        c.console_mailer.send(sign_in_mail(c.settings.console_from, address, f"{base}/link/{token}", LINK_S // 60))
    except (ClientError, BotoCoreError) as exc:  # SES's refusal (its sandbox, a quota): for the operator
        log.error("sign-in link not mailed: %s", exc)
