"""Campaign control: its state in DynamoDB, and pause, resume, cancel and retry-failed through the local pipeline."""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from chalicelib import wiring
from chalicelib.control.retry import RetryFailed
from chalicelib.queueing.parked_email import parked_bucket
from chalicelib.stores.campaign_control import CANCELLED, PAUSED, CampaignControl
from chalicelib.stores.campaign_stats import CampaignStatsModel
from chalicelib.stores.ledger_model import FAILED, QUEUED, SENT
from chalicelib.stores.tables import bound
from infra.local.lambda_context import FunctionCrashed
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import eventually, read_sends

pytestmark = pytest.mark.e2e


def test_pause_resume_cancel_round_trip_and_the_sender_sees_a_change_within_its_cache(stack, uid):
    table = stack.settings.resources.campaigns_table.name
    cli = CampaignControl(table, stack.settings.region)
    sender_view = CampaignControl(table, stack.settings.region, cache_s=0.0)
    assert sender_view.state(f"t-{uid}", "c1") is None  # a campaign never controlled sends
    assert cli.pause(f"t-{uid}", "c1")
    assert sender_view.state(f"t-{uid}", "c1") == PAUSED
    assert cli.resume(f"t-{uid}", "c1")
    assert sender_view.state(f"t-{uid}", "c1") is None
    cli.cancel(f"t-{uid}", "c1")
    assert sender_view.state(f"t-{uid}", "c1") == CANCELLED
    assert not cli.pause(f"t-{uid}", "c1") and sender_view.state(f"t-{uid}", "c1") == CANCELLED


# --- through the whole local pipeline -------------------------------------------------------------

RATE = 10


def _tenant(stack, uid, *, verified=True):
    key = f"AKIAC{uid}".upper()
    stack.ses.configure(key, max_send_rate=50)
    sender = {
        "region": "us-east-1",
        "apiKey": key,
        "apiSecret": f"secret-{uid}",
        "ratePerSecond": str(RATE),
        "emailAddress": f"news@{uid}.example",
        "fromName": "News",
    }
    if verified:
        _verify(stack, sender)
    return sender


def _verify(stack, sender):
    ses = stack.client("sesv2", access_key=sender["apiKey"], secret_key=sender["apiSecret"])
    ses.create_email_identity(EmailIdentity=sender["emailAddress"])


def _publish(stack, user, sender, campaign, recipients):
    spec = CampaignSpec(user, sender, "S {{ name }}", "<p>{{ name }}</p>", campaign)
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, recipients))


def _sent(stack, user):
    return [s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user]


def _states(user, campaign):
    out: dict[str, int] = {}
    for e in wiring.container().ledger.entries(user, campaign):
        out[e.state or "-"] = out.get(e.state or "-", 0) + 1
    return out


def _recipients(n):
    return [{"email": f"r{i}@example.org", "metadata": {"name": f"N{i}"}} for i in range(n)]


def test_pausing_mid_drain_parks_the_rest_off_the_queue_and_resuming_sends_each_recipient_once(stack, uid):
    sender, user = _tenant(stack, uid), f"pause-{uid}"
    _publish(stack, user, sender, "big", _recipients(60))
    assert eventually(lambda: len(_sent(stack, user)) >= 10, poll_s=0.1)
    actions = wiring.container().actions
    assert actions.pause(user, "big").ok
    at_pause = len(_sent(stack, user))
    assert stack.wait_until_drained(30)  # the rest leaves the queue, parked
    time.sleep(1.5)
    settled = len(_sent(stack, user))
    assert settled - at_pause <= 2 * RATE, f"{settled - at_pause} sent after the pause"
    time.sleep(2)
    assert len(_sent(stack, user)) == settled < 60  # parked: nothing more goes out
    parked = wiring.container().schedule.parked(parked_bucket(user, "big"))
    assert sum(b.count for b in parked) == 60 - settled

    done = actions.resume(user, "big")
    assert done.ok and done.count == 60 - settled
    assert eventually(lambda: len(_sent(stack, user)) >= 60, 30) and stack.wait_until_drained(30, poll_s=0.1)
    sent = _sent(stack, user)
    assert sorted(sent) == sorted(f"r{i}@example.org" for i in range(60))  # each exactly once
    assert _states(user, "big") == {SENT: 60}
    assert wiring.container().schedule.parked(parked_bucket(user, "big")) == []


