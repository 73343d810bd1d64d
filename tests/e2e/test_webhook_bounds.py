"""Issue 38, findings 4 and 5: a tenant's webhooks within bounds. At most ten endpoints however many adds
come at once; `GET /webhooks` counts parked deliveries up to a bound; replay and remove run as background
jobs (webhook_jobs) that go on past a Lambda's time and may run twice without sending two different
requests for one parked delivery."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from chalicelib import wiring
from chalicelib.core.webhook_contract import MAX_ENDPOINTS_PER_TENANT
from tests.conflicts import Conflicts
from tests.conftest import eventually
from tests.fakes.answered import answered

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
    return c.api_keys.replace_all(user)


def _twenty_adds_at_once(base, key):
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
    return sorted(answers)


def test_twenty_adds_at_once_leave_ten_endpoints_and_a_removal_makes_room_for_one(stack, uid):
    base = f"{stack.api_url}/webhooks"
    # Over the API (its server answers each request in a thread of its own), and straight to the tenant
    # API's object in this process, where the twenty start closer together.
    key = _tenant(f"cap-{uid}")
    assert _twenty_adds_at_once(base, key) == [201] * 10 + [400] * 10
    listed = _call("GET", base, key)[1]["endpoints"]
    assert len(listed) == MAX_ENDPOINTS_PER_TENANT
    registration, start, answers = wiring.container().webhook_registration, threading.Barrier(20), []

    def add(i: int) -> None:
        start.wait()
        url = f"http://127.0.0.1:9/{i}"
        answers.append(answered(lambda: registration.add(f"cap-direct-{uid}", {"url": url}), 201).status)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [201] * 10 + [400] * 10
    assert len(registration.list(f"cap-direct-{uid}")["endpoints"]) == MAX_ENDPOINTS_PER_TENANT
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


def _park_many(user, endpoint_id, n):
    """`n` deliveries parked for the endpoint as deliver_webhooks parks them (each its queue message, one
    event), written in batches; their webhook ids, in key order."""
    from chalicelib.stores.tables import bound
    from chalicelib.stores.webhooks import HeldModel
    from chalicelib.webhooks.deliveries import WebhookRequest

    c = wiring.container()
    model = bound(HeldModel, c.settings.resources.parked_deliveries_table.name, c.settings.region)
    now = time.time()
    ids = []
    with model.batch_write() as batch:
        for i in range(n):
            wid = f"msg_{i:06d}"
            event = {"id": f"evt_{i}", "type": "sent", "timestamp": "2026-11-26T00:00:00.000Z"}
            event |= {"campaignId": "parked", "recipient": f"r{i}@example.org"}
            payload = json.dumps(
                {"type": "moonsend.events", "timestamp": event["timestamp"], "data": {"events": [event]}}
            )
            body = WebhookRequest(user, endpoint_id, wid, payload, 1).to_message()
            batch.save(model(f"{user}#{endpoint_id}", wid, body=body, parked_at=now, expires_at=int(now) + 86400))
            ids.append(wid)
    return ids


def _disabled_endpoint(stack, key, user, url):
    status, added = _call("POST", f"{stack.api_url}/webhooks", key, {"url": url, "eventTypes": ["sent"]})
    assert status == 201, added
    assert wiring.container().webhook_endpoints.disable(user, added["id"], "HTTP 503", 0.0)
    return added


def _listed(stack, key):
    return _call("GET", f"{stack.api_url}/webhooks", key)[1]


def test_a_listing_counts_parked_deliveries_up_to_10000_and_a_removal_deletes_them_in_the_background(stack, uid):
    from chalicelib.control.webhook_registration import HELD_COUNT_BOUND

    user = f"bound-{uid}"
    key = _tenant(user)
    added = _disabled_endpoint(stack, key, user, "http://127.0.0.1:9/x")
    _park_many(user, added["id"], HELD_COUNT_BOUND + 1)
    parked = wiring.container().held_requests

    (listed,) = _listed(stack, key)["endpoints"]
    assert (listed["parked"], listed["parkedIsLowerBound"]) == (10_000, True)  # "10,000+"
    assert parked.count_upto(user, added["id"], 10_001, 10) == (10_001, False)  # exactly, under a higher bound

    status, removed = _call("DELETE", f"{stack.api_url}/webhooks/{added['id']}", key)
    assert status == 200 and removed["removed"] == added["id"]
    assert removed["job"]["kind"] == "remove" and removed["job"]["state"] == "running"
    assert _listed(stack, key)["endpoints"] == []  # removed at once; its deliveries go in the background

    def finished():
        (job,) = _listed(stack, key)["jobs"]
        return job if job["state"] == "done" else None

    assert eventually(finished, 120)
    assert finished()["done"] == 10_001 and finished()["endpoint"] == added["id"]
    assert parked.count(user, added["id"]) == 0


def test_a_replay_runs_in_the_background_and_every_parked_delivery_arrives_once_under_its_own_id(stack, uid):
    from infra.webhook_receiver import WebhookReceiver

    user = f"replay-{uid}"
    key = _tenant(user)
    receiver = WebhookReceiver()
    try:
        added = _disabled_endpoint(stack, key, user, receiver.url)
        receiver.secret = added["secret"]
        ids = _park_many(user, added["id"], 250)
        (listed,) = _listed(stack, key)["endpoints"]
        assert (listed["enabled"], listed["parked"], listed["parkedIsLowerBound"]) == (False, 250, False)

        status, replay = _call("POST", f"{stack.api_url}/webhooks/{added['id']}/replay", key)
        # The answer replays always had (200, `replayed`): here the parked deliveries the job will replay.
        assert status == 200 and replay["enabled"] is True
        assert (replay["replayed"], replay["replayedIsLowerBound"]) == (250, False)
        assert replay["job"]["kind"] == "replay" and replay["job"]["endpoint"] == added["id"]

        def job():
            (j,) = _listed(stack, key)["jobs"]
            return j

        assert eventually(lambda: job()["state"] == "done", 120), job()
        assert job()["done"] == 250 and job()["id"] == replay["job"]["id"]
        assert eventually(lambda: len(receiver.accepted) == 250, 120), len(receiver.accepted)
        assert sorted(receiver.accepted) == ids and receiver.repeats == []
        assert wiring.container().held_requests.count(user, added["id"]) == 0
    finally:
        receiver.close()


class _Queue:
    """The delivery queue as the runner uses it: what it was given, by webhook id. `during` runs inside the
    first put (another invocation of the same job, at the same time), `fail_once` makes the first put raise
    after SQS took the page (a crash before it was recorded)."""

    def __init__(self, during=None, fail_once=False):
        self.sent: list[tuple[str, str]] = []
        self._during = during
        self._fail_once = fail_once

    def put_each(self, messages):
        from chalicelib.webhooks.deliveries import WebhookRequest

        self.sent += [(WebhookRequest.from_message(body).webhook_id, body) for _, body in messages]
        during, self._during = self._during, None
        if during is not None:
            during()
        if self._fail_once:
            self._fail_once = False
            raise ConnectionError("the invocation died after SQS took the page")
        return []


def _runner(queue, invoked, page=100):
    from chalicelib.webhooks.jobs import WebhookJobRunner

    c = wiring.container()
    return WebhookJobRunner(
        c.webhook_jobs, c.held_requests, queue, lambda fn, event: invoked.append((fn, event)), page=page
    )


def _started(user, endpoint_id):
    from chalicelib.stores.webhook_jobs import REPLAY
    from chalicelib.webhooks.jobs import job_event

    job, started = wiring.container().webhook_jobs.start(user, endpoint_id, REPLAY, time.time())
    assert started
    return job_event(job)


def _each_sent_as_parked(queue, parked_bodies):
    """Every delivery the queue was given is one that was parked, with the body it was parked with: a
    delivery given twice is the same request twice (its webhook id and body), which a receiver drops."""
    assert {wid for wid, _ in queue.sent} == set(parked_bodies)
    assert all(parked_bodies[wid] == body for wid, body in queue.sent)


def test_a_job_out_of_time_goes_on_in_a_fresh_invocation_from_where_it_got(stack, uid):
    user, endpoint = f"cont-{uid}", "ep_continued"
    _park_many(user, endpoint, 250)
    bodies = {p.webhook_id: p.body for p in wiring.container().held_requests.held(user, endpoint)}
    event = _started(user, endpoint)
    queue, invoked = _Queue(), []
    time_left = iter([300_000, 10_000])  # one page, then 10 s left: under the 30 s it stops at
    first = _runner(queue, invoked).handle(event, "moonsend-local-webhook_jobs", lambda: next(time_left))
    assert first == {"ran": True, "pages": 1, "done": 100, "continued": True}
    assert invoked == [("moonsend-local-webhook_jobs", event)]  # the same job, handed on
    job = wiring.container().webhook_jobs.get(user, endpoint)
    assert (job.state, job.done) == ("running", 100)

    second = _runner(queue, invoked).handle(event, "moonsend-local-webhook_jobs", lambda: 300_000)
    assert second["done"] == 250 and second["continued"] is False
    assert len(queue.sent) == 250 and len({wid for wid, _ in queue.sent}) == 250  # each once
    _each_sent_as_parked(queue, bodies)
    # The event once more (Lambda delivers an asynchronous event twice at times): the job is done, nothing goes.
    assert _runner(queue, invoked).handle(event, "moonsend-local-webhook_jobs", lambda: 300_000) == {"ran": False}
    assert len(queue.sent) == 250 and wiring.container().held_requests.count(user, endpoint) == 0


def test_a_job_run_twice_at_once_or_retried_after_a_crash_sends_no_delivery_under_another_id_or_body(stack, uid):
    user, endpoint = f"twice-{uid}", "ep_twice"
    _park_many(user, endpoint, 230)
    bodies = {p.webhook_id: p.body for p in wiring.container().held_requests.held(user, endpoint)}
    event = _started(user, endpoint)
    invoked: list = []
    results = {}

    # A second invocation of the same job runs while the first is putting its first page on the queue.
    def duplicate():
        results["second"] = _runner(queue, invoked).handle(event, "fn", lambda: 300_000)

    queue = _Queue(during=duplicate)
    results["first"] = _runner(queue, invoked).handle(event, "fn", lambda: 300_000)
    assert results["second"]["done"] == 230  # the duplicate did the whole job
    assert results["first"] == {"ran": True, "pages": 1, "continued": False}  # and the first stopped at its page
    _each_sent_as_parked(queue, bodies)
    assert len(queue.sent) == 230 + 100  # the first page twice: the same requests, dropped by the receiver
    job = wiring.container().webhook_jobs.get(user, endpoint)
    assert (job.state, job.done) == ("done", 230)  # counted once

    # A crash after SQS took a page and before it was recorded: Lambda's retry puts that page again, as it was.
    user2, endpoint2 = f"crash-{uid}", "ep_crash"
    _park_many(user2, endpoint2, 150)
    bodies2 = {p.webhook_id: p.body for p in wiring.container().held_requests.held(user2, endpoint2)}
    event2 = _started(user2, endpoint2)
    crashing = _Queue(fail_once=True)
    with pytest.raises(ConnectionError):
        _runner(crashing, invoked).handle(event2, "fn", lambda: 300_000)
    assert _runner(crashing, invoked).handle(event2, "fn", lambda: 300_000)["done"] == 150
    _each_sent_as_parked(crashing, bodies2)
    assert len(crashing.sent) == 150 + 100
    assert wiring.container().webhook_jobs.get(user2, endpoint2).done == 150


# Review of issue 38: the count beside the endpoints, read by the previous release and changed by it.


def _endpoints_model():
    from chalicelib.stores.tables import bound
    from chalicelib.stores.webhooks import WebhookModel

    c = wiring.container()
    return bound(WebhookModel, c.settings.resources.webhooks_table.name, c.settings.region)


def _listed_by_the_previous_release(user):
    """The release before the count listed a tenant's endpoints so: every row of its partition parsed as one
    (its fan-out of the ledger's stream does this for every batch)."""
    return [
        (row.endpoint_id, json.loads(row.event_types)) for row in _endpoints_model().query(user, consistent_read=True)
    ]


def _add(user, i):
    return answered(lambda: wiring.container().webhook_registration.add(user, {"url": f"http://127.0.0.1:9/{i}"}), 201)


def test_the_previous_releases_listing_sees_no_count_and_an_old_count_row_is_dropped(stack, uid):
    from chalicelib.stores.tables import bound
    from chalicelib.stores.webhooks import EndpointCountModel

    user = f"rollback-{uid}"
    added = [_add(user, i).body["id"] for i in range(2)]
    assert sorted(e for e, _ in _listed_by_the_previous_release(user)) == sorted(added)
    # A tenant whose count the release that kept it in the tenant's partition made: dropped on its next change.
    c = wiring.container()
    legacy = bound(EndpointCountModel, c.settings.resources.webhooks_table.name, c.settings.region)
    legacy(user, "#count", endpoints=2).save()
    added.append(_add(user, 2).body["id"])
    assert sorted(e for e, _ in _listed_by_the_previous_release(user)) == sorted(added)
    legacy(user, "#count", endpoints=3).save()
    assert wiring.container().webhook_registration.remove(user, added.pop())["removed"]
    assert sorted(e for e, _ in _listed_by_the_previous_release(user)) == sorted(added)


def test_a_count_left_high_by_the_previous_releases_removal_is_repaired_when_it_refuses(stack, uid):
    user = f"drift-{uid}"
    ids = [_add(user, i).body["id"] for i in range(MAX_ENDPOINTS_PER_TENANT)]
    _endpoints_model()(user, ids[0]).delete()  # the previous release's DELETE: the endpoint, not the count
    assert _add(user, "again").status == 201  # the count is checked against the endpoints, and repaired
    refused = _add(user, "over")
    assert refused.status == 400 and "at most 10 endpoints" in refused.body["error"]
    assert len(wiring.container().webhook_registration.list(user)["endpoints"]) == MAX_ENDPOINTS_PER_TENANT


def _conflicts(user, times):
    return Conflicts(wiring.container().settings.resources.webhooks_table.name, user, times)


def test_a_transaction_conflict_is_retried_and_a_lasting_one_answered_409_never_500(stack, uid):
    user = f"conflict-{uid}"
    with _conflicts(user, 2) as conflicts:
        added = _add(user, 0)
    assert added.status == 201 and conflicts.calls == 2  # two cancelled, the third went through
    with _conflicts(user, 2) as conflicts:
        assert wiring.container().webhook_registration.remove(user, added.body["id"])["removed"] == added.body["id"]
    assert conflicts.calls == 2
    with _conflicts(user, 1000) as conflicts:
        busy = _add(user, 1)
    assert busy.status == 409 and "try again" in busy.body["error"] and conflicts.calls < 10
    assert wiring.container().webhook_registration.list(user)["endpoints"] == []


def test_a_replays_answer_counts_what_it_will_replay_up_to_the_listings_bound(stack, uid):
    from chalicelib.control.webhook_registration import BackgroundJobs, WebhookRegistration
    from chalicelib.webhooks.url_policy import AddressPolicy

    user = f"replay-bound-{uid}"
    key = _tenant(user)
    added = _disabled_endpoint(stack, key, user, "http://127.0.0.1:9/x")
    _park_many(user, added["id"], 101)
    c, started = wiring.container(), []
    bounded = WebhookRegistration(
        c.webhook_endpoints,
        None,
        c.held_requests,
        BackgroundJobs(c.webhook_jobs, started.append),
        AddressPolicy(allow_loopback=True),
        count_bound=100,
    )
    answer = bounded.replay(user, added["id"])
    assert (answer["replayed"], answer["replayedIsLowerBound"]) == (100, True)
    assert [j.endpoint_id for j in started] == [added["id"]] and answer["job"]["kind"] == "replay"
