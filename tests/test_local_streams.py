"""The local stack's stand-in for Lambda's DynamoDB stream poller, and the streams its transactions leave.

Each record the poller gives a function is read back by Powertools' DynamoDBStreamEvent (AWS's documented
event, as another library reads it); a cancelled transaction streams nothing, as in DynamoDB."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecordEventName
from botocore.exceptions import ClientError
from moto.dynamodb.models import dynamodb_backends

from infra.local.cloudformation import StreamSource
from infra.local.stream_poller import done_count, stream_record


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
