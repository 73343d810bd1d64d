"""Exactly once through the local stack: redeliveries, duplicates and crashes give one email each."""

import json
import time

import pytest

from chalicelib import wiring
from chalicelib.core import aws
from chalicelib.core.contract import QueuedEmail
from chalicelib.stores.ports.ledger import Entry
from infra.local.scheduler import scheduled_event
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import container_of, read_sends
from tests.e2e.test_pipeline_e2e import _tenant

pytestmark = pytest.mark.e2e


def _sent_to(stack, user):
    return sorted(s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user)


def test_the_same_sns_event_delivered_three_times_sends_once(stack, uid):
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    spec = CampaignSpec(user, sender, "Hi", "<p>Hi {{ name }}</p>", "c1")
    body = next(messages(spec, [{"email": f"r{i}@example.org", "metadata": {"name": "X"}} for i in range(8)]))
    sns = stack.client("sns")
    for _ in range(3):
        sns.publish(TopicArn=stack.topic_arns["moonsend-local-PrecompileEmail"], Message=body)
    assert stack.wait_until_drained(60)
    assert _sent_to(stack, user) == sorted(f"r{i}@example.org" for i in range(8))
    ledger = wiring.container().ledger
    assert {e.state for e in ledger.entries(user, "c1")} == {"sent"}
    assert all(e.message_id for e in ledger.entries(user, "c1"))


def test_duplicate_queue_messages_for_one_recipient_send_once(stack, uid):
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    c = wiring.container()
    c.tenants.accept(user, "paid", _sender_obj(sender), c.ses.account_of)
    url = c.queues.ensure(f"moonsend-local-t-{user}", user)
    copy = QueuedEmail(user, "paid", {}, "c1", "Hi", "<p>Hi</p>", "dup@example.org").to_json()
    stack.client("sqs").send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": copy} for i in range(5)]
    )
    c.drain_starter.ensure(f"moonsend-local-t-{user}")  # as the writer does once email is on the queue
    assert stack.wait_until_drained(60)
    assert _sent_to(stack, user) == ["dup@example.org"]
    assert c.ledger.get(user, "c1", "dup@example.org").state == "sent"


def test_a_precompile_that_crashes_after_enqueue_is_retried_and_still_sends_once(stack, uid, monkeypatch):
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    ledger = container_of(stack, "precompile_email").ledger
    real = ledger.record_queued
    crashes = []

    def crash_once(user_id, campaign_id, emails):
        if user_id == user and not crashes:
            crashes.append(len(emails))
            raise RuntimeError("injected: the container died after enqueue, before the record")
        return real(user_id, campaign_id, emails)

    monkeypatch.setattr(ledger, "record_queued", crash_once)
    spec = CampaignSpec(user, sender, "Hi", "<p>Hi</p>", "c1")
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, [{"email": f"r{i}@example.org"} for i in range(6)]),
    )
    assert stack.wait_until_drained(60)
    assert crashes == [6]
    assert _sent_to(stack, user) == sorted(f"r{i}@example.org" for i in range(6))  # each once, none lost
    assert {e.state for e in ledger.entries(user, "c1")} == {"sent"}


def test_every_rejected_recipient_is_queryable_with_its_reason(stack, uid):
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    msg = {
        "userId": user,
        "sender": sender,
        "campaign": {"id": "c1", "subject": "Hi {{ name }}", "body": "b", "strict": True},
        "recipients": [
            {"email": "ok@example.org", "metadata": {"name": "A"}},
            {"email": "noname@example.org"},
            {"email": "not-an-address"},
        ],
    }
    stack.client("sns").publish(TopicArn=stack.topic_arns["moonsend-local-PrecompileEmail"], Message=json.dumps(msg))
    assert stack.wait_until_drained(60)
    entries = {e.email: e for e in wiring.container().ledger.entries(user, "c1")}
    assert entries["ok@example.org"].state == "sent"
    assert entries["noname@example.org"].state == "rejected"
    assert "'name' is undefined" in entries["noname@example.org"].reason
    rejected = {e.email: e.reason for e in wiring.container().ledger.entries(user, "c1", state="rejected")}
    assert set(rejected) == {"noname@example.org", "not-an-address"}
    assert rejected["not-an-address"] == "recipients[2].email: not an email address"


