"""Webhooks on the local stack, against a real receiver on loopback: endpoints over the tenant API and the
CLI, and the events of real campaigns delivered (the ledger's stream, the delivery queue, deliver_webhooks),
every request verified with the Standard Webhooks library and the secret shown at registration.

The local stage retries a failed delivery after 1, 1, 2 and 2 s (MOONSEND_WEBHOOK_RETRY_S), so that the
fifth failure, which disables an endpoint, comes within a test."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from standardwebhooks.webhooks import Webhook

from chalicelib import wiring
from chalicelib.core.message_parser import parse_sender
from infra.producer import CampaignSpec, messages, publish
from infra.webhook_receiver import WebhookReceiver as Receiver
from tests.conftest import eventually, free_tenant

pytestmark = pytest.mark.e2e


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

        c.tenants.accept(user, "free", parse_sender({"sender": sender}, []), c.ses.account_of)
        keys[user] = c.api_keys.replace_all(user)
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
    assert _call("GET", base, other)[1] == {"endpoints": [], "jobs": []}  # another tenant sees none of them
    assert _call("POST", f"{base}/{endpoint}/test", other)[0] == 404
    assert _call("DELETE", f"{base}/{endpoint}", other)[0] == 404

    status, tested = _call("POST", f"{base}/{endpoint}/test", key)
    assert status == 200 and tested["ok"] and tested["status"] == 200, tested
    ((headers, body),) = receiver.requests
    payload = Webhook(added["secret"]).verify(body, headers)  # the receiver's check, by the spec's library
    assert payload["type"] == "moonsend.test" and payload["data"] == {"endpoint": endpoint}
    assert headers["webhook-id"] == tested["webhookId"]
    # One test request per endpoint every 10 s: the API is not a way to send a stream of requests anywhere.
    status, again = _call("POST", f"{base}/{endpoint}/test", key)
    assert status == 429 and "every 10 s" in again["error"] and len(receiver.requests) == 1

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


def _simulator(label):
    """SES's mailbox simulator addresses with a label of the test's own (a bounce is suppressed for every
    tenant after: another test's bounce would be `suppressed` here)."""
    return tuple(f"{n}+{label}@simulator.amazonses.com" for n in ("bounce", "complaint", "success"))


def _sender(stack, user):
    """A free-plan tenant sending from the platform's account, with its API key (for the tenant API)."""
    return free_tenant(stack, user), wiring.container().api_keys.replace_all(user)


def _campaign(stack, user, sender, campaign, recipients):
    spec = CampaignSpec(user, sender, "Hi", "<p>Hi</p>", campaign)
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, [{"email": e} for e in recipients]),
    )


def _add(stack, key, url, **fields):
    status, added = _call("POST", f"{stack.api_url}/webhooks", key, {"url": url, **fields})
    assert status == 201, added
    return added


def _simulated(bounce, complaint, ok):
    """What the mailbox simulator makes of a campaign to these three: each sent; success and complaint
    delivered; bounce bounced; complaint complained."""
    return sorted(
        [("sent", a) for a in (bounce, complaint, ok)]
        + [("delivered", ok), ("delivered", complaint), ("bounced", bounce), ("complained", complaint)]
    )


def test_every_event_of_a_campaign_reaches_the_receiver_signed_in_requests_of_its_size(stack, uid):
    user = f"hooks-all-{uid}"
    sender, key = _sender(stack, user)
    receiver = Receiver()
    added = _add(stack, key, receiver.url, maxEventsPerRequest=3)
    receiver.secret = added["secret"]
    # One event type only, to another endpoint: it gets that one and no other.
    bounces = Receiver()
    bounces.secret = _add(stack, key, bounces.url, eventTypes=["bounced"])["secret"]
    # A rejected recipient is an event too (recorded when the campaign is taken in).
    addresses = _simulator(uid)
    _campaign(stack, user, sender, "spring", [*addresses, "not-an-address"])
    try:
        expected = sorted([*_simulated(*addresses), ("rejected", "not-an-address")])
        assert eventually(lambda: receiver.events("spring") == expected), receiver.events("spring")
        assert eventually(lambda: bounces.events("spring") == [("bounced", addresses[0])])
        for headers, body in receiver.requests:  # each verified by the receiver, and of at most 3 events
            assert 1 <= len(Webhook(added["secret"]).verify(body, headers)["data"]["events"]) <= 3
        assert receiver.repeats == []
        ids = [e["id"] for events in receiver.accepted.values() for e in events]
        assert len(ids) == len(set(ids)) == len(expected)
        (rejected,) = [e for events in receiver.accepted.values() for e in events if e["type"] == "rejected"]
        assert rejected["reason"].endswith(".email: not an email address")
    finally:
        receiver.close()
        bounces.close()


