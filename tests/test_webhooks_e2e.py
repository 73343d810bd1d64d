"""Webhook endpoints over the tenant API on the local stack, tested against a real receiver on loopback:
its requests verified with the Standard Webhooks library and the secret shown at registration."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook

from chalicelib import wiring

pytestmark = pytest.mark.e2e


class Receiver:
    """An HTTP server on loopback that keeps every request and answers with the statuses it is given."""

    def __init__(self, statuses=(200,)):
        self.requests: list[tuple[dict[str, str], str]] = []
        self.statuses = list(statuses)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _call(method, url, key=None, body=None):
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, method=method)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _tenants(stack, uid):
    c = wiring.container()
    keys = {}
    for user in (f"hooks-{uid}", f"other-{uid}"):
        sender = {"region": "us-east-1", "ratePerSecond": "5", "emailAddress": f"n@{user}.example", "fromName": "N"}
        from chalicelib.core.message_parser import parse_sender

        c.tenants.accept(user, "free", parse_sender({"sender": sender}, []), c.ses.account_of)
        keys[user] = c.reports.issue_key(user)
    return keys[f"hooks-{uid}"], keys[f"other-{uid}"]


def test_a_tenant_registers_tests_and_removes_an_endpoint_and_its_receiver_verifies_the_signature(stack, uid, receiver):
    key, other = _tenants(stack, uid)
    base = f"{stack.api_url}/webhooks"
    assert _call("POST", base, None, {"url": receiver.url})[0] == 401
    status, added = _call("POST", base, key, {"url": receiver.url, "eventTypes": ["bounced", "complained"]})
    assert status == 201, added
    assert added["secret"].startswith("whsec_") and added["eventTypes"] == ["bounced", "complained"]
    endpoint = added["id"]

    status, listed = _call("GET", base, key)
    assert status == 200 and [e["id"] for e in listed["endpoints"]] == [endpoint]
    assert "secret" not in json.dumps(listed)  # shown once, never listed
    assert _call("GET", base, other)[1] == {"endpoints": []}  # another tenant sees none of them
    assert _call("POST", f"{base}/{endpoint}/test", other)[0] == 404
    assert _call("DELETE", f"{base}/{endpoint}", other)[0] == 404

    status, tested = _call("POST", f"{base}/{endpoint}/test", key)
    assert status == 200 and tested["ok"] and tested["status"] == 200, tested
    ((headers, body),) = receiver.requests
    payload = Webhook(added["secret"]).verify(body, headers)  # the receiver's check, by the spec's library
    assert payload["type"] == "moonsend.test" and payload["data"] == {"endpoint": endpoint}
    assert headers["webhook-id"] == tested["webhookId"]

    assert _call("DELETE", f"{base}/{endpoint}", key) == (200, {"removed": endpoint})
    assert _call("POST", f"{base}/{endpoint}/test", key)[0] == 404
    assert len(receiver.requests) == 1


def test_a_private_address_is_refused_even_on_the_local_stack_and_a_dead_receiver_is_reported(stack, uid):
    key, _ = _tenants(stack, uid)
    base = f"{stack.api_url}/webhooks"
    status, refused = _call("POST", base, key, {"url": "https://169.254.169.254/latest/meta-data"})
    assert status == 400 and "not a public address" in refused["error"]
    dead = Receiver()
    url = dead.url
    dead.close()  # nothing listens there any more
    status, added = _call("POST", base, key, {"url": url})
    assert status == 201
    status, tested = _call("POST", f"{base}/{added['id']}/test", key)
    assert status == 200 and not tested["ok"] and tested["status"] is None and "Connection" in tested["error"]


def test_moonsend_webhook_add_list_test_remove_from_the_command_line(stack, uid, receiver, capsys, monkeypatch):
    from infra import cli
    from infra.cli import main

    # The CLI builds the app's objects afresh (wiring.reset, which drops every shared client); here it uses
    # this session's, already made from the same environment, so no other test finds its clients gone.
    monkeypatch.setattr(cli, "_container", wiring.container)

    _tenants(stack, uid)
    user, common = f"hooks-{uid}", ["--endpoint", stack.endpoint, "--stage", "local"]
    assert main(["webhook", "add", "--user", user, "--url", receiver.url, "--events", "sent,bounced", *common]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["eventTypes"] == ["sent", "bounced"] and added["secret"].startswith("whsec_")
    assert main(["webhook", "test", "--user", user, "--id", added["id"], *common]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == 200
    headers, body = receiver.requests[0]
    Webhook(added["secret"]).verify(body, headers)
    assert main(["webhook", "list", "--user", user, *common]) == 0
    assert [e["id"] for e in json.loads(capsys.readouterr().out)["endpoints"]] == [added["id"]]
    assert main(["webhook", "remove", "--user", user, "--id", added["id"], *common]) == 0
    assert main(["webhook", "add", "--user", user, "--url", "https://10.0.0.1/x", *common]) == 1
