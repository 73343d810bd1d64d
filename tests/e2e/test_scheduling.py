"""Scheduled sends: the message fields, the schedule store and its releaser, expiry, rescheduling."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from datetime import UTC, datetime

import pytest

from chalicelib import wiring
from chalicelib.control.campaign_actions import CampaignActions, Rescheduling, TenantPausing
from chalicelib.core import aws
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail, parse_duration, parse_instant
from chalicelib.core.errors import MessageInvalid
from chalicelib.core.message_parser import parse_precompile_message
from chalicelib.core.routing import queue_for
from chalicelib.jobs.releaser import Releaser
from chalicelib.queueing.email_queue import EmailQueue
from chalicelib.queueing.enqueuer import Enqueuer
from chalicelib.queueing.parked_email import ParkedEmail
from chalicelib.stores.ledger_model import CANCELLED, EXPIRED, QUEUED, SCHEDULED
from chalicelib.stores.schedule import RETRY_BUCKET, BatchMoved, ScheduleStore, minute_of
from infra.local.scheduler import scheduled_event
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import canonical, read_sends
from tests.fakes import FakeLedger, FakeSchedule, FakeSqs, FakeStats, parts


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


# --- the message fields ---------------------------------------------------------------------------


def test_scheduled_at_needs_a_utc_offset_and_expires_after_takes_iso_durations_or_seconds():
    assert parse_instant("2026-12-01T09:00:00+01:00") == parse_instant("2026-12-01T08:00:00Z")
    assert parse_duration("PT2H") == 7200 and parse_duration("P1DT30M") == 88200 and parse_duration(90) == 90
    for bad, why in (
        ("2026-12-01T09:00:00", "needs a UTC offset"),
        ("next tuesday", "not an ISO 8601 date-time"),
        (12, "must be an ISO 8601 date-time string"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_instant(bad)
    for bad, why in (
        ("P1M", "not an ISO 8601 duration"),
        ("PT30S", "at least 60"),
        (True, "duration"),
        ("PT", "not an ISO 8601 duration"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_duration(bad)


def test_a_bad_schedule_rejects_the_message_naming_the_field():
    msg = canonical()
    msg["campaign"].update(scheduledAt="2026-12-01 09:00", expiresAfter="soon")
    with pytest.raises(MessageInvalid) as err:
        parse_precompile_message(json.dumps(msg))
    text = str(err.value)
    assert "campaign.scheduledAt: needs a UTC offset" in text and "campaign.expiresAfter: not an ISO 8601" in text
    msg["campaign"].update(scheduledAt=_iso(time.time() + 40 * 86400), expiresAfter="PT1H")
    with pytest.raises(MessageInvalid, match=r"campaign\.scheduledAt: more than 31 days ahead"):
        parse_precompile_message(json.dumps(msg))


def test_a_queued_email_carries_its_deadline_and_an_old_one_without_it_still_reads():
    email = QueuedEmail("u", "paid", {"emailAddress": "a@b.example"}, "c", "S", "B", "r@x.example", 1796115600000)
    body = email.to_json()
    assert json.loads(body)["campaign"]["expiresAt"] == "2026-12-01T09:00:00.000Z"
    assert QueuedEmail.from_json(body) == email
    old = json.loads(body)
    del old["campaign"]["expiresAt"]
    assert QueuedEmail.from_json(json.dumps(old)).deadline_ms is None


# --- precompile's decision ------------------------------------------------------------------------


def _precompiler():
    sqs, ledger, schedule, stats = FakeSqs(), FakeLedger(), FakeSchedule(), FakeStats()
    settings = dataclasses.replace(Settings.from_env({"MOONSEND_STAGE": "test"}), schedule_lead_s=90)
    p = parts.precompiler(settings, sqs, ledger=ledger, stats=stats, schedule=schedule)
    return p, sqs, ledger, schedule, stats


def _message(n=3, **campaign):
    msg = canonical()
    del msg["recipient"]
    msg["campaign"].update(campaign)
    msg["recipients"] = [{"email": f"r{i}@example.org", "metadata": {"name": f"N{i}"}} for i in range(n)]
    return json.dumps(msg)


def test_a_campaign_scheduled_hours_ahead_is_rendered_now_and_held_in_the_store_not_queued():
    p, sqs, ledger, schedule, stats = _precompiler()
    at = time.time() + 3 * 3600
    result = p.handle(_message(3, scheduledAt=_iso(at), expiresAfter="PT1H"))
    assert (result.scheduled, result.queued) == (3, 0) and sqs.batches == []
    (batch,) = schedule.batches
    assert batch.due_ms == int(at * 1000) and batch.deadline_ms == int((at + 3600) * 1000)
    bodies = [json.loads(b) for _e, b in schedule.emails(batch)]
    assert bodies[0]["campaign"]["subject"] == "Hello N0"  # rendered: errors surface at once, not at 9 am
    assert all(b["campaign"]["expiresAt"] for b in bodies)
    assert {ledger.state("user-1", "camp-1", f"r{i}@example.org") for i in range(3)} == {SCHEDULED}
    assert stats.schedules[0][2] == int(at * 1000)


def test_a_campaign_due_within_the_releasers_reach_goes_on_the_queue_delayed_until_its_time():
    p, sqs, ledger, schedule, _stats = _precompiler()
    result = p.handle(_message(2, scheduledAt=_iso(time.time() + 100)))
    assert result.queued == 2 and schedule.batches == []
    delays = {e["DelaySeconds"] for _url, entries in sqs.batches for e in entries}
    assert delays <= {100, 101} and delays
    assert ledger.state("user-1", "camp-1", "r0@example.org") == QUEUED


def test_a_campaign_past_its_deadline_is_recorded_expired_with_why_and_nothing_is_rendered_or_queued():
    p, sqs, ledger, schedule, stats = _precompiler()
    result = p.handle(_message(2, scheduledAt=_iso(time.time() - 7200), expiresAfter="PT1H"))
    assert (result.expired, result.queued, result.scheduled) == (2, 0, 0) and not sqs.batches and not schedule.batches
    row = ledger.rows[("user-1#camp-1", "r1@example.org")]
    assert row["state"] == EXPIRED and "not sent by its deadline" in row["reason"]
    assert any(d.get("expired") == 2 for _u, _c, d, _e in stats.adds)


# --- the store and the releaser, on the local stack ------------------------------------------------

e2e = pytest.mark.e2e


def _store(stack, uid) -> ScheduleStore:
    """A schedule table of the test's own: the releaser's cursor is per table, and other tests share the stack's."""
    table = stack.settings.resources.schedule_table
    name = f"sched-{uid}"
    stack.client("dynamodb").create_table(
        TableName=name,
        KeySchema=table.key_schema(),
        AttributeDefinitions=table.attribute_definitions(),
        BillingMode="PAY_PER_REQUEST",
    )
    c = wiring.container()
    return ScheduleStore(name, c.settings.region, stack.client("s3"), c.settings.resources.payload_bucket.name)


