"""The local stack's SQS (moto with incremental bookkeeping) behaves as SQS does."""

import json
import time

import pytest
from botocore.exceptions import ClientError


@pytest.fixture
def sqs(stack):
    return stack.client("sqs")


def _attrs(sqs, url):
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (
        int(a["ApproximateNumberOfMessages"]),
        int(a["ApproximateNumberOfMessagesNotVisible"]),
        int(a["ApproximateNumberOfMessagesDelayed"]),
    )


def test_counts_follow_send_receive_and_delete(sqs, uid):
    url = sqs.create_queue(QueueName=f"t-{uid}")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)])
    assert _attrs(sqs, url) == (10, 0, 0)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4, VisibilityTimeout=30)["Messages"]
    assert len(got) == 4 and _attrs(sqs, url) == (6, 4, 0)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])  # twice is fine
    assert _attrs(sqs, url) == (6, 3, 0)
    bodies = {m["Body"] for m in got[1:]}
    rest = []
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            break
        rest += batch
    assert len(rest) == 6 and not bodies & {m["Body"] for m in rest}


def test_message_comes_back_after_its_visibility_timeout_with_a_new_receipt(sqs, uid):
    url = sqs.create_queue(QueueName=f"t-{uid}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    first = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"][0]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    time.sleep(1.1)
    again = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["ApproximateReceiveCount"])
    msg = again["Messages"][0]
    assert msg["MessageId"] == first["MessageId"] and msg["ReceiptHandle"] != first["ReceiptHandle"]
    assert msg["Attributes"]["ApproximateReceiveCount"] == "2"


def test_change_visibility_returns_a_message_early_or_holds_it(sqs, uid):
    url = sqs.create_queue(QueueName=f"t-{uid}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    m = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"][0]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    assert _attrs(sqs, url) == (1, 0, 0)
    m = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"][0]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=600)
    assert _attrs(sqs, url) == (0, 1, 0)
    with pytest.raises(ClientError, match="ReceiptHandleIsInvalid"):
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle="bogus", VisibilityTimeout=0)


def test_a_message_is_hidden_for_at_most_12_hours_from_its_receive_however_old_it_is(sqs, uid, monkeypatch):
    """AWS: "extend the visibility timeout to a maximum of 12 hours" from the receive (ChangeMessageVisibility's
    reference). moto counts from when the message was sent: a dead letter (its SentTimestamp kept from its
    first queue) a day old could never be hidden again, and reconcile_dead_letters failed on the stack only."""
    from infra.local import fast_sqs

    url = sqs.create_queue(QueueName=f"t-{uid}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    real = fast_sqs.unix_time_millis
    monkeypatch.setattr(fast_sqs, "unix_time_millis", lambda: real() + 86_400_000)  # received a day later
    m = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"][0]
    monkeypatch.setattr(fast_sqs, "unix_time_millis", lambda: real() + 86_400_000 + 1_000_000)  # 1,000 s on
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=42_000)
    with pytest.raises(ClientError, match="beyond the limit"):
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=42_300)


def test_delayed_message_is_counted_as_delayed_then_delivered(sqs, uid):
    url = sqs.create_queue(QueueName=f"t-{uid}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=1)
    assert _attrs(sqs, url) == (0, 0, 1)
    started = time.monotonic()
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=3)["Messages"]
    assert got[0]["Body"] == "later" and time.monotonic() - started < 2.9  # woke on arrival


def test_too_many_receives_move_a_message_to_the_dead_letter_queue(sqs, uid):
    dlq = sqs.create_queue(QueueName=f"dlq-{uid}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=f"t-{uid}",
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"})},
    )["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    for _ in range(2):
        m = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"][0]
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert sqs.receive_message(QueueUrl=dlq)["Messages"][0]["Body"] == "poison"


def test_purge_empties_the_queue(sqs, uid):
    url = sqs.create_queue(QueueName=f"t-{uid}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    sqs.purge_queue(QueueUrl=url)
    assert _attrs(sqs, url) == (0, 0, 0)


def test_fifo_queues_still_work(sqs, uid):
    url = sqs.create_queue(
        QueueName=f"t-{uid}.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    for body in ("a", "b", "a"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["a", "b"]


def test_message_attributes_are_returned_when_asked_for(sqs, uid):
    url = sqs.create_queue(QueueName=f"t-{uid}")["QueueUrl"]
    sqs.send_message(
        QueueUrl=url,
        MessageBody="x",
        MessageAttributes={
            "moonsend-throttles": {"DataType": "Number", "StringValue": "3"},
            "other": {"DataType": "String", "StringValue": "y"},
        },
    )
    m = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["moonsend-throttles"])["Messages"][0]
    assert m["MessageAttributes"] == {"moonsend-throttles": {"DataType": "Number", "StringValue": "3"}}


@pytest.mark.parametrize("over_network", [False, True], ids=["direct", "loopback"])
def test_concurrent_first_creates_of_a_queue_make_one_queue_and_lose_no_message(stack, uid, monkeypatch, over_network):
    """SQS creates a queue once; moto looks the name up, then creates. Two senders creating a new tenant's
    queue at the same moment each made one, the second replacing the first and the message sent to it."""
    import threading
    from contextlib import nullcontext

    from moto.sqs import models as sqs_models

    from infra.local import direct_calls

    real_init = sqs_models.Queue.__init__

    def slow_init(self, *args, **kwargs):  # a busy machine: a wide window between look-up and creation
        time.sleep(0.02)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(sqs_models.Queue, "__init__", slow_init)
    senders, name = 8, f"race-{uid}"
    start = threading.Barrier(senders)
    errors: list[BaseException] = []

    def first_send(i: int) -> None:
        try:
            with direct_calls.over_network() if over_network else nullcontext():
                client = stack.client("sqs")
                start.wait()
                url = client.create_queue(QueueName=name)["QueueUrl"]
                client.send_message(QueueUrl=url, MessageBody=f"m{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_send, args=(i,)) for i in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    assert _attrs(sqs, url) == (senders, 0, 0)
