"""Hostile input at the edges, through the local stack (whose DynamoDB refuses a key over its size as AWS's
does): a producer's over-long address loses no other recipient, and the tenant API answers 4xx, never 500,
to what it cannot use (an empty or over-long key id, JSON nested past what can be read, path ids and
cursors longer than a key)."""

import json
import urllib.error
import urllib.request
from http import HTTPStatus

import jsonschema
import pytest

from chalicelib import wiring
from chalicelib.control import openapi
from chalicelib.control.api_keys import new_key
from chalicelib.core.contract import Sender
from chalicelib.stores.ledger_model import REJECTED, SENT
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import read_sends
from tests.e2e.test_pipeline_e2e import _tenant

pytestmark = pytest.mark.e2e

LONG = "é" * 1100  # 1,100 characters, 2,200 bytes: past both key sizes however they are counted
NESTED = b"[" * 10_000 + b"]" * 10_000


def _call(method, url, key=None, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Authorization": key if key and key.startswith("Bearer") else f"Bearer {key}"} if key else {}
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        text = err.read()
        try:
            return err.code, json.loads(text or b"{}")
        except ValueError:
            return err.code, {"raw": text.decode("utf-8", "replace")}


def _problem(status, detail):
    """An error as the API answers it: an RFC 9457 problem keeping its `error` (docs/api.md)."""
    title = HTTPStatus(status).phrase
    return {"type": "about:blank", "title": title, "status": status, "detail": detail, "error": detail}


def test_an_address_too_long_to_be_a_key_is_rejected_alone_and_its_messages_others_are_sent(stack, uid):
    user, long_address = f"long-{uid}", "a" * 1090 + "@x.example"
    assert len(long_address.encode()) == 1100
    spec = CampaignSpec(user, _tenant(stack, uid, rate=50, ses_rate=50), "Hi", "<p>Hi</p>", "c")
    recipients = [{"email": f"r{i}@example.org"} for i in range(3)]
    recipients.insert(1, {"email": long_address})
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, recipients))
    assert stack.wait_until_drained(60)

    sent = sorted(s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user)
    assert sent == [f"r{i}@example.org" for i in range(3)]
    c = wiring.container()
    counts = c.stats.get(user, "c")
    assert (counts["queued"], counts["sent"], counts["rejected"]) == (3, 3, 1)
    (rejected,) = list(c.ledger.entries(user, "c", REJECTED))
    assert rejected.reason == "recipients[1].email: not an email address (longer than 254 characters: 1,100)"
    assert rejected.email.startswith("a" * 64 + "... (1,100 bytes, sha256 ")
    assert {e.email for e in c.ledger.entries(user, "c", SENT)} == {f"r{i}@example.org" for i in range(3)}


@pytest.fixture
def tenant_key(stack, uid):
    c = wiring.container()
    user = f"api-{uid}"
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "N", None, None, None, 1.0), c.ses.account_of)
    c.stats.add(user, "spring", queued=1)
    return c.api_keys.replace_all(user)


ROUTES = [
    ("GET", "/campaigns/spring/report"),
    ("GET", "/campaigns/spring/recipients"),
    ("POST", "/campaigns/spring/pause"),
    ("POST", "/campaigns/spring/retry-failed"),
    ("POST", "/tenant/pause"),
    ("GET", "/digests/weekly"),
    ("POST", "/digests/weekly/run"),
    ("GET", "/webhooks"),
    ("POST", "/webhooks"),
    ("DELETE", "/webhooks/we_x"),
    ("GET", "/campaigns"),
    ("GET", "/campaigns/spring"),
    ("GET", "/suppressions"),
    ("POST", "/suppressions"),
    ("DELETE", "/suppressions/ann%40example.org"),
    ("GET", "/tenant"),
    ("GET", "/events"),
]


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer msk__x",  # an empty user id
        "Bearer msk_" + "YWFh" * 1000 + "_x",  # a 3,000-character one
        "Bearer " + new_key("x" * 3000),
        "Bearer msk_4pyT_x",  # not an id's alphabet
        "Bearer msk_%%%_x",
        "Bearer ",
        "Basic abc",
    ],
)
def test_a_key_that_names_no_possible_tenant_is_a_404_on_every_route(stack, authorization):
    for method, path in ROUTES:
        status, body = _call(method, stack.api_url + path, authorization)
        assert (status, body) == (404, _problem(404, "not found")), (method, path)


def test_a_body_nested_past_what_json_reads_is_a_400_and_an_anonymous_ones_is_never_read(stack, tenant_key):
    for path in ("/campaigns/spring/retry-failed", "/tenant/pause", "/webhooks"):
        assert _call("POST", stack.api_url + path, raw=NESTED)[0] == 401
        assert _call("POST", stack.api_url + path, "Bearer msk__x", raw=NESTED)[0] == 404
        status, body = _call("POST", stack.api_url + path, tenant_key, raw=NESTED)
        assert (status, body) == (400, _problem(400, "body: nested too deeply to read")), path


