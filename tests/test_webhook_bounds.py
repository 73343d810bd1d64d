"""Issue 38, findings 4 and 5: a tenant's webhooks within bounds. At most ten endpoints however many adds
come at once; `GET /webhooks` counts parked deliveries up to a bound; replay and remove run as background
jobs (webhook_jobs) that go on past a Lambda's time and may run twice without sending two different
requests for one parked delivery."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from chalicelib import wiring
from chalicelib.core.webhook_contract import MAX_ENDPOINTS_PER_TENANT

pytestmark = pytest.mark.e2e


def _call(method, url, key=None, body=None):
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, method=method)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    for _ in range(20):
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")
        except (urllib.error.URLError, ConnectionResetError):  # many at once: past the listen backlog, not taken
            continue
    raise AssertionError(f"{method} {url}: no answer")


def _tenant(user):
    from chalicelib.core.message_parser import parse_sender

    c = wiring.container()
    sender = {"region": "us-east-1", "ratePerSecond": "5", "emailAddress": f"n@{user}.example", "fromName": "N"}
    c.tenants.accept(user, "free", parse_sender({"sender": sender}, []), c.ses.account_of)
    return c.reports.issue_key(user)


def test_twenty_adds_at_once_leave_ten_endpoints_and_a_removal_makes_room_for_one(stack, uid):
    key = _tenant(f"cap-{uid}")
    base = f"{stack.api_url}/webhooks"
    start = threading.Barrier(20)
    answers: list[int] = []

    def add(i: int) -> None:
        start.wait()
        answers.append(_call("POST", base, key, {"url": f"http://127.0.0.1:9/{i}"})[0])

    threads = [threading.Thread(target=add, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    listed = _call("GET", base, key)[1]["endpoints"]
    assert len(listed) == MAX_ENDPOINTS_PER_TENANT
    assert sorted(answers) == [201] * 10 + [400] * 10
    status, refused = _call("POST", base, key, {"url": "http://127.0.0.1:9/x"})
    assert status == 400 and "at most 10 endpoints" in refused["error"]
    # A removal frees its place, once: the same endpoint removed twice at once counts once.
    gone = listed[0]["id"]
    removals: list[int] = []
    twice = threading.Barrier(2)

    def remove() -> None:
        twice.wait()
        removals.append(_call("DELETE", f"{base}/{gone}", key)[0])

    pair = [threading.Thread(target=remove) for _ in range(2)]
    for t in pair:
        t.start()
    for t in pair:
        t.join()
    assert sorted(removals) == [200, 404]
    assert [_call("POST", base, key, {"url": f"http://127.0.0.1:9/again{i}"})[0] for i in range(2)] == [201, 400]