def _releaser(store, enqueuer=None, lead_s=90.0):
    c = wiring.container()
    settings = dataclasses.replace(c.settings, schedule_lead_s=lead_s)
    starts = parts.Starts()
    email_queue = EmailQueue(c.queues, enqueuer or Enqueuer(aws.client("sqs", c.settings.region)), c.payloads)
    return Releaser(settings, store, c.recorder, c.stats, c.campaign_control, email_queue, starts), starts


def _batch(store, user, campaign, due_ms, deadline_ms=None, n=3):
    c = wiring.container()
    emails = [
        (e, QueuedEmail(user, "paid", {}, campaign, "S", "B", e, deadline_ms).to_json())
        for e in (f"r{i}@example.org" for i in range(n))
    ]
    c.ledger.record_scheduled(user, campaign, [e for e, _ in emails])
    queue = queue_for(c.settings.resources, user, "paid")
    batch = store.put(
        user_id=user,
        campaign_id=campaign,
        plan="paid",
        queue=queue,
        due_ms=due_ms,
        deadline_ms=deadline_ms,
        emails=emails,
    )
    c.stats.note_schedule(user, campaign, due_ms, deadline_ms, batch.bucket)
    return batch, queue


def _states(user, campaign):
    return {e.email: (e.state, e.reason) for e in wiring.container().ledger.entries(user, campaign)}


