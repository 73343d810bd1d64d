"""Idle tenant queues are removed with their alarm, never under a sender, and come back on the next send."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from chalicelib import wiring
from chalicelib.core.errors import QueueRetiring
from chalicelib.core.routing import alarm_name, tenant_queue_name
from chalicelib.jobs.idle_queues import IdleQueueCleanup
from chalicelib.stores.queue_activity import (
    ACTIVE,
    GONE,
    REMOVE_WITHIN_MS,
    RETIRING,
    STALE_RETIREMENT_MS,
    QueueActivity,
    utc_day,
    utc_hour,
)
from tests.conftest import as_function, eventually
from tests.e2e.test_campaign_control import _publish, _sent, _tenant
from tests.fakes.queues import Said

pytestmark = pytest.mark.e2e

DAY_S = 86_400


def _activity(stack) -> QueueActivity:
    return QueueActivity(stack.settings.resources.tenants_table.name, stack.settings.region)


def _set(stack, user: str, attribute: str, value: dict[str, str]) -> None:
    """Write one attribute of the tenant's registry item, as an outside observer would (boto3, raw)."""
    stack.client("dynamodb").update_item(
        TableName=stack.settings.resources.tenants_table.name,
        Key={"user_id": {"S": user}},
        UpdateExpression="SET #a = :v",
        ExpressionAttributeNames={"#a": attribute},
        ExpressionAttributeValues={":v": value},
    )


def _age(stack, user: str, days: int) -> str:
    """Pretend the queue was last used `days` ago, in the registry. (A container that marked it used today
    remembers that until its own hour moves on: the test that sends again moves it, with utc_hour.)"""
    day = utc_day(time.time() - days * DAY_S)
    _set(stack, user, "queue_used_day", {"S": day})
    return day


def _queue_exists(stack, name: str) -> bool:
    try:
        stack.client("sqs").get_queue_url(QueueName=name)
        return True
    except ClientError:
        return False


def _alarm_exists(stack, name: str) -> bool:
    return bool(stack.client("cloudwatch").describe_alarms(AlarmNames=[alarm_name(name)])["MetricAlarms"])


def test_an_idle_queue_is_removed_and_the_next_campaign_recreates_it(stack, uid, monkeypatch):
    """With its alarm, where the stage gives queues one (MOONSEND_QUEUE_ALARMS; by default none)."""
    user = f"idle-{uid}"
    sender = _tenant(stack, uid)
    queue = tenant_queue_name(stack.settings.resources, user)
    activity = _activity(stack)
    _publish(stack, user, sender, "c1", [{"email": f"a{i}@example.org", "metadata": {"name": "A"}} for i in range(3)])
    assert eventually(lambda: len(_sent(stack, user)) == 3, poll_s=0.1)
    assert stack.wait_until_drained(timeout=60)
    assert activity.state(user) == (ACTIVE, utc_day())
    assert _queue_exists(stack, queue) and _alarm_exists(stack, queue) is stack.settings.queue_alarms

    cleanup = wiring.container().idle_queues
    with as_function(stack, "retire_idle_queues"):  # with the job's role: IAM checks each call
        assert user not in cleanup.run().retired  # used today: not idle
    _age(stack, user, 15)
    with as_function(stack, "retire_idle_queues"):
        report = cleanup.run()
    assert user in report.retired
    assert activity.state(user)[0] == GONE
    assert not _queue_exists(stack, queue) and not _alarm_exists(stack, queue)
    # An alarm notification that was on its way finds no queue: the drain ends quietly.
    assert wiring.container().drainer.drain(queue, lambda: 60_000).stopped_reason == "the queue does not exist"

    # A container that had the queue's URL cached finds it gone at its next day's touch and recreates it:
    # precompile's own container (it touched the queue today, before the job ran) is moved on to the next
    # day, as a warm container would be the next time it sends for the tenant.
    from chalicelib.queueing import tenant_queues

    next_day = utc_day(time.time() + 86400)
    monkeypatch.setattr(tenant_queues, "utc_hour", lambda: utc_hour(time.time() + 86400))
    _publish(stack, user, sender, "c2", [{"email": f"b{i}@example.org", "metadata": {"name": "B"}} for i in range(4)])
    assert eventually(lambda: len(_sent(stack, user)) == 7, 90, poll_s=0.1)
    assert stack.wait_until_drained(timeout=60)
    assert sorted(_sent(stack, user)) == sorted(
        [f"a{i}@example.org" for i in range(3)] + [f"b{i}@example.org" for i in range(4)]
    )
    assert activity.state(user) == (ACTIVE, next_day)
    assert _queue_exists(stack, queue) and _alarm_exists(stack, queue) is stack.settings.queue_alarms


def test_a_queue_with_email_waiting_or_a_drain_running_is_kept(stack, uid):
    user = f"busy-{uid}"
    sender = _tenant(stack, uid)
    queue = tenant_queue_name(stack.settings.resources, user)
    activity = _activity(stack)
    c = wiring.container()
    lease = c.leases.acquire(queue, 600_000)  # no drain may start: the email stays queued
    assert lease is not None
    try:
        _publish(stack, user, sender, "c1", [{"email": "a@example.org", "metadata": {"name": "A"}}])
        assert eventually(lambda: sum(stack.queue_depths().get(queue, (0, 0, 0))) == 1, poll_s=0.1)
        _age(stack, user, 30)
        report = c.idle_queues.run()
        assert report.kept[user] == "1 message(s) in the queue"
    finally:
        c.leases.drop(lease)
    assert eventually(lambda: len(_sent(stack, user)) == 1, 90, poll_s=0.1)
    assert stack.wait_until_drained(timeout=60)
    lease = c.leases.acquire(queue, 600_000)
    try:
        _age(stack, user, 30)
        assert c.idle_queues.run().kept[user] == "a drain holds the queue"
    finally:
        c.leases.drop(lease)
        activity.touch(user, utc_day())  # not idle any more: other tests' scheduled runs leave it alone
    assert _queue_exists(stack, queue)


