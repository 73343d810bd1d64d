"""The routes a recipient's mail client and browser reach, with no key: the unsubscribe page and its form
(RFC 8058's one-click too), the open pixel, a tracked link; and the API's OpenAPI document."""

from __future__ import annotations

import time

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.control import openapi
from chalicelib.feedback.unsubscribe import NOT_FOUND
from chalicelib.ingest.machines import Hit
from chalicelib.ingest.tracking import PIXEL

FORMS = ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"]


def unsubscribe_page(token: str) -> Response:
    """The confirmation page behind `{{ unsubscribe_url }}` (a form; no JavaScript)."""
    return answers.html(wiring.container().unsubscribes.confirm_page(token))


def unsubscribe(token: str) -> Response:
    """Unsubscribe at once: the page's button, and mailbox providers' one-click (RFC 8058)."""
    return answers.html(wiring.container().unsubscribes.unsubscribe(token))


def pixel(token: str, hit: Hit) -> Response:
    """The open pixel: records the first open (a person's, or a machine's apart), and always answers with a
    transparent 1x1 GIF."""
    wiring.container().tracking.opened(token, hit)
    headers: answers.Headers = {"Content-Type": "image/gif", "Cache-Control": "no-store, max-age=0"}
    return Response(body=PIXEL, status_code=200, headers=headers)


def link(token: str, hit: Hit) -> Response:
    """A tracked link: records the first click (a person's, or a machine's apart), then redirects to the URL the
    token was signed for. A HEAD is answered as a GET is (a link checker's, counted as a machine's)."""
    r = wiring.container().tracking.clicked(token, hit)
    if r.location is None:
        return answers.html(NOT_FOUND)
    return Response(body="", status_code=r.status, headers={"Location": r.location, "Cache-Control": "no-store"})


def hit_of(request: Request) -> Hit:
    """A request of the pixel or a link, as chalicelib.ingest.machines judges it."""
    headers = {k.lower(): v for k, v in (request.headers or {}).items()}
    return Hit(request.method, headers, int(time.time() * 1000))


def openapi_document() -> Response:
    """This API's OpenAPI 3.1 document (no key needed; docs/api.md)."""
    return Response(body=openapi.document(), status_code=200, headers={"Content-Type": "application/json"})


def routes() -> Blueprint:
    """A fresh blueprint of these routes (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)
    bp.route("/unsubscribe/{token}", methods=["GET"])(unsubscribe_page)
    bp.route("/unsubscribe/{token}", methods=["POST"], content_types=FORMS)(unsubscribe)

    @bp.route("/o/{token}", methods=["GET"])
    def opened(token: str) -> Response:
        return pixel(token, hit_of(bp.current_request))

    @bp.route("/c/{token}", methods=["GET", "HEAD"])
    def clicked(token: str) -> Response:
        return link(token, hit_of(bp.current_request))

    bp.route("/openapi.json", methods=["GET"])(openapi_document)
    return bp
