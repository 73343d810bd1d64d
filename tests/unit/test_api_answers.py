"""How the API answers, in one place (chalicelib/api/answers.py): a refusal is an RFC 9457 problem
(chalicelib/api/problems.py) with its members kept, a read has an ETag, Chalice's own refusals are problems
too; and the OpenAPI document is served as it is kept."""

import json

from chalice import Response

import app
from chalicelib.api import answers
from chalicelib.api.principal import Forbidden, Unauthenticated
from chalicelib.control import openapi
from chalicelib.core.errors import Busy, Conflict, Invalid, NotFound


def test_a_refusal_is_a_problem_with_its_error_and_members_kept_and_its_retry_said():
    r = answers.refusal(Busy("retry later", retry_after_s=30))
    assert r.status_code == 429
    assert r.headers == {"Cache-Control": "no-store", "Retry-After": "30", "Content-Type": "application/problem+json"}
    assert r.body == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "retry later",
        "error": "retry later",
        "retryAfterSeconds": 30,
    }


def test_each_refusal_has_its_status():
    refusals = [Unauthenticated("no key"), Forbidden("viewer"), NotFound(), Invalid("limit"), Conflict("done")]
    assert [answers.refusal(r).status_code for r in refusals] == [401, 403, 404, 400, 409]


def test_a_write_is_answered_as_it_was_never_cached():
    r = answers.ok({"ok": True}, 201)
    assert (r.status_code, r.headers, r.body) == (201, {"Cache-Control": "no-store"}, {"ok": True})


def test_a_read_has_an_etag_and_is_304_with_no_body_when_the_client_has_it():
    first = answers.read({"a": 1}, None)
    assert first.status_code == 200 and first.headers["Cache-Control"] == "private, no-cache"
    again = answers.read({"a": 1}, first.headers["ETag"])
    assert (again.status_code, again.body) == (304, "")
    assert answers.read({"a": 2}, first.headers["ETag"]).status_code == 200


def test_chalices_own_refusals_become_problems_their_headers_kept():
    said = Response(
        body={"Code": "MethodNotAllowedError", "Message": "Unsupported method: PUT"},
        status_code=405,
        headers={"Allow": "GET, POST"},
    )
    r = answers.chalice_problems(None, lambda _event: said)
    assert (r.status_code, r.headers["Allow"], r.headers["Content-Type"]) == (
        405,
        "GET, POST",
        "application/problem+json",
    )
    assert (r.body["title"], r.body["detail"]) == (
        "Method Not Allowed",
        "Unsupported method: PUT: this path takes GET, POST only",
    )
    mine = Response(body={"campaigns": []}, status_code=200)
    assert answers.chalice_problems(None, lambda _event: mine) is mine


def test_the_document_is_served_as_kept_as_json_with_no_key():
    r = app.app.routes["/openapi.json"]["GET"].view_function()
    assert (r.status_code, r.headers["Content-Type"]) == (200, "application/json")
    assert r.body == openapi.PATH.read_text(encoding="utf-8")
    assert json.loads(r.body)["openapi"] == "3.1.0"


def test_the_document_is_read_once_per_container():
    assert openapi.document() is openapi.document()


def test_every_resources_routes_register_on_a_second_app_as_on_the_first():
    """Chalice's blueprint loses its routes' methods when registered twice (its registration pops them from
    what it keeps), and the local stack's functions each import app.py: every app gets fresh blueprints."""
    from chalice import Chalice

    from chalicelib.api import (
        campaigns,
        console,
        console_campaigns,
        console_digests,
        console_events,
        console_people,
        console_send,
        console_settings,
        console_suppressions,
        console_webhooks,
        digests,
        pages,
        suppressions,
        tenant,
        uploads,
        webhooks,
    )

    def methods(app: Chalice) -> dict[str, list[str]]:
        return {path: sorted(entries) for path, entries in app.routes.items()}

    built = []
    for name in ("first", "second"):
        other = Chalice(app_name=name)
        for resource in (
            pages,
            console,
            console_campaigns,
            console_digests,
            console_people,
            console_send,
            console_settings,
            console_suppressions,
            console_webhooks,
            console_events,
            campaigns,
            uploads,
            suppressions,
            tenant,
            digests,
            webhooks,
        ):
            other.register_blueprint(resource.routes())
        built.append(methods(other))
    assert built[0] == built[1] == methods(app.app)
    assert built[1]["/unsubscribe/{token}"] == ["GET", "POST"] and built[1]["/suppressions"] == ["GET", "POST"]