def test_cancelling_mid_drain_stops_within_the_rate_bound_and_records_the_rest_cancelled(stack, uid):
    sender, user = _tenant(stack, uid), f"cancel-{uid}"
    _publish(stack, user, sender, "oops", _recipients(60))
    assert eventually(lambda: len(_sent(stack, user)) >= 10, poll_s=0.1)
    assert wiring.container().actions.cancel(user, "oops").ok
    at_cancel = len(_sent(stack, user))
    assert stack.wait_until_drained(30)
    time.sleep(1.5)
    sent = len(_sent(stack, user))
    assert sent - at_cancel <= 2 * RATE, f"{sent - at_cancel} sent after the cancel"
    assert _states(user, "oops") == {SENT: sent, CANCELLED: 60 - sent}
    counts = wiring.container().stats.get(user, "oops")
    assert (counts["sent"], counts["cancelled"]) == (sent, 60 - sent)
    assert not wiring.container().actions.resume(user, "oops").ok  # a cancelled campaign stays cancelled


def test_a_tenants_pause_then_resume_never_undoes_an_operators_cancel(stack, uid):
    """The review's case: after an operator's cancel, the tenant's pause then resume turned `cancelled` into
    `done` and sent recipients published after the cancel."""
    sender, user = _tenant(stack, uid), f"final-{uid}"
    _publish(stack, user, sender, "gone", _recipients(3))
    assert eventually(lambda: _states(user, "gone").get(SENT) == 3, 30, poll_s=0.1)
    c = wiring.container()
    assert c.actions.cancel(user, "gone").ok  # the operator's `moonsend campaign cancel`
    key = c.api_keys.replace_all(user)
    base = f"{stack.api_url}/campaigns/gone"
    for action in ("pause", "resume"):
        status, body = _call("POST", f"{base}/{action}", key)
        assert status == 409 and "cancel is final" in json.dumps(body), (action, status, body)
    assert c.campaign_control.state(user, "gone", fresh=True) == CANCELLED
    time.sleep(1.5)  # past the drainers' one-second cache of the state (chalicelib.stores.campaign_control)
    _publish(stack, user, sender, "gone", [{"email": f"late{i}@example.org"} for i in range(3)])
    assert eventually(lambda: _states(user, "gone").get(CANCELLED) == 3, 30, poll_s=0.1), _states(user, "gone")
    assert stack.wait_until_drained(30)
    assert not [to for to in _sent(stack, user) if to.startswith("late")]
    assert _states(user, "gone") == {SENT: 3, CANCELLED: 3}


def test_retry_failed_sends_to_the_failed_only_and_each_once_however_often_it_is_asked(stack, uid):
    sender, user = _tenant(stack, uid, verified=False), f"retry-{uid}"
    _publish(stack, user, sender, "news", _recipients(8))  # the sender is not verified yet: all fail
    assert eventually(lambda: _states(user, "news").get(FAILED) == 8, 30, poll_s=0.1)
    reasons = {e.reason for e in wiring.container().ledger.entries(user, "news")}
    _verify(stack, sender)
    _publish(stack, user, sender, "news", [{"email": f"new{i}@example.org"} for i in range(4)])
    assert eventually(lambda: _states(user, "news").get(SENT) == 4, 30, poll_s=0.1)

    actions = wiring.container().actions
    assert actions.retry_failed(user, "news", reason_contains="no such reason").requeued == 0
    needle = next(iter(reasons)).split(":")[0]
    result = actions.retry_failed(user, "news", reason_contains=needle)
    assert (result.matched, result.requeued, result.no_copy) == (8, 8, [])
    assert actions.retry_failed(user, "news").requeued == 0  # asked again at once: none is failed now
    assert eventually(lambda: _states(user, "news") == {SENT: 12}, 30) and stack.wait_until_drained(30, poll_s=0.1)
    sent = _sent(stack, user)
    assert len(sent) == len(set(sent)) == 12  # the 4 sent ones were never sent again
    assert actions.retry_failed(user, "news").requeued == 0
    counts = wiring.container().stats.get(user, "news")
    assert (counts["sent"], counts["failed"], counts["retried"]) == (12, 0, 8)