@e2e
def test_the_releaser_queues_a_batch_once_it_is_due_within_its_lead_delayed_until_its_time(stack, uid):
    store = _store(stack, uid)
    releaser, starts = _releaser(store)
    user = f"s-{uid}"
    due = int(time.time() * 1000) + 3600_000
    _batch(store, user, "later", due)
    r = releaser.release(now_ms=due - 10 * 60_000)
    assert (r.batches, r.released) == (0, 0) and not starts
    assert {s for s, _ in _states(user, "later").values()} == {SCHEDULED}

    r = releaser.release(now_ms=due - 60_000)  # within the 90 s lead: on the queue, invisible for 60 s
    assert r.released == 3 and starts == [(f"moonsend-local-t-{user}", due)]
    assert {s for s, _ in _states(user, "later").values()} == {QUEUED}
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=f"moonsend-local-t-{user}")["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesDelayed"]) == ("0", "3")
    assert releaser.release(now_ms=due - 30_000).released == 0  # released once: the batch left the store
    sqs.purge_queue(QueueUrl=url)


@e2e
def test_after_an_outage_a_batch_past_its_deadline_is_recorded_expired_with_why_and_never_queued(stack, uid):
    store = _store(stack, uid)
    releaser, starts = _releaser(store)
    user = f"s-{uid}"
    due = int(time.time() * 1000) - 2 * 3600_000
    _batch(store, user, "morning", due, deadline_ms=due + 30 * 60_000)
    r = releaser.release()  # the releaser's first run in two hours (its cursor starts an hour back + rescan)
    assert (r.expired, r.released) == (0, 0)  # two hours is further back than a first run looks
    store.advance(due - 60_000)  # a releaser that had run until just before the batch was due
    r = releaser.release()
    assert (r.expired, r.released) == (3, 0) and not starts
    states = _states(user, "morning")
    assert {s for s, _ in states.values()} == {EXPIRED}
    assert all("not sent by its deadline" in why and "scheduledAt + expiresAfter" in why for _, why in states.values())
    assert wiring.container().stats.get(user, "morning")["expired"] == 3


@e2e
def test_a_batch_its_queue_refuses_stays_in_the_store_and_goes_on_the_next_run(stack, uid):
    store = _store(stack, uid)

    class RefusesOnce(Enqueuer):
        calls = 0

        def send(self, url, outgoing):
            RefusesOnce.calls += 1
            if RefusesOnce.calls == 1:
                raise ConnectionError("SQS unreachable")
            return super().send(url, outgoing)

    releaser, starts = _releaser(store, RefusesOnce(aws.client("sqs", wiring.container().settings.region)))
    user = f"s-{uid}"
    due = int(time.time() * 1000) + 30_000
    _, queue = _batch(store, user, "flaky", due)
    assert releaser.release().left == 1
    # Set aside, tried again at each run: the cursor goes on past its minute, for every other tenant.
    assert store.cursor() >= minute_of(due)
    assert [b.campaign_id for b in store.parked(RETRY_BUCKET)] == ["flaky"]
    r = releaser.release()
    assert (r.released, r.left) == (3, 0) and starts == [(queue, due)]
    assert store.parked(RETRY_BUCKET) == []
    sqs = stack.client("sqs")
    sqs.purge_queue(QueueUrl=sqs.get_queue_url(QueueName=queue)["QueueUrl"])


def _actions(store, releaser):
    c = wiring.container()
    settings = dataclasses.replace(c.settings, schedule_lead_s=90)
    parked = ParkedEmail(store, c.email_queue, parts.Starts())
    pausing = TenantPausing(c.tenants, c.ses_tenants)
    return CampaignActions(
        settings, c.campaign_control, releaser, parked, c.retry, pausing, Rescheduling(store, c.stats)
    )


@e2e
def test_cancelling_a_scheduled_campaign_records_its_waiting_recipients_cancelled_at_once(stack, uid):
    store = _store(stack, uid)
    releaser, _ = _releaser(store)
    user = f"s-{uid}"
    _batch(store, user, "promo", int(time.time() * 1000) + 3600_000)
    done = _actions(store, releaser).cancel(user, "promo")
    assert done.ok and done.count == 3
    assert {s for s, _ in _states(user, "promo").values()} == {CANCELLED}
    assert store.of_campaign(user, "promo", wiring.container().stats.schedule_buckets(user, "promo")) == []


