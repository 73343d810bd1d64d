"""The local endpoint refuses what SQS refuses and moto takes: characters outside SQS's set, and messages
over 1 MiB counted in bytes (UTF-8), not characters. Each through boto3, as an SDK sees AWS's answer, on the
short path (`sqs_wire`) and on moto's own (a message with attributes goes there)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.local import sqs_limits

MIB = 1_048_576
ATTRIBUTES = {"n": {"DataType": "Number", "StringValue": "1"}}  # sends the request down moto's own path


@pytest.fixture
def sqs(stack: Any) -> Any:
    return stack.client("sqs")


@pytest.fixture
def queue(sqs: Any, uid: str) -> str:
    return str(sqs.create_queue(QueueName=f"limits-{uid}")["QueueUrl"])


def _bodies(sqs: Any, url: str) -> list[str]:
    got: list[str] = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        got += [m["Body"] for m in batch]
    return sorted(got)


@pytest.mark.parametrize("extra", [{}, {"MessageAttributes": ATTRIBUTES}], ids=["short path", "moto's path"])
def test_a_character_sqs_refuses_is_refused_with_invalid_message_contents(sqs, queue, extra):
    for bad, shown in (("\uffff", "#xFFFF"), ("\x07", "#x7"), ("\ud800", "#xD800"), ("\ufffe", "#xFFFE")):
        with pytest.raises(ClientError) as refused:
            sqs.send_message(QueueUrl=queue, MessageBody=f"reason: {bad}", **extra)
        error = refused.value.response["Error"]
        assert error["Code"] == "InvalidMessageContents" and error["Type"] == "Sender"
        assert error["Message"] == (
            f"Invalid binary character '{shown}' was found in the message body, the set of allowed characters "
            "is #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]."
        )
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    allowed = "tab\t lf\n cr\r \x7f \ud7ff \ue000 \ufffd \U00010000 \U0010ffff 😀 é 漢"
    sqs.send_message(QueueUrl=queue, MessageBody=allowed, **extra)
    assert _bodies(sqs, queue) == [allowed]


@pytest.mark.parametrize("extra", [{}, {"MessageAttributes": ATTRIBUTES}], ids=["short path", "moto's path"])
def test_a_batch_entry_with_a_refused_character_fails_alone_and_the_others_are_queued(sqs, queue, extra):
    entries = [
        {"Id": "a", "MessageBody": "fine"},
        {"Id": "b", "MessageBody": "x\uffffy"},
        {"Id": "c", "MessageBody": "ok"},
    ]
    answer = sqs.send_message_batch(QueueUrl=queue, Entries=[{**e, **extra} for e in entries])
    assert sorted(s["Id"] for s in answer["Successful"]) == ["a", "c"]
    (failed,) = answer["Failed"]
    assert failed["Id"] == "b" and failed["Code"] == "InvalidMessageContents" and failed["SenderFault"] is True
    assert "'#xFFFF'" in failed["Message"]
    assert _bodies(sqs, queue) == ["fine", "ok"]
    every = sqs.send_message_batch(QueueUrl=queue, Entries=[{**entries[1], **extra}])
    assert every["Successful"] == [] and [f["Id"] for f in every["Failed"]] == ["b"]


def test_a_message_of_1_mib_in_bytes_is_taken_and_one_byte_more_is_refused(sqs, queue):
    exactly = "é" * (MIB // 2)  # 524,288 characters, 1,048,576 bytes
    sqs.send_message(QueueUrl=queue, MessageBody=exactly)
    for over in (exactly + "x", "é" * 600_000):  # 600,000 characters: moto alone took it
        with pytest.raises(ClientError) as refused:
            sqs.send_message(QueueUrl=queue, MessageBody=over)
        error = refused.value.response["Error"]
        assert error["Code"] == "InvalidParameterValue" and error["Type"] == "Sender"
        assert (
            error["Message"]
            == "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes."
        )
    with pytest.raises(ClientError, match="InvalidParameterValue"):  # with attributes, on moto's path:
        sqs.send_message(QueueUrl=queue, MessageBody=exactly[:-1], MessageAttributes=ATTRIBUTES)  # 2 + 6 + 1 over
    assert [len(b) for b in _bodies(sqs, queue)] == [MIB // 2]


def test_a_batch_of_1_mib_in_bytes_is_taken_and_one_byte_more_is_refused_whole(sqs, queue):
    half = "漢" * (MIB // 6)  # 174,762 characters, 524,286 bytes
    exactly = [{"Id": "a", "MessageBody": half}, {"Id": "b", "MessageBody": half + "xxxx"}]
    assert len(sqs.send_message_batch(QueueUrl=queue, Entries=exactly)["Successful"]) == 2
    over = [exactly[0], {"Id": "b", "MessageBody": half + "xxxxx"}]
    with pytest.raises(ClientError) as refused:
        sqs.send_message_batch(QueueUrl=queue, Entries=over)
    error = refused.value.response["Error"]
    assert error["Code"] == "AWS.SimpleQueueService.BatchRequestTooLong" and error["Type"] == "Sender"
    assert error["Message"] == "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes."
    assert type(refused.value).__name__ == "BatchRequestTooLong"  # botocore's modelled error
    assert len(_bodies(sqs, queue)) == 2


def test_the_decisions_as_data():
    assert sqs_limits.refused_character('plain ascii {"json": 1}') is None
    assert sqs_limits.refused_character("a\x1fb\x00") == "\x1f"
    assert sqs_limits.refused_character("é\uffff") == "\uffff"
    assert sqs_limits.send_refusal({"MessageBody": "x" * 1024}, limit=1024) is None
    assert sqs_limits.send_refusal({"MessageBody": "é" * 513}, limit=1024) == sqs_limits.too_long(1024)
    assert sqs_limits.send_refusal({"MessageBody": 3}) is None  # left to moto
    verdict = sqs_limits.batch_verdict({"Entries": [{"Id": str(i), "MessageBody": "x"} for i in range(11)]})
    assert verdict.refusal is None and len(verdict.entries) == 11  # too many: moto's own refusal
    # The Query protocol (form bodies): a whole request is refused alike, in its XML shape.
    status, _headers, body = sqs_limits.screen(
        "SendMessage", b"Action=SendMessage&QueueUrl=q&MessageBody=a%EF%BF%BF", False, lambda _url: MIB
    ).answer or (0, {}, b"")
    assert status == 400 and b"<Code>InvalidMessageContents</Code>" in body and b"#xFFFF" in body
    form = b"Action=SendMessageBatch&SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody="
    refused = sqs_limits.screen("SendMessageBatch", form + b"x" * 2000, False, lambda _url: 1024).answer
    assert refused is not None and b"AWS.SimpleQueueService.BatchRequestTooLong" in refused[2]
    json_answer = sqs_limits.with_failed(b'{"Successful": [{"Id": "a"}]}', [{"Id": "b"}])
    assert json.loads(json_answer) == {"Successful": [{"Id": "a"}], "Failed": [{"Id": "b"}]}
