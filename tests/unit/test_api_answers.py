"""How app.py answers the tenant API: an error is an RFC 9457 problem (chalicelib/control/problems.py), in one
place (`_answer`), the report's included; and the OpenAPI document is served as it is kept."""

import json
from types import SimpleNamespace

import pytest

import app
from chalicelib.control import openapi
from chalicelib.feedback.reports import Answer


def test_an_error_answer_is_a_problem_with_its_error_kept_and_its_own_headers():
    r = app._answer(Answer(429, {"error": "retry later", "retryAfterSeconds": 30}, {"Retry-After": "30"}))
    assert r.status_code == 429
    assert r.headers == {
        "Cache-Control": "no-store",
        "Retry-After": "30",
        "Content-Type": "application/problem+json",
    }
    assert r.body == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "retry later",
        "error": "retry later",
        "retryAfterSeconds": 30,
    }


def test_a_success_is_answered_as_it_was():
    r = app._answer(Answer(200, {"ok": True}))
    assert (r.status_code, r.headers, r.body) == (200, {"Cache-Control": "no-store"}, {"ok": True})


def test_the_report_answers_through_the_same(monkeypatch: pytest.MonkeyPatch):
    reports = SimpleNamespace(campaign=lambda authorization, campaign_id: Answer(404, {"error": "not found"}))
    monkeypatch.setattr(app.wiring, "container", lambda: SimpleNamespace(reports=reports))
    monkeypatch.setattr(app.app, "current_request", None, raising=False)  # set by Chalice for each request
    r = app.campaign_report("spring")
    assert (r.status_code, r.headers["Content-Type"], r.body["title"], r.body["detail"]) == (
        404,
        "application/problem+json",
        "Not Found",
        "not found",
    )


def test_the_document_is_served_as_kept_as_json_with_no_key():
    r = app.openapi_document()
    assert (r.status_code, r.headers["Content-Type"]) == (200, "application/json")
    assert r.body == openapi.PATH.read_text(encoding="utf-8")
    assert json.loads(r.body)["openapi"] == "3.1.0"


def test_the_document_is_read_once_per_container():
    assert openapi.document() is openapi.document()
