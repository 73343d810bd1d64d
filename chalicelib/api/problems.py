"""RFC 9457 problem details: how every tenant-API answer of status 400 and up is shaped (chalicelib.api.answers).

    {"type": "about:blank", "title": "Not Found", "status": 404, "detail": "not found", "error": "not found"}

`detail` is the answer's `error` text (or, for the answers that said it as `message`, that); `error` is
kept, so that the clients written before problem details read what they always read, and so is every
other member a route gives (a 429's `retryAfterSeconds`, a 409's `ok` and `message`).
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

PROBLEM_JSON = "application/problem+json"
ABOUT_BLANK = "about:blank"  # RFC 9457 4.2.1: no type of its own, the title is the status's reason phrase


def is_problem(status: int) -> bool:
    return status >= 400


def reason_phrase(status: int) -> str:
    """The status's reason phrase; for a status outside the registry, its class's."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Client Error" if status < 500 else "Server Error"


def problem(status: int, body: Mapping[str, Any]) -> dict[str, Any]:
    """The answer's body as a problem: a new dict, the given body left as it was."""
    title = reason_phrase(status)
    said = body.get("error") if isinstance(body.get("error"), str) else body.get("message")
    detail = said if isinstance(said, str) else title
    shaped: dict[str, Any] = {"type": ABOUT_BLANK, "title": title, "status": status, "detail": detail, "error": detail}
    shaped.update(body)
    shaped["status"] = status  # the member must agree with the answer's status (RFC 9457 3.1.3)
    return shaped