@pytest.mark.parametrize("long_id", ["c" * 3000, LONG, "..x", "_unattributed"])
def test_a_path_id_no_campaign_digest_or_endpoint_can_have_is_a_404(stack, tenant_key, long_id):
    base = stack.api_url
    for method, path in [
        ("GET", f"/campaigns/{long_id}/report"),
        ("GET", f"/campaigns/{long_id}/recipients"),
        ("POST", f"/campaigns/{long_id}/pause"),
        ("POST", f"/campaigns/{long_id}/cancel"),
        ("POST", f"/campaigns/{long_id}/retry-failed"),
        ("GET", f"/digests/{long_id}"),
        ("POST", f"/digests/{long_id}/run"),
    ]:
        status, body = _call(method, base + urllib.request.quote(path), tenant_key)
        assert (status, body) == (404, _problem(404, "not found")), (method, path[:40])
    for method, suffix in [("DELETE", ""), ("POST", "/test"), ("POST", "/replay")]:
        path = urllib.request.quote(f"/webhooks/{long_id}{suffix}")
        status, body = _call(method, base + path, tenant_key)
        assert (status, body) == (404, _problem(404, "no such webhook endpoint")), (method, suffix)


@pytest.mark.parametrize("after", ["a" * 1025, "€" * 342, "x\n"])
def test_a_cursor_longer_than_a_key_is_a_400(stack, tenant_key, after):
    url = f"{stack.api_url}/campaigns/spring/recipients?after={urllib.request.quote(after)}"
    status, body = _call("GET", url, tenant_key)
    assert status == 400 and body["error"].startswith("after: not a cursor")
    fine = f"{stack.api_url}/campaigns/spring/recipients?after={urllib.request.quote('a' * 1024)}"
    assert _call("GET", fine, tenant_key) == (200, {"campaign": "spring", "recipients": [], "next": None})


# Raw query strings, as a hostile client sends them: 10,000 characters, bytes that are not UTF-8, control
# characters, cursors of nothing.
HOSTILE_QUERIES = [
    "after=" + "A" * 10_000,
    "after=%FF%FE%FD",
    "after=%00",
    "after=" + "QUFB" * 30,  # base64 of "AAA...": a cursor of nothing
    "limit=" + "9" * 10_000,
    "limit=%FF",
    "state=%FF&type=%FF&reason=%FF",
    "since=%FF",
    "prefix=" + "p" * 10_000,
    "prefix=%0A%0D",
    "campaign=%FF",
    "timelineAfter=%FF",
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=lambda q: q[:24])
def test_a_hostile_query_string_on_a_list_is_a_400_problem_never_a_5xx(stack, tenant_key, query):
    for path in ("/campaigns", "/campaigns/spring", "/suppressions", "/events"):
        status, body = _call("GET", f"{stack.api_url}{path}?{query}", tenant_key)
        assert status in (200, 400), (path, query[:40], status, body)
        if status == 400:
            assert body["type"] == "about:blank" and body["status"] == 400 and body["detail"], (path, query[:40])


@pytest.mark.parametrize(
    "address", ["a%00b@example.org", "%FF%FE@example.org", "a" * 3000 + "%40example.org", "ann%0D%0A@example.org"]
)
def test_removing_an_address_with_control_characters_or_no_utf_8_is_a_404(stack, tenant_key, address):
    status, body = _call("DELETE", f"{stack.api_url}/suppressions/{address}", tenant_key)
    assert (status, body["detail"]) == (404, "the address is not on this tenant's suppression list")


def test_adding_addresses_with_control_characters_is_a_400_naming_each(stack, tenant_key):
    given = ["ann@example.org", "bob\x00@example.org", "carl@example.org\r\nBcc: x@evil.example", "\u202eevil@x.org"]
    status, body = _call("POST", f"{stack.api_url}/suppressions", tenant_key, {"addresses": given})
    assert status == 400 and [i["index"] for i in body["invalid"]] == [1, 2, 3]
    assert _call("GET", f"{stack.api_url}/suppressions", tenant_key)[1]["suppressions"] == []


@pytest.mark.parametrize(
    "path",
    ["/nope", "/api/campaigns", "/campaigns/a/b/c", "/OPENAPI.JSON", "/campaigns/%2e%2e/x/y", "/x" * 1000],
)
def test_a_path_the_api_does_not_have_is_a_404_problem_from_the_stages_template(stack, path):
    problem_schema = json.loads(openapi.document())["components"]["schemas"]["Problem"]
    for method in ("GET", "POST"):
        req = urllib.request.Request(stack.api_url + path, data=b"{}" if method == "POST" else None, method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)
        problem = json.loads(refused.value.read())
        jsonschema.validate(problem, problem_schema)
        assert (refused.value.code, problem["status"], refused.value.headers["Content-Type"]) == (
            404,
            404,
            "application/problem+json",
        )
        assert problem["requestId"] == refused.value.headers["x-amzn-RequestId"]


def test_a_method_a_path_does_not_take_is_a_405_problem_naming_what_it_takes(stack):
    status, problem = _call("GET", f"{stack.api_url}/suppressions/ann%40example.org", key="msk_whatever")
    assert (status, problem["status"], problem["detail"]) == (
        405,
        405,
        "Unsupported method: GET: this path takes DELETE only",
    )
