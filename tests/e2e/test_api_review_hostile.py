"""Hostile query strings found by the review of the tenant API (issue 41), through the local stack: each a 400
problem on every list, never a 5xx. `limit=²` was a 500 here (a ValueError); a cursor of nothing and a
suppressions cursor given with another prefix are refused by DynamoDB (a ValidationException: a 500 on AWS),
though moto answers both."""

import urllib.parse

import pytest

from tests.e2e.test_api_hostile import _call, tenant_key  # noqa: F401 (the fixture)

pytestmark = pytest.mark.e2e

LISTS = ("/campaigns", "/suppressions", "/events", "/campaigns/spring/recipients")
QUERIES = [
    "limit=%C2%B2",  # ², a digit to str.isdigit that int() refuses
    "limit=%C2%B9%E2%81%B0",  # ¹⁰
    "limit=%D9%A1%D9%A2",  # Arabic-Indic 12
]
EMPTY_CURSORS = ["after=====", "after=!!!!", "after=.", "timelineAfter====="]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q)
def test_a_limit_that_is_not_ascii_digits_is_a_400_problem_on_every_list(stack, tenant_key, query):  # noqa: F811
    for path in LISTS:
        status, body = _call("GET", f"{stack.api_url}{path}?{query}", tenant_key)
        assert (status, body.get("type"), body.get("detail", "").split(":")[0]) == (400, "about:blank", "limit"), path


@pytest.mark.parametrize("query", EMPTY_CURSORS, ids=lambda q: q)
def test_a_cursor_of_nothing_is_a_400_problem_on_every_list(stack, tenant_key, query):  # noqa: F811
    for path in ("/campaigns", "/suppressions", "/events", "/campaigns/spring"):
        status, body = _call("GET", f"{stack.api_url}{path}?{query}", tenant_key)
        if query.startswith("timelineAfter") != (path == "/campaigns/spring"):
            continue
        assert (status, body.get("type")) == (400, "about:blank"), (path, status, body)


def test_a_suppressions_cursor_with_another_prefix_is_a_400_and_with_its_own_goes_on(stack, tenant_key):  # noqa: F811
    addresses = [f"m{i}@example.org" for i in range(5)] + ["zed@example.org"]
    assert _call("POST", f"{stack.api_url}/suppressions", tenant_key, {"addresses": addresses})[0] == 200
    status, first = _call("GET", f"{stack.api_url}/suppressions?prefix=m&limit=2", tenant_key)
    assert status == 200 and first["next"]
    after = urllib.parse.quote(first["next"])
    for prefix in ("z", "a", "m4"):
        status, body = _call("GET", f"{stack.api_url}/suppressions?prefix={prefix}&after={after}", tenant_key)
        assert (status, body.get("type")) == (400, "about:blank"), prefix
    status, rest = _call("GET", f"{stack.api_url}/suppressions?prefix=M&after={after}", tenant_key)
    assert status == 200 and [s["email"] for s in rest["suppressions"]] == [f"m{i}@example.org" for i in range(2, 5)]