@e2e
def test_rescheduling_moves_the_waiting_batches_and_their_deadline_and_refuses_a_time_too_close(stack, uid):
    store = _store(stack, uid)
    releaser, _ = _releaser(store)
    actions = _actions(store, releaser)
    user = f"s-{uid}"
    due = int(time.time() * 1000) + 3600_000
    _batch(store, user, "digest", due, deadline_ms=due + 600_000)
    assert not actions.reschedule(user, "digest", time.time() + 60).ok
    later = time.time() + 7200
    done = actions.reschedule(user, "digest", later)
    assert done.ok and done.count == 3
    (moved,) = store.of_campaign(user, "digest", wiring.container().stats.schedule_buckets(user, "digest"))
    assert moved.due_ms == int(later * 1000) and moved.deadline_ms == int(later * 1000) + 600_000
    body = json.loads(store.emails(moved)[0][1])
    assert (
        body["campaign"]["expiresAt"]
        == datetime.fromtimestamp(later + 600, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    )
    assert releaser.release(now_ms=due).released == 0  # nothing left at the old time


# --- end to end through SNS ------------------------------------------------------------------------


def _tenant(stack, uid, rate):
    key = f"AKIAS{uid}".upper()
    stack.ses.configure(key, max_send_rate=50)
    sender = {
        "region": "us-east-1",
        "apiKey": key,
        "apiSecret": f"secret-{uid}",
        "ratePerSecond": str(rate),
        "emailAddress": f"news@{uid}.example",
        "fromName": "News",
    }
    stack.client("sesv2", access_key=key, secret_key=sender["apiSecret"]).create_email_identity(
        EmailIdentity=sender["emailAddress"]
    )
    return sender


def _tick_releaser(stack, stop: threading.Event, every_s: float = 0.5) -> threading.Thread:
    """EventBridge at a faster cadence: the stack's own tick is once a minute, as on AWS."""
    fn = stack.runner.resolve("moonsend-local-release_scheduled")
    assert fn is not None

    def run():
        while not stop.wait(every_s):
            stack.runner.invoke(fn, scheduled_event("arn:aws:events:::rule/test", "123456789012", "us-east-1"))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@e2e
def test_a_scheduled_campaign_sends_nothing_before_its_time_and_starts_within_a_minute_after(stack, uid):
    sender = _tenant(stack, uid, rate=20)
    user = f"sched-{uid}"
    at = time.time() + 8  # beyond twice the stack's 2 s lead: through the schedule store
    spec = CampaignSpec(
        user, sender, "Hi {{ name }}", "<p>{{ name }}</p>", "at-nine", options={"scheduledAt": _iso(at)}
    )
    recipients = [{"email": f"r{i}@example.org", "metadata": {"name": f"N{i}"}} for i in range(20)]
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, recipients))
    stop = threading.Event()
    _tick_releaser(stack, stop)
    try:
        time.sleep(max(0.0, at - time.time() - 1.5))
        assert wiring.container().stats.get(user, "at-nine")["scheduled"] == 20
        assert not [s for s in read_sends(stack.config.outbox) if s["userId"] == user]
        deadline = time.time() + 90
        while time.time() < deadline:
            sends = [s for s in read_sends(stack.config.outbox) if s["userId"] == user]
            if len(sends) == 20:
                break
            time.sleep(0.25)
    finally:
        stop.set()
    assert sorted(s["to"] for s in sends) == sorted(f"r{i}@example.org" for i in range(20))  # each once
    first = min(s["ts"] for s in sends) / 1000
    assert first >= at, f"sent {at - first:.2f} s early"
    assert first - at < 60, f"started {first - at:.1f} s after its time"
    print(f"scheduled start: first email {first - at:.2f} s after scheduledAt")


