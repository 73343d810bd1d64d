"""The routes a recipient's mail client and browser reach, with no key: the unsubscribe page and its form
(RFC 8058's one-click too), the open pixel, a tracked link; and the API's OpenAPI document."""

from __future__ import annotations

from chalice import Blueprint, Response

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.control import openapi
from chalicelib.feedback.unsubscribe import NOT_FOUND
from chalicelib.ingest.tracking import PIXEL

FORMS = ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"]


def unsubscribe_page(token: str) -> Response:
    """The confirmation page behind `{{ unsubscribe_url }}` (a form; no JavaScript)."""
    return answers.html(wiring.container().unsubscribes.confirm_page(token))


def unsubscribe(token: str) -> Response:
    """Unsubscribe at once: the page's button, and mailbox providers' one-click (RFC 8058)."""
    return answers.html(wiring.container().unsubscribes.unsubscribe(token))


def opened(token: str) -> Response:
    """The open pixel: records the first open, and always answers with a transparent 1x1 GIF."""
    wiring.container().tracking.opened(token)
    headers: answers.Headers = {"Content-Type": "image/gif", "Cache-Control": "no-store, max-age=0"}
    return Response(body=PIXEL, status_code=200, headers=headers)


def clicked(token: str) -> Response:
    """A tracked link: records the first click, then redirects to the URL the token was signed for."""
    r = wiring.container().tracking.clicked(token)
    if r.location is None:
        return answers.html(NOT_FOUND)
    return Response(body="", status_code=r.status, headers={"Location": r.location, "Cache-Control": "no-store"})


def openapi_document() -> Response:
    """This API's OpenAPI 3.1 document (no key needed; docs/api.md)."""
    return Response(body=openapi.document(), status_code=200, headers={"Content-Type": "application/json"})


def routes() -> Blueprint:
    """A fresh blueprint of these routes (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)
    bp.route("/unsubscribe/{token}", methods=["GET"])(unsubscribe_page)
    bp.route("/unsubscribe/{token}", methods=["POST"], content_types=FORMS)(unsubscribe)
    bp.route("/o/{token}", methods=["GET"])(opened)
    bp.route("/c/{token}", methods=["GET"])(clicked)
    bp.route("/openapi.json", methods=["GET"])(openapi_document)
    return bp