def test_a_receiver_failing_three_times_gets_every_event_once_under_the_same_webhook_id(stack, uid):
    user = f"hooks-retry-{uid}"
    sender, key = _sender(stack, user)
    receiver = Receiver(statuses=(500, 500, 500, 200))
    receiver.secret = _add(stack, key, receiver.url, maxEventsPerRequest=100)["secret"]
    addresses = _simulator(uid)
    _campaign(stack, user, sender, "retried", list(addresses))
    try:
        expected = _simulated(*addresses)
        assert eventually(lambda: receiver.events("retried") == expected), receiver.events("retried")
        statuses = [h["webhook-id"] for h, _ in receiver.requests]
        failed_ids = set(statuses[:3])
        assert failed_ids <= set(receiver.accepted)  # every failed request came back, as itself
        assert receiver.repeats == []  # and none was accepted twice
        endpoints = _call("GET", f"{stack.api_url}/webhooks", key)[1]["endpoints"]
        assert [e["enabled"] for e in endpoints] == [True]
    finally:
        receiver.close()


def test_an_endpoint_that_keeps_failing_is_disabled_and_its_events_wait_for_replay(stack, uid, capsys, monkeypatch):
    user = f"hooks-dead-{uid}"
    sender, key = _sender(stack, user)
    receiver = Receiver(statuses=(503,))
    added = _add(stack, key, receiver.url, eventTypes=["sent"])
    receiver.secret = added["secret"]
    base = f"{stack.api_url}/webhooks"
    bounce, _, ok = _simulator(uid)
    try:
        _campaign(stack, user, sender, "first", [ok])

        def endpoint():
            (e,) = _call("GET", base, key)[1]["endpoints"]
            return e

        assert eventually(lambda: not endpoint()["enabled"] and endpoint()["parked"] == 1, 60)
        assert endpoint()["disabledReason"] == "5 attempts of a delivery failed; the last: HTTP 503"
        attempts = [h["webhook-id"] for h, _ in receiver.requests]
        assert len(attempts) == 5 and len(set(attempts)) == 1  # one delivery, tried five times

        # While disabled, events are parked at once: no request is made.
        _campaign(stack, user, sender, "second", [bounce])
        assert eventually(lambda: endpoint()["parked"] == 2)
        assert len(receiver.requests) == 5

        # Another tenant cannot replay it; the tenant can, once its receiver works again.
        _, other = _sender(stack, f"hooks-dead-other-{uid}")
        assert _call("POST", f"{base}/{added['id']}/replay", other)[0] == 404
        receiver.statuses = [200]
        status, replayed = _call("POST", f"{base}/{added['id']}/replay", key)
        assert status == 200 and replayed["enabled"] is True and replayed["job"]["kind"] == "replay"
        assert (replayed["replayed"], replayed["replayedIsLowerBound"]) == (2, False)  # what the job will replay
        # The replay runs in the background (webhook_jobs); the listing shows how far it got.
        assert eventually(lambda: _call("GET", base, key)[1]["jobs"][0]["state"] == "done")
        assert _call("GET", base, key)[1]["jobs"][0]["done"] == 2
        expected = [("sent", bounce), ("sent", ok)]
        assert eventually(lambda: receiver.events() == expected), receiver.events()
        assert attempts[0] in receiver.accepted  # the first delivery, under the id it always had

        # The CLI replays too, and waits for its job (nothing is parked now).
        from infra import cli
        from infra.cli import main

        monkeypatch.setattr(cli, "_container", wiring.container)
        common = ["--endpoint", stack.endpoint, "--stage", "local"]
        assert main(["webhook", "replay", "--user", user, "--id", added["id"], *common]) == 0
        assert json.loads(capsys.readouterr().out)["replayed"] == 0
        assert main(["webhook", "replay", "--no-wait", "--user", user, "--id", added["id"], *common]) == 0
        assert json.loads(capsys.readouterr().out)["replayed"] == 0  # the line it always printed
    finally:
        receiver.close()


