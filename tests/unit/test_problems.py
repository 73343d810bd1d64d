"""RFC 9457 problem details: the shape every tenant-API answer of status 400 and up takes (app.py `_answer`)."""

from chalicelib.api.problems import PROBLEM_JSON, is_problem, problem


def test_an_error_becomes_a_problem_and_keeps_its_error_and_extra_members():
    body = {"error": "retry later", "retryAfterSeconds": 30}
    assert problem(429, body) == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "retry later",
        "error": "retry later",
        "retryAfterSeconds": 30,
    }


def test_the_given_body_is_not_changed():
    body = {"error": "not found"}
    problem(404, body)
    assert body == {"error": "not found"}


def test_an_answer_without_an_error_takes_its_message_as_detail_and_error():
    shaped = problem(409, {"campaign": "c", "ok": False, "message": "already paused"})
    assert (shaped["detail"], shaped["error"], shaped["ok"], shaped["campaign"]) == (
        "already paused",
        "already paused",
        False,
        "c",
    )


def test_an_answer_with_neither_error_nor_message_says_its_reason_phrase():
    shaped = problem(400, {})
    assert (shaped["title"], shaped["detail"], shaped["error"]) == ("Bad Request", "Bad Request", "Bad Request")


def test_the_status_member_is_the_answers_status_whatever_the_body_said():
    assert problem(404, {"error": "x", "status": 200})["status"] == 404


def test_a_routes_own_type_and_title_are_kept():
    shaped = problem(409, {"error": "kept", "type": "https://moonsend.example/problems/kept", "title": "Kept"})
    assert (shaped["type"], shaped["title"]) == ("https://moonsend.example/problems/kept", "Kept")


def test_a_status_outside_the_registry_is_titled_by_its_class():
    assert problem(499, {"error": "x"})["title"] == "Client Error"
    assert problem(599, {"error": "x"})["title"] == "Server Error"


def test_only_statuses_from_400_are_problems():
    assert PROBLEM_JSON == "application/problem+json"
    assert [s for s in (200, 201, 202, 304, 399, 400, 404, 429, 500) if is_problem(s)] == [400, 404, 429, 500]
