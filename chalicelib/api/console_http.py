"""What every console route does with HTTP: find its session from the cookie, read and check a form, render a
page or a refusal as a page, redirect after a change (a reload never repeats it).

Forms that change something are checked twice: their Origin must be the stage's own (a sign-in form posted
from another site is refused before any session exists), and a signed-in form carries its session's CSRF
token. The cookie is HttpOnly and SameSite=Strict, Secure when the request came over HTTPS (a deployed
stage), and scoped to the console's path.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import urllib.parse
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from typing import Any

from chalice import Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.principal import Role
from chalicelib.console import pages
from chalicelib.console.sessions import Session

COOKIE = "moonsend_session"
FORMS = ["application/x-www-form-urlencoded"]
MAX_FORM_BYTES = 4096  # the console's forms are a few hundred bytes
STALE_FORM = "This form is not one the console gave you: reload the page and try again."


def base_path(request: Request) -> str:
    """The stage's own prefix of every path (`/api` on API Gateway's URL; "" locally or on a custom domain
    mapped at its root): the request's full path less the path the route saw."""
    full = str(request.context.get("path") or "")
    seen = str(request.to_original_event().get("path") or full)
    return full[: len(full) - len(seen)] if seen and full.endswith(seen) else ""


def console_url(request: Request) -> str | None:
    """The console's absolute address, for links in emails: the stage's custom domain when set, else the
    domain API Gateway says the request came in on (never the Host header, which a client may set to its own
    site to have a sign-in link point there), else the stage's configured API URL. None when none is known."""
    settings = wiring.container().settings
    if settings.link_base_url:
        return f"{settings.link_base_url.rstrip('/')}/console"
    domain = str(request.context.get("domainName") or "")
    if domain:
        # API Gateway serves HTTPS only; a stage served on this machine's loopback address, plain HTTP.
        return f"{'http' if _loopback(domain) else 'https'}://{domain}{base_path(request)}/console"
    return f"{settings.api_url.rstrip('/')}/console" if settings.api_url else None


def _loopback(domain: str) -> bool:
    host = domain.rpartition(":")[0] or domain
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _secure(request: Request) -> bool:
    return request.headers.get("x-forwarded-proto", "").lower() == "https"


def secret(request: Request) -> str | None:
    """The session cookie's value, if the request carries one."""
    try:
        jar = SimpleCookie(request.headers.get("cookie", ""))
    except CookieError:
        return None
    found = jar.get(COOKIE)
    return found.value if found is not None else None


REFRESH_HEADER = "x-console-refresh"  # the page's script sets it on its refreshes


def session_of(request: Request) -> Session | None:
    """The request's live session. A refresh the page's script makes on its own does not keep it alive: a tab
    left open on a sending campaign must not outlive the idle timeout."""
    by_person = request.headers.get(REFRESH_HEADER) != "1"
    return wiring.container().sessions.find(secret(request), keep_alive=by_person)


def cookie(request: Request, value: str, max_age: int) -> str:
    secure = "; Secure" if _secure(request) else ""
    path = f"{base_path(request)}/console"
    return f"{COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"


