"""Lambda's and SNS's payload limits, refused by the local endpoint as AWS refuses them (moto checks
neither Lambda's nor SNS's in bytes)."""

import json

import pytest
from botocore.exceptions import ClientError

from infra.local.payload_limits import (
    LAMBDA_ASYNC_MAX_BYTES,
    LAMBDA_SYNC_MAX_BYTES,
    SNS_MAX_BYTES,
    lambda_refusal,
    sns_refusal,
)


def test_lambda_takes_six_mb_synchronously_and_one_mb_as_an_event():
    assert LAMBDA_SYNC_MAX_BYTES == 6_291_456 and LAMBDA_ASYNC_MAX_BYTES == 1_048_576
    assert lambda_refusal("RequestResponse", LAMBDA_SYNC_MAX_BYTES) is None
    assert lambda_refusal("Event", LAMBDA_ASYNC_MAX_BYTES) is None
    status, headers, body = lambda_refusal("Event", LAMBDA_ASYNC_MAX_BYTES + 1)
    assert status == 413 and headers["x-amzn-ErrorType"] == "RequestTooLargeException"
    assert "smaller than 1048576 bytes" in json.loads(body)["message"]
    assert lambda_refusal("RequestResponse", LAMBDA_SYNC_MAX_BYTES + 1)[0] == 413


def test_sns_counts_256_kib_in_bytes_not_characters():
    three_bytes = "€" * (SNS_MAX_BYTES // 3)  # 87,381 characters, 262,143 bytes
    assert sns_refusal({"Action": "Publish", "Message": three_bytes}) is None
    refused = sns_refusal({"Action": "Publish", "Message": three_bytes + "€"})
    assert refused[0] == 400 and b"<Code>InvalidParameter</Code>" in refused[2]
    batch = {"Action": "PublishBatch"}
    batch.update({f"PublishBatchRequestEntries.member.{i}.Message": "x" * 30_000 for i in range(1, 10)})
    assert sns_refusal(batch)[2].count(b"BatchRequestTooLong") == 1  # 270,000 bytes in all
    del batch["PublishBatchRequestEntries.member.9.Message"]
    assert sns_refusal(batch) is None


def test_the_endpoint_refuses_an_oversized_event_and_sns_message_as_aws_does(stack):
    fn = stack.settings.resources.function_name("sweep_queues")
    with pytest.raises(ClientError) as exc:
        stack.client("lambda").invoke(
            FunctionName=fn, InvocationType="Event", Payload=json.dumps({"x": "y" * LAMBDA_ASYNC_MAX_BYTES}).encode()
        )
    assert exc.value.response["Error"]["Code"] == "RequestTooLargeException"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 413
    topic = stack.topic_arns[stack.settings.resources.precompile_topic.name]
    with pytest.raises(ClientError) as exc:
        stack.client("sns").publish(TopicArn=topic, Message="€" * 100_000)  # 300,000 bytes: moto took it
    assert exc.value.response["Error"]["Code"] == "InvalidParameter"
    assert "Message too long" in exc.value.response["Error"]["Message"]
