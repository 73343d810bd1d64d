"""SES's events through the events queue on the local stack: ses_events' batches, and a record that fails.

The topic, queue, subscription and event source mapping are the packaged template's, created in moto's
CloudFormation; the poller stands in for Lambda's (infra.local.sqs_poller).
"""

import json
import time
from types import SimpleNamespace

import pytest
from moto.sqs.models import sqs_backends

from chalicelib import wiring
from chalicelib.feedback.ses_events import SesEvents
from chalicelib.stores.ledger import Ledger
from infra.local.sqs_poller import sqs_record
from tests.e2e.test_feedback_e2e import OK, _campaign
from tests.e2e.test_pipeline_e2e import _tenant

pytestmark = pytest.mark.e2e


def _queue(stack):
    name = stack.settings.resources.events_queue.name
    return name, sqs_backends[stack.config.account_id][stack.config.region].queues[name]


def test_the_events_topic_delivers_raw_events_to_the_queue_ses_events_reads(stack):
    r = stack.settings.resources
    sns = stack.client("sns")
    topic = stack.topic_arns[r.events_topic.name]
    (sub,) = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert sub["Protocol"] == "sqs" and sub["Endpoint"].endswith(f":{r.events_queue.name}")
    attributes = sns.get_subscription_attributes(SubscriptionArn=sub["SubscriptionArn"])["Attributes"]
    assert attributes["RawMessageDelivery"] == "true"
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=r.events_queue.name)["QueueUrl"]
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert json.loads(a["RedrivePolicy"])["deadLetterTargetArn"].endswith(f":{r.events_dead_letter_queue.name}")
    (statement,) = json.loads(a["Policy"])["Statement"]
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": topic}}


def test_a_campaigns_events_are_recorded_in_batches_far_fewer_than_the_events(stack, uid, monkeypatch):
    """Each batch reads the ledger once for its Send events (under the function's own role), so that no Send
    event reads its recipient alone."""
    sender = _tenant(stack, uid, rate=50, ses_rate=50)
    user = f"tenant-{uid}"
    read_ahead, read_alone = [], []
    real_with_outcome, real_sent_event = Ledger.with_outcome, Ledger.record_sent_event

    def with_outcome(self, recipients):
        recipients = list(recipients)
        read_ahead.extend(r for r in recipients if r[0] == user)
        return real_with_outcome(self, recipients)

    def record_sent_event(self, user_id, campaign_id, email, message_id, *, read_first=True):
        if user_id == user and read_first:
            read_alone.append(email)
        return real_sent_event(self, user_id, campaign_id, email, message_id, read_first=read_first)

    monkeypatch.setattr(Ledger, "with_outcome", with_outcome)
    monkeypatch.setattr(Ledger, "record_sent_event", record_sent_event)
    (poller,) = [p for p in stack.pollers if p.handler_name == "ses_events"]
    batches, records = poller.batches, poller.records
    _campaign(stack, user, sender, "batched", [OK.replace("success@", f"success+{i}@") for i in range(30)])
    c = wiring.container()
    deadline = time.time() + 30
    while c.stats.get(user, "batched")["delivered"] < 30 and time.time() < deadline:
        time.sleep(0.2)
    counts = c.stats.get(user, "batched")
    assert (counts["sent"], counts["delivered"]) == (30, 30)
    handled, invocations = poller.records - records, poller.batches - batches
    assert handled >= 60  # a Send and a Delivery per email
    assert invocations <= handled / 4, (invocations, handled)
    assert len(read_ahead) >= 30 and read_alone == []


def test_a_record_that_fails_stays_on_the_queue_alone_and_the_rest_of_its_batch_is_done(stack, monkeypatch, uid):
    name, queue = _queue(stack)
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    real = SesEvents.record

    def failing(self, raw, rec, *ahead):
        if f"boom-{uid}" in raw:
            raise RuntimeError("the ledger is unreachable")
        return real(self, raw, rec, *ahead)

    # The events queue is the stack's: another test's SES events still coming in would be counted with ours.
    assert stack.wait_until_drained(60)
    monkeypatch.setattr(SesEvents, "record", failing)
    (poller,) = [p for p in stack.pollers if p.handler_name == "ses_events"]
    before = poller.records
    foreign = {"eventType": "Send", "mail": {"messageId": "", "destination": ["a@x.io"], "headers": []}}
    bodies = [
        json.dumps({**foreign, "mail": {**foreign["mail"], "messageId": m}}) for m in (f"ok-{uid}", f"boom-{uid}")
    ]
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate([*bodies, f"{{not json {uid}"])]
    )
    deadline = time.time() + 20
    while poller.records - before < 3 and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # the poller deletes after the invocation returns
    assert queue.approximate_number_of_messages == 0
    ours = [m for m in queue.in_flight if uid in m.body]
    assert [m.body for m in ours] == [bodies[1]]  # the failed one alone, back after the timeout
    (left,) = ours
    assert left.approximate_receive_count == 1
    monkeypatch.undo()
    sqs_backends[stack.config.account_id][stack.config.region].change_message_visibility(name, left.receipt_handle, 0)
    assert stack.wait_until_drained(30)


def test_the_deployed_handler_answers_with_the_records_that_raised_and_no_others(stack, monkeypatch, uid):
    """The handler (Powertools' batch processor) given a batch as Lambda gives it: one record raises, one is
    unreadable (logged and dropped: a retry would not make it readable), one is about mail not ours."""
    real = SesEvents.record

    def failing(self, raw, rec, *ahead):
        if "boom" in raw:
            raise RuntimeError("the ledger is unreachable")
        return real(self, raw, rec, *ahead)

    monkeypatch.setattr(SesEvents, "record", failing)
    foreign = {"eventType": "Send", "mail": {"messageId": "x", "destination": ["a@x.io"], "headers": []}}
    bodies = ['{"eventType": "boom"}', "{not json", json.dumps(foreign)]
    messages = [
        SimpleNamespace(
            id=f"m-{i}-{uid}",
            receipt_handle=f"rh-{i}",
            body=body,
            approximate_receive_count=1,
            sent_timestamp=0,
            approximate_first_receive_timestamp=0,
        )
        for i, body in enumerate(bodies)
    ]
    (source,) = [s for s in stack.created.event_sources if s.queue_arn.endswith("-ses-events")]
    records = [sqs_record(m, source, stack.config.region) for m in messages]
    answer = stack.runner.invoke(stack.runner.resolve("ses_events"), {"Records": records})
    assert answer == {"batchItemFailures": [{"itemIdentifier": f"m-0-{uid}"}]}