def test_a_receiver_answering_410_disables_its_endpoint_at_once(stack, uid):
    user = f"hooks-gone-{uid}"
    sender, key = _sender(stack, user)
    receiver = Receiver(statuses=(410,))
    _add(stack, key, receiver.url, eventTypes=["sent"])
    try:
        _campaign(stack, user, sender, "gone", [_simulator(uid)[2]])

        def endpoint():
            return _call("GET", f"{stack.api_url}/webhooks", key)[1]["endpoints"][0]

        assert eventually(lambda: not endpoint()["enabled"])
        assert endpoint()["disabledReason"] == "the endpoint answered 410 Gone"
        assert len(receiver.requests) == 1
    finally:
        receiver.close()


def test_a_receiver_that_hangs_delays_neither_sending_nor_another_tenants_webhooks(stack, uid):
    slow_user, fast_user = f"hooks-slow-{uid}", f"hooks-fast-{uid}"
    slow_started, fast_got = threading.Event(), threading.Event()
    slow_saw: list[bool] = []

    def hang(_headers):
        # The slow receiver answers only once the other tenant's receiver has its event (or 10 s later).
        slow_started.set()
        slow_saw.append(fast_got.wait(10))

    slow = Receiver(before_answer=hang)
    fast = Receiver(before_answer=lambda _h: fast_got.set())
    slow_sender, slow_key = _sender(stack, slow_user)
    fast_sender, fast_key = _sender(stack, fast_user)
    _add(stack, slow_key, slow.url, eventTypes=["sent"])
    _add(stack, fast_key, fast.url, eventTypes=["sent"])
    try:
        _campaign(stack, slow_user, slow_sender, "s", [_simulator(uid)[2]])
        assert eventually(slow_started.is_set, 30)
        # While the slow receiver holds its request: the other tenant's campaign is sent, and its webhook
        # arrives.
        _campaign(stack, fast_user, fast_sender, "f", [_simulator(uid)[2]])
        assert eventually(fast_got.is_set, 30)
        # Counted as sent too (the drainer's counters are flushed once a second: the webhook may come first).
        stats = wiring.container().stats
        assert eventually(lambda: (counts := stats.get(fast_user, "f")) is not None and counts["sent"] == 1, 10)
        assert eventually(lambda: slow_saw, 15)
        assert slow_saw[0] is True  # the fast receiver had its event while the slow one was still holding
    finally:
        slow.close()
        fast.close()


def test_a_request_held_again_while_a_replay_runs_stays_held_for_the_next(stack, uid):
    held, user = wiring.container().held_requests, f"hooks-race-{uid}"
    held.hold(user, "ep_x", "msg_1", "body", 100.0)
    (read,) = held.held(user, "ep_x")
    held.hold(user, "ep_x", "msg_1", "body", 200.0)  # its replayed delivery failed again meanwhile
    assert held.remove(user, read) is False and held.count(user, "ep_x") == 1
    (again,) = held.held(user, "ep_x")
    assert held.remove(user, again) is True and held.count(user, "ep_x") == 0