def test_a_retry_that_died_half_way_is_finished_by_asking_again_at_once(stack, uid):
    # The API's request killed after it queued some recipients' state and before their copies reached the
    # queue (the fault explorer's `api s3.GetObject#2 killed before`): the client, answered 502, asks again
    # at once, and that retry finishes the work; a third sends nothing twice.
    sender, user = _tenant(stack, uid, verified=False), f"half-{uid}"
    _publish(stack, user, sender, "news", _recipients(3))
    assert eventually(lambda: _states(user, "news").get(FAILED) == 3, 30, poll_s=0.1)
    _verify(stack, sender)
    c = wiring.container()

    class DiesAtTheSecondCopy:  # recipients are read in lanes: those whose copy was read are reopened
        def __init__(self):
            self.loads, self.read = 0, []
            self._lock = threading.Lock()

        def load(self, user_id, campaign_id, email):
            with self._lock:
                self.loads += 1
                if self.loads == 2:
                    raise FunctionCrashed("the function died here")  # no `except Exception` runs
            body = c.failed_copies.load(user_id, campaign_id, email)
            self.read.append(email)
            return body

    copies = DiesAtTheSecondCopy()
    dying = RetryFailed(c.settings, c.ledger, c.recorder, copies, c.email_queue, c.drain_starter)
    with pytest.raises(FunctionCrashed):
        dying.run(user, "news")
    reopened = len(copies.read)
    assert reopened in (1, 2)
    assert _states(user, "news") == {QUEUED: reopened, FAILED: 3 - reopened}  # reopened, nothing queued
    again = c.actions.retry_failed(user, "news")
    assert (again.requeued, again.requeued_again) == (3 - reopened, reopened)
    assert eventually(lambda: _states(user, "news") == {SENT: 3}, 30) and stack.wait_until_drained(30, poll_s=0.1)
    third = c.actions.retry_failed(user, "news")
    assert (third.requeued, third.requeued_again) == (0, 0)  # all sent: nothing is taken again
    assert sorted(_sent(stack, user)) == [f"r{i}@example.org" for i in range(3)]
    counts = c.stats.get(user, "news")
    assert (counts["failed"], counts["retried"]) == (0, 3)


def test_a_retry_reads_and_reopens_its_recipients_several_at_once(stack, uid):
    # One after another, a thousand failed would be answered after API Gateway stops waiting (29 s).
    sender, user = _tenant(stack, uid, verified=False), f"lanes-{uid}"
    _publish(stack, user, sender, "news", _recipients(4))
    assert eventually(lambda: _states(user, "news").get(FAILED) == 4, 30, poll_s=0.1)
    _verify(stack, sender)
    c = wiring.container()
    together = threading.Barrier(4, timeout=10)  # broken unless four reads are in flight at once

    class MeetingCopies:
        def load(self, user_id, campaign_id, email):
            together.wait()
            return c.failed_copies.load(user_id, campaign_id, email)

    result = RetryFailed(c.settings, c.ledger, c.recorder, MeetingCopies(), c.email_queue, c.drain_starter).run(
        user, "news"
    )
    assert (result.matched, result.requeued) == (4, 4)
    assert eventually(lambda: _states(user, "news") == {SENT: 4}, 30) and stack.wait_until_drained(30, poll_s=0.1)
    assert sorted(_sent(stack, user)) == [f"r{i}@example.org" for i in range(4)]


def test_a_recipient_whose_copy_cannot_be_read_fails_the_retry_after_the_others_are_queued(stack, uid):
    # Read sixteen at a time, the others are reopened whatever one of them raises: they are queued before the
    # error is answered, not left `queued` with nothing on the queue until the tenant asks again.
    sender, user = _tenant(stack, uid, verified=False), f"one-bad-{uid}"
    _publish(stack, user, sender, "news", _recipients(3))
    assert eventually(lambda: _states(user, "news").get(FAILED) == 3, 30, poll_s=0.1)
    _verify(stack, sender)
    c = wiring.container()

    class ThrottledOnce:
        def load(self, user_id, campaign_id, email):
            if email == "r1@example.org":
                raise ConnectionError("S3 throttled the read past the SDK's retries")
            return c.failed_copies.load(user_id, campaign_id, email)

    with pytest.raises(ConnectionError):
        RetryFailed(c.settings, c.ledger, c.recorder, ThrottledOnce(), c.email_queue, c.drain_starter).run(user, "news")
    assert eventually(lambda: _states(user, "news") == {SENT: 2, FAILED: 1}, 30), _states(user, "news")
    again = c.actions.retry_failed(user, "news")
    assert (again.matched, again.requeued) == (1, 1)
    assert eventually(lambda: _states(user, "news") == {SENT: 3}, 30) and stack.wait_until_drained(30, poll_s=0.1)
    assert sorted(_sent(stack, user)) == [f"r{i}@example.org" for i in range(3)]