def _sender_obj(sender):
    from chalicelib.core.contract import Sender

    return Sender(
        sender["emailAddress"],
        sender["fromName"],
        sender["region"],
        sender["apiKey"],
        sender["apiSecret"],
        float(sender["ratePerSecond"]),
    )


def test_a_throttling_storm_delays_email_but_sends_each_once_and_dead_letters_none(stack, uid):
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    key = sender["apiKey"]
    # The drainer learns MaxSendRate 20 and caches it; then SES drops to 3/s: most sends are throttled.
    from chalicelib.core.contract import Sender

    container_of(stack, "send_emails").ses.quota(  # the SesSender the drainer sends with
        Sender(sender["emailAddress"], "", "us-east-1", key, sender["apiSecret"], 20.0)
    )
    stack.ses.configure(key, max_send_rate=3)
    spec = CampaignSpec(user, sender, "Hi", "<p>Hi</p>", "storm")
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, [{"email": f"r{i}@example.org"} for i in range(12)]),
    )
    assert stack.wait_until_drained(120)
    assert _sent_to(stack, user) == sorted(f"r{i}@example.org" for i in range(12))
    assert {e.state for e in wiring.container().ledger.entries(user, "storm")} == {"sent"}
    assert stack.queue_depths()["moonsend-local-dlq"] == (0, 0, 0)
    assert stack.ses.account(key).refused > 0  # the storm did happen


def test_a_sender_that_dies_after_ses_accepted_is_covered_by_the_send_event_and_never_sends_twice(
    stack, uid, monkeypatch
):
    """The one ambiguous window: SES took the email, the drainer died before recording `sent`.

    SES's Send event (event publishing through the configuration set) records it; when the queue
    message comes back after its visibility timeout, the claim finds the recipient sent and drops it."""
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    queue = f"moonsend-local-t-{user}"
    c = container_of(stack, "send_emails")
    received = {}
    real_finish = c.ledger.finish

    def remember_handle(parsed, **_):
        """The receipt handle of the tenant's message, as the senders' SQS client received it."""
        for m in parsed.get("Messages", []):
            if user in m["Body"]:
                received["handle"] = m["ReceiptHandle"]

    def die_once(claim, state, **kw):
        if claim.pk.startswith(f"{user}#") and "died" not in received:
            received["died"] = True
            raise RuntimeError("injected: the Lambda died after SES accepted, before recording sent")
        return real_finish(claim, state, **kw)

    # The platform's SQS client, the one the sender receives with: observed, not replaced.
    platform_sqs = aws.client("sqs", c.settings.region)
    platform_sqs.meta.events.register("after-call.sqs.ReceiveMessage", remember_handle)
    monkeypatch.setattr(c.ledger, "finish", die_once)
    spec = CampaignSpec(user, sender, "Hi", "<p>Hi</p>", "c1")
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, [{"email": "once@example.org"}]),
    )
    deadline = time.time() + 30
    nothing = Entry("", None, None, None, None)
    while time.time() < deadline and (c.ledger.get(user, "c1", "once@example.org") or nothing).state != "sent":
        time.sleep(0.2)
    platform_sqs.meta.events.unregister("after-call.sqs.ReceiveMessage", remember_handle)
    entry = c.ledger.get(user, "c1", "once@example.org")
    assert received.get("died") and entry.state == "sent"  # recorded by the event, not by the dead sender
    assert [s["messageId"] for s in read_sends(stack.config.outbox) if s["userId"] == user] == [entry.message_id]

    # Its visibility timeout passes and its lease expires: the message is back, a sweep starts a drain.
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=received["handle"], VisibilityTimeout=0)
    held = c.leases.holder(queue)
    if held is not None:
        c.leases.drop(held)
    tick = scheduled_event("arn:aws:events:us-east-1:123456789012:rule/sweep", "123456789012", "us-east-1")
    stack.client("lambda").invoke(FunctionName="moonsend-local-sweep_queues", Payload=json.dumps(tick))
    assert stack.wait_until_drained(30)
    assert _sent_to(stack, user) == ["once@example.org"]  # one email, though the queue message came back
    assert stack.queue_depths()[queue] == (0, 0, 0)
    assert wiring.container().stats.get(user, "c1")["sent"] == 1