@e2e
def test_a_campaign_that_expired_before_it_could_start_sends_nothing_and_says_why(stack, uid):
    sender = _tenant(stack, uid, rate=20)
    user = f"late-{uid}"
    options = {"scheduledAt": _iso(time.time() - 3600), "expiresAfter": "PT30M"}
    spec = CampaignSpec(user, sender, "S", "<p>B</p>", "too-late", options=options)
    recipients = [{"email": f"r{i}@example.org"} for i in range(5)]
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, recipients))
    assert stack.wait_until_drained(30)
    states = _states(user, "too-late")
    assert len(states) == 5 and {s for s, _ in states.values()} == {EXPIRED}
    assert all("not sent by its deadline" in why for _, why in states.values())
    assert not [s for s in read_sends(stack.config.outbox) if s["userId"] == user]


@e2e
def test_two_moves_of_one_batch_at_once_store_it_once_and_the_second_is_told(stack, uid):
    # A double click, or a client retrying a timed-out reschedule: both read the batch, both move it.
    store = _store(stack, uid)
    user = f"s-{uid}"
    due = int(time.time() * 1000) + 3600_000
    batch, _ = _batch(store, user, "twice", due)
    first, second = due + 600_000, due + 1_200_000
    store.move(batch, first, None)
    with pytest.raises(BatchMoved):
        store.move(batch, second, None)  # it read the batch before the first move
    minutes = [minute_of(due), minute_of(first), minute_of(second)]
    stored = store.of_campaign(user, "twice", minutes)
    assert [(b.bucket, b.due_ms) for b in stored] == [(minute_of(first), first)]  # once, where the first put it


@e2e
def test_a_double_reschedule_leaves_each_batch_once_and_every_recipient_released_once(stack, uid):
    store = _store(stack, uid)
    releaser, _ = _releaser(store)
    actions = _actions(store, releaser)
    user = f"s-{uid}"
    due = int(time.time() * 1000) + 3600_000
    for part in range(3):
        _batch(store, user, "twice", due + part, n=2 + part)
    targets = [time.time() + 7200, time.time() + 10800]  # two requests at once: a change of mind, a retry
    done: list = []
    threads = [
        threading.Thread(target=lambda at=at: done.append(actions.reschedule(user, "twice", at))) for at in targets
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(d.ok for d in done), [d.message for d in done]
    stored = store.of_campaign(user, "twice", wiring.container().stats.schedule_buckets(user, "twice"))
    assert sorted(b.count for b in stored) == [2, 3, 4]  # each batch once, wherever the last move put it
    released = 0
    for at in targets:
        store.advance(int(at * 1000) - 120_000)
        r = releaser.release(now_ms=int(at * 1000) - 60_000)
        assert (r.left, r.lost) == (0, 0)
        released += r.released
    assert released == 9  # every recipient released once, none twice, no batch left to pin the cursor
    sqs = stack.client("sqs")  # delayed on the queue: purged, so that other tests' drained stack is drained
    sqs.purge_queue(
        QueueUrl=sqs.get_queue_url(QueueName=queue_for(wiring.container().settings.resources, user, "paid"))["QueueUrl"]
    )


@e2e
def test_a_batch_whose_body_is_gone_is_removed_with_why_and_holds_no_one_else_back(stack, uid):
    # Stored twice by a move of the release before (its twin released it and deleted the body), or kept past
    # the bucket's lifecycle: it can never be released, and must not keep the cursor at its minute.
    store = _store(stack, uid)
    releaser, _ = _releaser(store)
    user, other = f"s-{uid}", f"o-{uid}"
    due = int(time.time() * 1000) + 30_000
    lost, _ = _batch(store, user, "gone", due)
    _, other_queue = _batch(store, other, "fine", due)
    c = wiring.container()
    stack.client("s3").delete_object(Bucket=c.settings.resources.payload_bucket.name, Key=lost.body_key)
    r = releaser.release()
    assert (r.released, r.lost, r.left) == (3, 1, 0)
    assert store.cursor() >= minute_of(due)
    assert "has no stored body" in (c.stats.get(user, "gone").last_error or "")
    assert releaser.release().batches == 0  # resolved: not read again
    sqs = stack.client("sqs")
    sqs.purge_queue(QueueUrl=sqs.get_queue_url(QueueName=other_queue)["QueueUrl"])
