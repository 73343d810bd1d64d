"""The console's webhooks page: the tenant's endpoints as `GET /webhooks` lists them (a disabled one with the
requests it holds, a replay or removal with how far its background job got), and an admin's changes, each
through the service the API's routes call: add an endpoint (its signing secret is shown on the answer's
page, this once: it is never in a URL, a redirect or the list), send it a test (the page shows the request
and the answer), replay a disabled one (the page follows the job), remove one.

A test's and an addition's answers are pages, not redirects: what they show exists only in that answer.
A reload asks again, which the browser says first; a test is at most one per endpoint every 10 s anyway.
"""

from __future__ import annotations

from typing import Any

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.console_http import (
    FORMS,
    base_path,
    form_values,
    page,
    read_notice,
    redirect,
    signed_form,
    signed_in,
    signed_notice,
)
from chalicelib.api.principal import Role
from chalicelib.console.sessions import Session
from chalicelib.core.errors import NotFound, Refused
from chalicelib.core.webhook_contract import EVENT_TYPES, MAX_EVENTS_PER_REQUEST, MAX_URL_LENGTH

SCOPE = "webhooks"
SAID = ("done", "n", "more")  # what a change's redirect says, in this order
NO_ENDPOINT = "This tenant has no such webhook endpoint: it may have been removed meanwhile."


def _page_path(request: Request) -> str:
    return f"{base_path(request)}/console/webhooks"


def _notice(session: Session, query: dict[str, str]) -> str | None:
    said = read_notice(session, SCOPE, SAID, query)
    if said.get("done") == "removed":
        return "Removed: no more requests go to it. What it held is deleted in the background."
    if said.get("done") == "replayed":
        n = said.get("n", "0")
        held = f"{n}+" if said.get("more") == "1" else n
        return f"Enabled again. Its {held} held requests go out again in the background, each once; new events follow."
    return None


def _webhooks_page(request: Request, session: Session, status: int = 200, **shown: Any) -> Response:
    listed = wiring.container().webhook_registration.list(session.tenant_id)
    jobs = {j["endpoint"]: j for j in listed["jobs"]}
    known = {e["id"] for e in listed["endpoints"]}
    running = any(j["state"] == "running" for j in listed["jobs"])
    query = dict(request.query_params or {})
    frame = {
        "endpoints": listed["endpoints"],
        "jobs": jobs,
        "removals": [j for j in listed["jobs"] if j["endpoint"] not in known],
        "admin": session.role >= Role.ADMIN,
        "refresh": f"{_page_path(request)}?part=list" if running else None,
    }
    if query.get("part") == "list":
        return page(request, "_webhook_list.html", session=session, **frame)
    return page(
        request,
        "webhooks.html",
        status,
        session,
        title="Webhooks",
        active="webhooks",
        types=EVENT_TYPES,
        most_per_request=MAX_EVENTS_PER_REQUEST,
        max_url=MAX_URL_LENGTH,
        notice=_notice(session, query),
        **frame,
        **{"problem": None, "tested": None, "asked": None, **shown},
    )


def _refusal(request: Request, session: Session, why: Refused) -> Response:
    if isinstance(why, NotFound):
        return _webhooks_page(request, session, 404, problem=NO_ENDPOINT)
    return _webhooks_page(request, session, answers.status_of(why), problem=why.detail)


def _add(request: Request) -> Response:
    def act(session: Session, fields: dict[str, str]) -> Response:
        values = form_values(request)
        asked = {
            "url": fields.get("url", ""),
            "eventTypes": values.get("eventTypes", []),
            "maxEventsPerRequest": _whole(fields.get("maxEventsPerRequest", "1")),
        }
        try:
            added = wiring.container().webhook_registration.add(session.tenant_id, asked)
        except Refused as why:
            return _webhooks_page(request, session, answers.status_of(why), problem=why.detail, asked=asked)
        return page(
            request, "webhook_added.html", 201, session, title="Webhook added", active="webhooks", endpoint=added
        )

    return signed_form(request, Role.ADMIN, "add webhooks", act)


def _whole(text: str) -> int | str:
    """A number field's value as the API takes it (a word stays a word, which it refuses by name)."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else text


def _test(request: Request, endpoint_id: str) -> Response:
    def act(session: Session, _fields: dict[str, str]) -> Response:
        try:
            tested = wiring.container().webhook_registration.test(session.tenant_id, endpoint_id)
        except Refused as why:
            return _refusal(request, session, why)
        return _webhooks_page(request, session, tested=tested)

    return signed_form(request, Role.ADMIN, "test webhooks", act)


def _replay(request: Request, endpoint_id: str) -> Response:
    def act(session: Session, _fields: dict[str, str]) -> Response:
        try:
            done = wiring.container().webhook_registration.replay(session.tenant_id, endpoint_id)
        except Refused as why:
            return _refusal(request, session, why)
        said: dict[str, str | int] = {
            "done": "replayed",
            "n": int(done["replayed"]),
            "more": 1 if done["replayedIsLowerBound"] else 0,
        }
        return redirect(f"{_page_path(request)}?{signed_notice(session, SCOPE, SAID, said)}")

    return signed_form(request, Role.ADMIN, "replay webhooks", act)


def _remove(request: Request, endpoint_id: str) -> Response:
    def act(session: Session, _fields: dict[str, str]) -> Response:
        try:
            wiring.container().webhook_registration.remove(session.tenant_id, endpoint_id)
        except Refused as why:
            return _refusal(request, session, why)
        said: dict[str, str | int] = {"done": "removed"}
        return redirect(f"{_page_path(request)}?{signed_notice(session, SCOPE, SAID, said)}")

    return signed_form(request, Role.ADMIN, "remove webhooks", act)


def routes() -> Blueprint:
    """A fresh blueprint of the webhooks page (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/console/webhooks", methods=["GET"])
    def console_webhooks() -> Response:
        request = bp.current_request
        return signed_in(request, lambda session: _webhooks_page(request, session))

    @bp.route("/console/webhooks", methods=["POST"], content_types=FORMS)
    def console_add_webhook() -> Response:
        return _add(bp.current_request)

    @bp.route("/console/webhooks/{endpoint_id}/test", methods=["POST"], content_types=FORMS)
    def console_test_webhook(endpoint_id: str) -> Response:
        return _test(bp.current_request, endpoint_id)

    @bp.route("/console/webhooks/{endpoint_id}/replay", methods=["POST"], content_types=FORMS)
    def console_replay_webhook(endpoint_id: str) -> Response:
        return _replay(bp.current_request, endpoint_id)

    @bp.route("/console/webhooks/{endpoint_id}/remove", methods=["POST"], content_types=FORMS)
    def console_remove_webhook(endpoint_id: str) -> Response:
        return _remove(bp.current_request, endpoint_id)

    return bp
