"""Every answer of the API, shaped in one place: a body as JSON (never cached, or with an ETag for a read),
a refusal as an RFC 9457 problem (chalicelib.api.problems), a page as HTML, and Chalice's own refusals (a
method or a media type a route does not take, an error no route caught) as problems too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chalice import Response

from chalicelib.api import etags, problems
from chalicelib.api.principal import Forbidden, Unauthenticated
from chalicelib.console import pages
from chalicelib.core.errors import Busy, Conflict, Invalid, NotFound, Refused, Unprocessable

Headers = dict[str, str | list[str]]

# Each refusal's status, the most specific class first.
STATUS: tuple[tuple[type[Refused], int], ...] = (
    (Unauthenticated, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Unprocessable, 422),
    (Invalid, 400),
    (Conflict, 409),
    (Busy, 429),
)
NO_STORE = "no-store"
REVALIDATE = "private, no-cache"  # a read: kept by the client, asked again each time with its ETag


def status_of(refusal: Refused) -> int:
    return next((status for kind, status in STATUS if isinstance(refusal, kind)), 400)


@dataclass(frozen=True)
class DomainAnswer:
    """A domain call's answer as status and body, for the edges that are not HTTP (the operator's CLI)."""

    status: int
    body: dict[str, Any]


def answer_of(call: Callable[[], dict[str, Any]], status: int = 200) -> DomainAnswer:
    """What the API would answer `call` with: its body with `status`, or its refusal's status and members."""
    try:
        return DomainAnswer(status, call())
    except Refused as refused:
        return DomainAnswer(status_of(refused), {"error": refused.detail, **refused.members})


def ok(body: Any, status: int = 200) -> Response:
    """A body the API answers with, never kept by a cache (it changes with every write)."""
    return Response(body=body, status_code=status, headers={"Cache-Control": NO_STORE})


def read(body: Any, if_none_match: str | None) -> Response:
    """A read's body with its ETag, or 304 with none when the client's If-None-Match has it."""
    tag = etags.etag(body)
    headers: Headers = {"ETag": tag, "Cache-Control": REVALIDATE}
    if etags.not_modified(if_none_match, tag):
        return Response(body="", status_code=304, headers=headers)
    return Response(body=body, status_code=200, headers=headers)


def refusal(refused: Refused) -> Response:
    status = status_of(refused)
    headers: Headers = {"Cache-Control": NO_STORE}
    if isinstance(refused, Busy) and refused.retry_after_s is not None:
        headers["Retry-After"] = str(refused.retry_after_s)
    return problem(status, {"error": refused.detail, **refused.members}, headers)


def problem(status: int, body: Mapping[str, Any], headers: Headers | None = None) -> Response:
    shaped = problems.problem(status, body)
    return Response(
        body=shaped,
        status_code=status,
        headers={"Cache-Control": NO_STORE, **(headers or {}), "Content-Type": problems.PROBLEM_JSON},
    )


def html(page: Any) -> Response:
    """A page (an unsubscribe's): its own status, never cached."""
    return Response(
        body=page.html,
        status_code=page.status,
        headers={"Content-Type": "text/html; charset=utf-8", "Cache-Control": NO_STORE},
    )


def page(html_text: str, status: int = 200, connect: tuple[str, ...] = ()) -> Response:
    """A console page (chalicelib.console.pages): its security headers, never cached; `connect`: the origins
    its script may send to besides the stage's."""
    headers: Headers = dict(pages.PAGE_HEADERS)
    if connect:
        headers["Content-Security-Policy"] = pages.csp(connect)
    return Response(body=html_text, status_code=status, headers=headers)


def chalice_problems(event: Any, get_response: Callable[[Any], Response]) -> Response:
    """Middleware (app.py registers it for every route): Chalice answers a method the route does not take (405,
    with Allow), a media type it does not take (415), and an exception no route caught (500) with its own
    `{"Code", "Message"}` body; each becomes a problem, its headers kept."""
    response = get_response(event)
    body = response.body
    if response.status_code >= 400 and isinstance(body, dict) and set(body) == {"Code", "Message"}:
        kept: Headers = {k: v for k, v in (response.headers or {}).items() if k.lower() != "content-type"}
        said = str(body["Message"])
        if response.status_code == 405 and isinstance(kept.get("Allow"), str):
            said = f"{said}: this path takes {kept['Allow']} only"
        return problem(response.status_code, {"error": said}, kept)
    return response