def same_origin(request: Request) -> bool:
    """A form's Origin, when the browser sends one, is the stage's own."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    scheme = "https" if _secure(request) else "http"
    return origin == f"{scheme}://{request.headers.get('host', '')}"


MAX_FORM_FIELDS = 20  # the most any console form has: a webhook's, with a box for each event type


def form_values(request: Request, max_bytes: int = MAX_FORM_BYTES) -> dict[str, list[str]]:
    """Every value of each of the form's fields (a field of checkboxes has several); none for a body past
    `max_bytes` (not one of the console's forms)."""
    raw = request.raw_body or b""
    if len(raw) > max_bytes:
        return {}
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        return urllib.parse.parse_qs(text, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:  # more fields than any console form has: not one of ours (a stale form, 403)
        return {}


def form(request: Request, max_bytes: int = MAX_FORM_BYTES) -> dict[str, str]:
    """Each of the form's fields, by its first value."""
    return {k: v[0] for k, v in form_values(request, max_bytes).items()}


def from_console(request: Request, session: Session, max_bytes: int = MAX_FORM_BYTES) -> bool:
    """A signed-in form is the console's own: from the stage's origin, with its session's CSRF token."""
    return same_origin(request) and session.carries(form(request, max_bytes).get("csrf"))


def redirect(location: str, set_cookie: str | None = None) -> Response:
    headers: answers.Headers = {"Location": location, "Cache-Control": "no-store"}
    if set_cookie is not None:
        headers["Set-Cookie"] = set_cookie
    return Response(body="", status_code=303, headers=headers)


def page(
    request: Request,
    template: str,
    status: int = 200,
    session: Session | None = None,
    connect: tuple[str, ...] = (),
    **ctx: Any,
) -> Response:
    role = Role(session.role).name.lower() if session is not None else None
    shown = {"active": None, **ctx}  # what the frame reads, for pages that do not say
    html = pages.render(template, base=base_path(request), session=session, role_name=role, **shown)
    return answers.page(html, status, connect)


def refused(request: Request, status: int, title: str, detail: str, session: Session | None = None) -> Response:
    return page(request, "error.html", status, session, title=title, detail=detail)


def role_refused(request: Request, session: Session, needed: Role, doing: str) -> Response | None:
    """A refusal page when the session's role does not reach `needed` (the server refuses, whatever the page
    showed); None when it does."""
    if session.role >= needed:
        return None
    who = "admins" if needed >= Role.ADMIN else f"{needed.name.lower()}s and admins"
    detail = (
        f"Only a tenant's {who} can {doing}; you are signed in as a "
        f"{Role(session.role).name.lower()}. Ask an admin of this tenant."
    )
    return refused(request, 403, "Not allowed", detail, session)


def signed_in(request: Request, show: Callable[[Session], Response]) -> Response:
    """`show` for the request's live session; without one, a redirect to the sign-in page."""
    session = session_of(request)
    if session is None:
        return redirect(f"{base_path(request)}/console/sign-in")
    return show(session)


def signed_form(
    request: Request,
    needed: Role,
    doing: str,
    act: Callable[[Session, dict[str, str]], Response],
    max_bytes: int = MAX_FORM_BYTES,
) -> Response:
    """A form that changes something: `act` with the session and the form's fields, once the form is known
    to be the console's own (else 403: another site's, or a stale page's) and the session's role reaches
    `needed` (else 403 naming who may: `doing` is what was refused)."""

    def checked(session: Session) -> Response:
        if not from_console(request, session, max_bytes):
            return refused(request, 403, "Refused", STALE_FORM, session)
        refusal = role_refused(request, session, needed, doing)
        return refusal or act(session, form(request, max_bytes))

    return signed_in(request, checked)


def _signature(session: Session, scope: str, said: str) -> str:
    return hmac.new(session.csrf.encode(), f"{scope}?{said}".encode(), hashlib.sha256).hexdigest()[:24]


def signed_notice(session: Session, scope: str, keys: tuple[str, ...], said: dict[str, str | int]) -> str:
    """A redirect's query that says what was done (`keys`, in their order), signed with the session's CSRF
    token: a link from anyone else cannot make a page say that something was done."""
    text = urllib.parse.urlencode([(k, said[k]) for k in keys if k in said])
    return f"{text}&sig={_signature(session, scope, text)}"


def read_notice(session: Session, scope: str, keys: tuple[str, ...], query: dict[str, str]) -> dict[str, str]:
    """What a signed notice says (`signed_notice`); {} for none, or one not signed for this session."""
    text = urllib.parse.urlencode([(k, query[k]) for k in keys if k in query], errors="replace")
    signed = query.get("sig", "")
    if not text or not hmac.compare_digest(signed.encode(), _signature(session, scope, text).encode()):
        return {}
    return {k: query[k] for k in keys if k in query}