def _call(method, url, key=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_a_tenant_controls_its_campaigns_and_pages_its_recipients_over_http_with_its_key_only(stack, uid):
    sender, user = _tenant(stack, uid), f"http-{uid}"
    _publish(stack, user, sender, "web", _recipients(5))
    assert eventually(lambda: _states(user, "web").get(SENT) == 5, 30, poll_s=0.1)
    c = wiring.container()
    key = c.api_keys.replace_all(user)
    other = f"other-{uid}"
    c.tenants.accept(other, "free", c.tenants.get(user).sender, c.ses.account_of)
    other_key = c.api_keys.replace_all(other)
    base = f"{stack.api_url}/campaigns/web"

    assert _call("POST", f"{base}/pause")[0] == 401
    assert _call("POST", f"{base}/pause", other_key)[0] == 404  # another tenant's campaign: not found
    assert _call("POST", f"{stack.api_url}/campaigns/nope/pause", key)[0] == 404
    status, body = _call("POST", f"{base}/pause", key)
    assert status == 200 and body["ok"] and c.campaign_control.state(user, "web", fresh=True) == "paused"
    assert _call("POST", f"{base}/resume", key)[0] == 200 and c.campaign_control.state(user, "web", fresh=True) is None
    status, body = _call("POST", f"{base}/retry-failed", key, {"reasonContains": "x"})
    assert status == 200 and body["requeued"] == 0

    pages, after = [], None
    while True:
        status, body = _call("GET", f"{base}/recipients?limit=2" + (f"&after={after}" if after else ""), key)
        assert status == 200 and len(body["recipients"]) <= 2
        pages.append(body["recipients"])
        after = body["next"]
        if not after:
            break
    emails = [r["email"] for page in pages for r in page]
    assert sorted(emails) == sorted(f"r{i}@example.org" for i in range(5)) and len(pages) >= 3
    assert {r["state"] for page in pages for r in page} == {SENT}
    assert _call("GET", f"{base}/recipients?state=bogus", key)[0] == 400
    status, body = _call("GET", f"{base}/recipients?prefix=R3%40", key)  # a prefix, in any case
    assert status == 200 and [r["email"] for r in body["recipients"]] == ["r3@example.org"]
    assert _call("GET", f"{base}/recipients?prefix=r3&after=r1%40example.org", key)[0] == 400  # not under it
    assert _call("GET", f"{base}/recipients", other_key)[0] == 404

    status, body = _call("POST", f"{stack.api_url}/tenant/pause", key, {"reason": "holiday"})
    assert status == 200 and c.tenants.get(user, fresh=True).paused_reason == "paused by the tenant: holiday"
    assert _call("POST", f"{stack.api_url}/tenant/resume", key)[0] == 200
    assert c.tenants.get(user, fresh=True).paused_reason is None
    c.actions.pause_tenant(user, "bounce rate", by_tenant=False)  # an operator's (or the guard's) pause
    status, body = _call("POST", f"{stack.api_url}/tenant/resume", key)
    assert status == 409 and "ask support" in body["message"]
    assert c.tenants.get(user, fresh=True).paused_reason
    c.actions.resume_tenant(user, by_tenant=False)


def test_many_send_threads_asking_when_the_cache_expires_make_one_read(stack, uid, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    c = wiring.container()
    control = CampaignControl(c.settings.resources.campaigns_table.name, c.settings.region, cache_s=60)
    control.pause(f"u{uid}", "c1")
    reads = []
    model = bound(CampaignStatsModel, c.settings.resources.campaigns_table.name, c.settings.region)  # the store's
    real = model.get
    monkeypatch.setattr(model, "get", lambda *a, **k: reads.append(1) or time.sleep(0.2) or real(*a, **k))
    with ThreadPoolExecutor(16) as pool:
        states = list(pool.map(lambda _: control.state(f"u{uid}", "c1"), range(32)))
    assert states == [PAUSED] * 32 and len(reads) == 1
    c.campaign_control.resume(f"u{uid}", "c1")  # by another container (the API's)
    assert control.state(f"u{uid}", "c1") == PAUSED  # cached for a minute here
    assert control.state(f"u{uid}", "c1", fresh=True) is None  # a fresh read is its own
