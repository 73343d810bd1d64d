"""The local stack's stand-in for Lambda's DynamoDB stream poller, and the streams its transactions leave.

Each record the poller gives a function is read back by Powertools' DynamoDBStreamEvent (AWS's documented
event, as another library reads it); a cancelled transaction streams nothing, as in DynamoDB."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecordEventName
from botocore.exceptions import ClientError
from moto.dynamodb.models import dynamodb_backends

from infra.local.cloudformation import StackFunction, StreamSource, TemplateError
from infra.local.lambda_runtime import LocalFunction
from infra.local.stream_poller import (
    AGE_EXCEEDED,
    RETRIES_EXHAUSTED,
    StreamPoller,
    check_stream_mapping,
    done_count,
    stream_record,
)


def _streamed_table(stack: Any) -> tuple[Any, str, Any]:
    """A table of its own with a stream no function reads (so nothing trims it under the test)."""
    ddb, name = stack.client("dynamodb"), f"streamed-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "rcpt", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "rcpt", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    shard = dynamodb_backends[stack.config.account_id][stack.config.region].get_table(name).stream_shard
    return ddb, name, shard


def test_a_record_is_given_as_lambda_documents_it(stack):
    ddb, name, shard = _streamed_table(stack)
    ddb.put_item(TableName=name, Item={"pk": {"S": "a#c"}, "rcpt": {"S": "x@y.org"}, "state": {"S": "queued"}})
    ddb.update_item(
        TableName=name,
        Key={"pk": {"S": "a#c"}, "rcpt": {"S": "x@y.org"}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "sent"}},
    )
    arn = ddb.describe_table(TableName=name)["Table"]["LatestStreamArn"]
    source = StreamSource(arn, "fn", 100, 0, "TRIM_HORIZON", False, True)
    records = [stream_record(r, source, "eu-west-1") for r in shard.items]
    event = DynamoDBStreamEvent(json.loads(json.dumps({"Records": records})))  # as Lambda's JSON would carry it
    inserted, modified = event.records
    assert (inserted.event_name, modified.event_name) == (
        DynamoDBRecordEventName.INSERT,
        DynamoDBRecordEventName.MODIFY,
    )
    assert modified.dynamodb.old_image["state"] == "queued" and modified.dynamodb.new_image["state"] == "sent"
    assert modified.aws_region == "eu-west-1" and modified.event_source_arn == arn
    assert modified.event_source == "aws:dynamodb" and isinstance(modified.dynamodb.approximate_creation_date_time, int)
    assert int(modified.dynamodb.sequence_number) > int(inserted.dynamodb.sequence_number)


def test_an_update_that_creates_its_item_streams_one_insert_of_the_whole_item_as_dynamodb_does(stack):
    """moto puts a new item's key first and streams that too: two INSERTs, the first of the key alone. DynamoDB
    streams one record a write."""
    ddb, name, shard = _streamed_table(stack)
    before = len(shard.items)
    key = {"pk": {"S": "a#c"}, "rcpt": {"S": "new@y.org"}}
    ddb.update_item(
        TableName=name,
        Key=key,
        UpdateExpression="SET #s = :s",
        ConditionExpression="attribute_not_exists(#s)",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "queued"}},
    )
    with pytest.raises(ClientError):  # refused: no record
        ddb.update_item(
            TableName=name,
            Key={"pk": {"S": "a#c"}, "rcpt": {"S": "other@y.org"}},
            UpdateExpression="SET #s = :s",
            ConditionExpression="attribute_exists(#s)",
            ExpressionAttributeNames={"#s": "state"},
            ExpressionAttributeValues={":s": {"S": "queued"}},
        )
    ddb.update_item(
        TableName=name,
        Key=key,
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":s": {"S": "sent"}},
    )
    ddb.put_item(TableName=name, Item={"pk": {"S": "a#c"}, "rcpt": {"S": "put@y.org"}})  # streamed as ever
    records = [r.record for r in shard.items[before:]]
    assert [r["eventName"] for r in records] == ["INSERT", "MODIFY", "INSERT"]
    assert records[0]["dynamodb"]["NewImage"]["state"] == {"S": "queued"}
    assert "OldImage" not in records[0]["dynamodb"]
    assert records[1]["dynamodb"]["OldImage"]["state"] == {"S": "queued"}
    assert records[2]["dynamodb"]["Keys"]["rcpt"] == {"S": "put@y.org"}


def test_an_update_that_fails_after_moto_made_its_item_leaves_no_item_and_streams_nothing(stack):
    """moto puts a new item's key before applying the update; an update that then fails (the item past 400 KB)
    left the key in the table. DynamoDB makes nothing of a failed write."""
    ddb, name, shard = _streamed_table(stack)
    before = len(shard.items)
    key = {"pk": {"S": "a#c"}, "rcpt": {"S": "big@y.org"}}
    with pytest.raises(ClientError, match="ValidationException"):
        ddb.update_item(
            TableName=name,
            Key=key,
            UpdateExpression="SET body = :b",
            ExpressionAttributeValues={":b": {"S": "x" * (400 * 1024)}},
        )
    assert "Item" not in ddb.get_item(TableName=name, Key=key)
    assert len(shard.items) == before


def test_a_transactions_update_that_creates_its_item_streams_one_insert_and_nothing_once_cancelled(stack):
    ddb, name, shard = _streamed_table(stack)
    ddb.put_item(TableName=name, Item={"pk": {"S": "a#c"}, "rcpt": {"S": "old@y.org"}})
    before = len(shard.items)

    def create(rcpt: str) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": name,
                "Key": {"pk": {"S": "a#c"}, "rcpt": {"S": rcpt}},
                "UpdateExpression": "SET #s = :s",
                "ExpressionAttributeNames": {"#s": "state"},
                "ExpressionAttributeValues": {":s": {"S": "queued"}},
            }
        }

    refused = {"ConditionCheck": {"TableName": name, "Key": {"pk": {"S": "a#c"}, "rcpt": {"S": "old@y.org"}}}}
    refused["ConditionCheck"]["ConditionExpression"] = "attribute_not_exists(pk)"
    with pytest.raises(ClientError, match="TransactionCanceled"):
        ddb.transact_write_items(TransactItems=[create("n1@y.org"), refused])
    assert len(shard.items) == before
    assert "Item" not in ddb.get_item(TableName=name, Key={"pk": {"S": "a#c"}, "rcpt": {"S": "n1@y.org"}})
    ddb.transact_write_items(TransactItems=[create("n2@y.org")])
    (record,) = [r.record for r in shard.items[before:]]
    assert record["eventName"] == "INSERT" and record["dynamodb"]["NewImage"]["state"] == {"S": "queued"}


def test_a_cancelled_transaction_streams_nothing_and_one_that_went_through_streams_each_write(stack):
    ddb, name, shard = _streamed_table(stack)
    ddb.put_item(TableName=name, Item={"pk": {"S": "a#c"}, "rcpt": {"S": "old@y.org"}, "n": {"N": "1"}})
    before = len(shard.items)

    def put(rcpt: str, condition: str | None = None) -> dict[str, Any]:
        op: dict[str, Any] = {"TableName": name, "Item": {"pk": {"S": "a#c"}, "rcpt": {"S": rcpt}}}
        if condition:
            op["ConditionExpression"] = condition
        return {"Put": op}

    with pytest.raises(ClientError, match="TransactionCanceled"):
        ddb.transact_write_items(
            TransactItems=[put("new@y.org"), put("old@y.org", "attribute_not_exists(pk)")]  # the second fails
        )
    assert len(shard.items) == before  # neither the write nor its undoing was streamed
    ddb.transact_write_items(TransactItems=[put("new@y.org"), put("other@y.org")])
    assert [r.record["eventName"] for r in shard.items[before:]] == ["INSERT", "INSERT"]


def test_what_a_function_answers_decides_how_much_of_the_batch_is_done():
    seq = ["11", "12", "13"]
    assert done_count(None, seq, True) == 3
    assert done_count({"batchItemFailures": []}, seq, True) == 3
    assert done_count({"batchItemFailures": [{"itemIdentifier": "12"}]}, seq, True) == 1  # again from 12
    assert done_count({"batchItemFailures": [{"itemIdentifier": "13"}, {"itemIdentifier": "12"}]}, seq, True) == 1
    assert done_count({"batchItemFailures": [{"itemIdentifier": "99"}]}, seq, True) == 0  # unknown: all again
    assert done_count({"batchItemFailures": "no"}, seq, True) == 0
    assert done_count({"batchItemFailures": [{"itemIdentifier": "12"}]}, seq, False) == 3  # not switched on


# --- the mapping's error handling, with a fake function over a fake shard ---------------------------------

NOW = 1_793_000_000.0
ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/ledger/stream/2026-11-24T00:00:00.000"
QUEUE = "arn:aws:sqs:us-east-1:123456789012:moonsend-local-failed-invocations"


class _Record:
    def __init__(self, seq: int, created: float) -> None:
        self.seq, self.created = seq, created

    def to_json(self) -> dict[str, Any]:
        change = {
            "ApproximateCreationDateTime": self.created,
            "Keys": {"pk": {"S": f"k{self.seq}"}},
            "SequenceNumber": str(self.seq),
            "SizeBytes": 10,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
        return {"eventID": str(self.seq), "eventName": "INSERT", "eventSource": "aws:dynamodb", "dynamodb": change}


class _Shard:
    id = "shardId-00000001541626099285-f35f62ef"

    def __init__(self, n: int, created: float = NOW) -> None:
        self.items = [_Record(100 + i, created) for i in range(n)]
        self.starting_sequence_number = 100


class _Runner:
    hurrying = False

    def invoke(self, fn: LocalFunction, event: dict[str, Any]) -> Any:
        return fn.handler(event, None)


def _poller(handler: Any, shard: _Shard, **settings: Any) -> tuple[StreamPoller, list[list[str]], list[dict]]:
    """A poller of `shard` for a function that records each batch it is given; and what went on-failure."""
    seen: list[list[str]] = []

    def function(event: dict[str, Any], _context: Any) -> Any:
        numbers = [r["dynamodb"]["SequenceNumber"] for r in event["Records"]]
        seen.append(numbers)
        return handler(numbers)

    sent: list[dict[str, Any]] = []
    fn = LocalFunction("webhook_events", "moonsend-local-webhook_events", function)
    source = StreamSource(ARN, fn.function_name, 4, 0, "TRIM_HORIZON", True, True, **settings)
    poller = StreamPoller(
        _Runner(),  # type: ignore[arg-type]
        fn,
        source,
        lambda: shard,
        "us-east-1",
        on_failure=lambda _fn, queue, record: sent.append({"queue": queue, **record}),
        clock=lambda: NOW,
    )
    return poller, seen, sent


def _run(poller: StreamPoller, most: int = 100) -> None:
    for _ in range(most):
        if poller.poll_once() is None:
            return
    pytest.fail("the poller never finished the shard")


def _raises_on(bad: str) -> Any:
    def handler(numbers: list[str]) -> None:
        if bad in numbers:
            raise RuntimeError(f"record {bad}")

    return handler


def test_a_batch_that_raises_is_halved_until_the_bad_record_is_alone_then_retried_and_given_up():
    shard = _Shard(8)
    poller, seen, sent = _poller(_raises_on("103"), shard, bisect=True, max_retries=2, on_failure=QUEUE)
    _run(poller)
    # [100..103] raised: halved (no retry spent) to [100, 101], then [102, 103], halved to [102], then [103]
    # alone: tried, and retried twice, then given up; the shard goes on past it.
    assert seen == [
        ["100", "101", "102", "103"],
        ["100", "101"],
        ["102", "103"],
        ["102"],
        ["103"],
        ["103"],
        ["103"],
        ["104", "105", "106", "107"],
    ]
    (record,) = sent
    assert record["queue"] == QUEUE and shard.items == []
    assert record["requestContext"]["condition"] == RETRIES_EXHAUSTED
    assert record["requestContext"]["approximateInvokeCount"] == 3
    assert record["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}
    info = record["DDBStreamBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == ("103", "103", 1)
    assert info["shardId"] == _Shard.id and info["streamArn"] == ARN
    # As Lambda documents it, read by Powertools' model of a stream's on-failure destination record.
    from aws_lambda_powertools.utilities.parser import parse
    from aws_lambda_powertools.utilities.parser.models import DynamoDBStreamLambdaOnFailureDestinationModel

    parsed = parse(
        event={k: v for k, v in record.items() if k != "queue"}, model=DynamoDBStreamLambdaOnFailureDestinationModel
    )
    assert parsed.ddb_stream_batch_info.approximate_arrival_of_first_record.timestamp() == NOW


def test_without_bisecting_the_whole_batch_is_retried_and_given_up_together():
    poller, seen, sent = _poller(_raises_on("101"), _Shard(4), max_retries=1, on_failure=QUEUE)
    _run(poller)
    assert seen == [["100", "101", "102", "103"]] * 2
    assert [(s["DDBStreamBatchInfo"]["startSequenceNumber"], s["DDBStreamBatchInfo"]["batchSize"]) for s in sent] == [
        ("100", 4)
    ]


def test_a_reported_failure_is_retried_from_that_record_and_given_up_from_there():
    def handler(numbers: list[str]) -> dict[str, Any]:
        return {"batchItemFailures": [{"itemIdentifier": "102"}] if "102" in numbers else []}

    poller, seen, sent = _poller(handler, _Shard(6), bisect=True, max_retries=1, on_failure=QUEUE)
    _run(poller)
    # 100 and 101 are done; the rest of the batch, from 102, failed once (it answered: not halved), is
    # retried once alone, and given up; the shard goes on.
    assert seen == [["100", "101", "102", "103"], ["102", "103"], ["104", "105"]]
    (record,) = sent
    assert "functionError" not in record["responseContext"]  # the function answered
    info = record["DDBStreamBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == ("102", "103", 2)
    assert record["requestContext"]["approximateInvokeCount"] == 2


def test_records_older_than_the_mappings_age_are_given_up_before_the_function_sees_them():
    shard = _Shard(3, created=NOW - 7200)
    shard.items.append(_Record(103, NOW))
    poller, seen, sent = _poller(lambda numbers: None, shard, max_record_age_s=3600, on_failure=QUEUE)
    _run(poller)
    assert seen == [["103"]]
    (record,) = sent
    assert (
        record["requestContext"]["condition"] == AGE_EXCEEDED
        and record["requestContext"]["approximateInvokeCount"] == 0
    )
    assert record["DDBStreamBatchInfo"]["batchSize"] == 3


def test_with_no_limits_a_failing_batch_is_retried_and_nothing_is_given_up():
    poller, seen, sent = _poller(_raises_on("100"), _Shard(2))
    for _ in range(20):
        assert poller.poll_once() is True
    assert len(seen) == 20 and sent == []


def test_the_mappings_settings_are_checked_as_lambda_checks_them():
    allow = {
        "Effect": "Allow",
        "Action": [
            "dynamodb:DescribeStream",
            "dynamodb:GetShardIterator",
            "dynamodb:GetRecords",
            "dynamodb:ListStreams",
        ],
        "Resource": "*",
    }
    send = {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": QUEUE}

    def fn(*statements: dict[str, Any]) -> StackFunction:
        policy = json.dumps({"Version": "2012-10-17", "Statement": list(statements)})
        return StackFunction("F", "f", "app.f", 60, 128, {}, "arn:role", (policy,), None, 2)

    base = StreamSource(ARN, "f", 100, 1, "TRIM_HORIZON", True, True, True, 10, 21600, QUEUE)
    check_stream_mapping(base, fn(allow, send))
    with pytest.raises(TemplateError, match="permissions to call SendMessage on " + QUEUE):
        check_stream_mapping(base, fn(allow))
    for bad, match in (
        ({"max_retries": 10001}, "MaximumRetryAttempts"),
        ({"max_record_age_s": 59}, "MaximumRecordAgeInSeconds"),
        ({"on_failure": "arn:aws:lambda:us-east-1:123456789012:function:x"}, "not a queue"),
    ):
        with pytest.raises(TemplateError, match=match):
            check_stream_mapping(replace(base, **bad), fn(allow, send))