def test_a_send_between_the_jobs_check_and_its_retire_keeps_the_queue(stack, uid):
    user = f"race-{uid}"
    activity = _activity(stack)
    old = utc_day(time.time() - 20 * DAY_S)
    assert activity.touch(user, old) is False  # first use
    assert activity.touch(user, utc_day()) is False  # a sender marks it used after the job read `old`
    assert activity.retire(user, old) is None  # the job's retire, conditional on what it read, fails
    assert activity.state(user)[0] == ACTIVE


def test_a_sender_waits_for_a_retirement_under_way_and_takes_back_a_crashed_one(stack, uid):
    user = f"retire-{uid}"
    activity = _activity(stack)
    old = utc_day(time.time() - 20 * DAY_S)
    activity.touch(user, old)
    claimed = activity.retire(user, old)
    assert claimed is not None and activity.state(user)[0] == RETIRING
    with pytest.raises(QueueRetiring):
        activity.touch(user, utc_day())
    _set(stack, user, "queue_state_at", {"N": str(int(time.time() * 1000) - STALE_RETIREMENT_MS - 1)})
    assert activity.touch(user, utc_day()) is True  # crashed retirement: the sender recreates the queue
    assert activity.state(user) == (ACTIVE, utc_day())
    assert activity.touch(user, utc_day()) is False
    assert not activity.still_claimed(user, claimed)  # the job, were it still running, would leave the queue


def test_a_retirement_killed_after_its_alarm_is_taken_back_by_the_next_send_within_lambdas_retries(
    stack, uid, monkeypatch
):
    # The fault explorer's `retire_idle_queues cloudwatch.DeleteAlarms#1 killed after`: the job claimed the
    # queue and deleted its alarm, then died. The next campaign's event meets the retirement; Lambda's
    # retry a minute later must find it stale and take the queue back, or the event is given up on.
    user = f"killed-{uid}"
    activity = _activity(stack)
    old = utc_day(time.time() - 20 * DAY_S)
    activity.touch(user, old)
    claimed = activity.retire(user, old)
    assert claimed is not None
    with pytest.raises(QueueRetiring):
        activity.touch(user, utc_day())  # the event's first attempt
    later = time.time() + 60  # Lambda's first retry
    monkeypatch.setattr(time, "time", lambda: later)
    assert activity.touch(user, utc_day()) is True  # taken back: the sender makes the queue and alarm again
    assert activity.reclaim(user) is None  # and the job's next run leaves it


def test_a_job_past_its_time_to_remove_leaves_the_queue_to_the_send_that_takes_it_back(stack, uid, monkeypatch):
    user = f"late-{uid}"
    sqs, c = stack.client("sqs"), wiring.container()
    queue = tenant_queue_name(c.settings.resources, user)
    sqs.create_queue(QueueName=queue)
    activity = _activity(stack)
    old = utc_day(time.time() - 20 * DAY_S)
    activity.touch(user, old)
    cleanup = IdleQueueCleanup(c.settings, activity, sqs, stack.client("cloudwatch"), c.leases)
    real = time.time
    claimed = activity.retire(user, old)
    assert claimed is not None
    monkeypatch.setattr(time, "time", lambda: real() + REMOVE_WITHIN_MS / 1000 + 1)  # the job stalled
    assert cleanup._remove(user, claimed) is False
    assert _queue_exists(stack, queue)  # not deleted: a send may take it back any moment now
    monkeypatch.setattr(time, "time", real)
    assert cleanup._remove(user, claimed) is True and not _queue_exists(stack, queue)


def test_the_sweeper_skips_a_queue_removed_between_its_listing_and_its_depth_check(stack, uid):
    from chalicelib.jobs.sweeper import Sweeper

    sqs = stack.client("sqs")
    gone, full = f"moonsend-local-t-gone{uid}", f"moonsend-local-t-full{uid}"
    for q in (gone, full):
        sqs.send_message(QueueUrl=sqs.create_queue(QueueName=q)["QueueUrl"], MessageBody="{}")

    class RemovedMidSweep:
        """The real client, except that `gone` is deleted right after ListQueues has listed it."""

        def get_paginator(self, name):
            pages = list(sqs.get_paginator(name).paginate(QueueNamePrefix="moonsend-local-t-"))
            sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=gone)["QueueUrl"])

            class Listed:
                def paginate(self, **_kw):
                    return pages

            return Listed()

        def get_queue_attributes(self, **kw):
            return sqs.get_queue_attributes(**kw)

    started = []
    leases = wiring.container().leases
    # Made here, not by a tenant's sends (which mark their queue in use): said in use as those would be.
    Sweeper(wiring.container().settings, RemovedMidSweep(), leases, Said({full, gone}), started.append).sweep()
    assert full in started and gone not in started
    sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=full)["QueueUrl"])