def test_a_tenants_text_sqs_refuses_reaches_its_endpoint_escaped_and_stalls_no_other_tenants_webhooks(stack, uid):
    """Issue 37, finding 1: a strict template's rejection reason carries U+FFFF (the template's own words),
    which SQS refuses in a message. It must not hold the ledger's stream, and with it every tenant's
    webhooks, and it reaches the tenant as JSON's \\uffff."""
    strict_user, other_user = f"hooks-uffff-{uid}", f"hooks-bystander-{uid}"
    strict_sender, strict_key = _sender(stack, strict_user)
    other_sender, other_key = _sender(stack, other_user)
    strict, other = Receiver(), Receiver()
    strict.secret = _add(stack, strict_key, strict.url, eventTypes=["rejected"])["secret"]
    other.secret = _add(stack, other_key, other.url, eventTypes=["sent"])["secret"]
    try:
        spec = CampaignSpec(
            strict_user, strict_sender, "Hi", '<p>{{ x["\uffff"] }}</p>', "strict", options={"strict": True}
        )
        recipient = {"email": _simulator(uid)[2], "metadata": {"x": {}}}
        # The producer's JSON as any SDK writes it (ASCII, \uffff escaped): the template holds U+FFFF.
        bodies = [json.dumps(json.loads(m)) for m in messages(spec, [recipient])]
        publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], bodies)

        def rejected() -> bool:
            counts = wiring.container().stats.get(strict_user, "strict")
            return counts is not None and counts["rejected"] == 1

        assert eventually(rejected, 30)

        _campaign(stack, other_user, other_sender, "after", [_simulator(uid)[2]])
        assert eventually(lambda: other.events("after") == [("sent", _simulator(uid)[2])], 30), other.events()

        assert eventually(lambda: strict.events("strict") == [("rejected", _simulator(uid)[2])], 30), strict.events()
        ((headers, body),) = strict.requests
        assert "\\uffff" in body and "\uffff" not in body  # escaped: JSON text that reads the same
        (event,) = Webhook(strict.secret).verify(body, headers)["data"]["events"]
        assert "x.\uffff is undefined" in event["reason"]
    finally:
        strict.close()
        other.close()


class _Silent:
    """A receiver that accepts every connection and never answers: when each was opened."""

    def __init__(self) -> None:
        import socket

        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}/hooks"
        self.opened: list[float] = []
        self._held: list = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import time

        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.opened.append(time.time())
            self._held.append(conn)

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        for conn in self._held:
            conn.close()


def test_a_tenant_whose_receiver_never_answers_holds_deliver_webhooks_for_one_wave_then_waits_quiet(stack, uid):
    # Every request to a silent receiver holds 15 s of deliver_webhooks (20 at once for every tenant on AWS,
    # 5 pollers here). After the first is cut off, the endpoint is quiet: its deliveries and their retries
    # (5 s later) make no connection for QUIET_S, so the tenant's share of the function is one wave.
    import time

    from chalicelib.webhooks.deliverer import QUIET_S
    from infra.webhook_receiver import WebhookReceiver

    silent, fast = _Silent(), WebhookReceiver()
    slow_user, fast_user = f"hooks-silent-{uid}", f"hooks-other-{uid}"
    slow_sender, slow_key = _sender(stack, slow_user)
    fast_sender, fast_key = _sender(stack, fast_user)
    _add(stack, slow_key, silent.url, eventTypes=["sent"])
    _add(stack, fast_key, fast.url, eventTypes=["sent"])
    try:
        _campaign(stack, slow_user, slow_sender, "s", [f"r{i}@{slow_user}.example" for i in range(30)])
        assert eventually(lambda: silent.opened, 30)
        first = silent.opened[0]
        cut_off = first + 15  # the client's deadline: the endpoint is quiet from then
        # Past the first wave's retries (5 s after the cut-off), within the quiet.
        time.sleep(max(0.0, cut_off + 12 - time.time()))
        _campaign(stack, fast_user, fast_sender, "f", [f"r{i}@{fast_user}.example" for i in range(5)])
        assert eventually(lambda: len(fast.requests) >= 5, 30)  # the other tenant's webhooks arrive
        late = [round(t - cut_off, 1) for t in silent.opened if t > cut_off + 3]
        assert late == [], f"connections to the quiet endpoint after its cut-off (s after it): {late}"
        endpoint = wiring.container().webhook_endpoints.list(slow_user)[0]
        assert endpoint.quiet_until is not None and endpoint.quiet_until >= cut_off + QUIET_S - 5
        print(f"silent receiver: {len(silent.opened)} connections, all in the first wave")
    finally:
        silent.close()
        fast.close()
        # The quiet endpoint's deliveries wait out its quiet (minutes) in flight: purged, so that the tests
        # after this one on the stack do not wait for them (stack.wait_until_drained counts them).
        _purge_deliveries(stack)


def _purge_deliveries(stack) -> None:
    sqs = stack.client("sqs")
    queue = stack.settings.resources.webhooks_queue.name
    sqs.purge_queue(QueueUrl=sqs.get_queue_url(QueueName=queue)["QueueUrl"])
    assert stack.wait_until_drained(30)
