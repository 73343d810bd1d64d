"""DynamoDB's key sizes and request counts at the local endpoint (infra/local/dynamodb_limits.py): the decision
as data, then through boto3 against the running stack, on both of its paths (the short path and moto's own),
where moto alone accepts what DynamoDB refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.local.dynamodb_limits import HASH_TOO_LONG, RANGE_TOO_LONG, KeySchema, refusal

LEDGER = KeySchema("pk", "rcpt")
TABLES = {("ledger", None): LEDGER, ("lease", None): KeySchema("queue", None), ("ledger", "by-state"): LEDGER}
BATCH_WRITE_TOO_MANY = (
    "at 'requestItems' failed to satisfy constraint: Map value must satisfy constraint: "
    "[Member must have length less than or equal to 25, Member must have length greater than or equal to 1]"
)


def schemas(name: str, index: str | None) -> KeySchema | None:
    return TABLES.get((name, index))


def s(value: str) -> dict[str, str]:
    return {"S": value}


def key(pk: str = "u#c", rcpt: str = "a@x.example") -> dict[str, Any]:
    return {"pk": s(pk), "rcpt": s(rcpt)}


def message(target: str, params: dict[str, Any]) -> str | None:
    refused = refusal(target, params, schemas)
    return None if refused is None else refused.message


# --- the decision --------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["GetItem", "UpdateItem", "DeleteItem"])
def test_a_key_is_refused_past_its_bytes_not_its_characters(target):
    assert message(target, {"TableName": "ledger", "Key": key("p" * 2048, "r" * 1024)}) is None
    assert message(target, {"TableName": "ledger", "Key": key("p" * 2049)}) == HASH_TOO_LONG
    assert message(target, {"TableName": "ledger", "Key": key(rcpt="r" * 1025)}) == RANGE_TOO_LONG
    # two bytes a character: 1,025 characters are 2,050 bytes; 342 three-byte characters are 1,026
    assert message(target, {"TableName": "ledger", "Key": key("é" * 1024)}) is None
    assert message(target, {"TableName": "ledger", "Key": key("é" * 1025)}) == HASH_TOO_LONG
    assert message(target, {"TableName": "ledger", "Key": key(rcpt="€" * 341)}) is None
    assert message(target, {"TableName": "ledger", "Key": key(rcpt="€" * 342)}) == RANGE_TOO_LONG
    assert message(target, {"TableName": "ledger", "Key": key(rcpt="😀" * 257)}) == RANGE_TOO_LONG
    # the partition key is named first when both are over, as moto names them
    assert message(target, {"TableName": "ledger", "Key": key("p" * 3000, "r" * 3000)}) == HASH_TOO_LONG


def test_only_key_attributes_count_and_unknown_tables_are_left_to_moto():
    big = "x" * 5000
    assert message("GetItem", {"TableName": "ledger", "Key": {**key(), "other": s(big)}}) is None
    assert message("GetItem", {"TableName": "nosuch", "Key": key(big)}) is None
    assert message("GetItem", {"TableName": "arn:aws:dynamodb:us-east-1:1:table/ledger", "Key": key(big)}) == (
        HASH_TOO_LONG
    )
    assert message("GetItem", {"TableName": "lease", "Key": {"queue": {"N": "1" * 3000}}}) is None
    assert message("GetItem", {"TableName": "lease", "Key": {"queue": {"B": "QUJD" * 700}}}) == HASH_TOO_LONG
    assert message("PutItem", {"TableName": "ledger", "Item": key(big)}) is None  # moto's own check


@pytest.mark.parametrize(
    ("expression", "values", "says"),
    [
        ("pk = :p", {":p": s("p" * 2049)}, HASH_TOO_LONG),
        ("#k = :p AND #r > :a", {":p": s("u#c"), ":a": s("r" * 1025)}, RANGE_TOO_LONG),
        ("pk = :p AND begins_with(rcpt, :a)", {":p": s("u#c"), ":a": s("€" * 342)}, RANGE_TOO_LONG),
        ("pk = :p AND rcpt BETWEEN :a AND :b", {":p": s("u#c"), ":a": s("a"), ":b": s("b" * 1025)}, RANGE_TOO_LONG),
        ("(pk = :p) AND (rcpt <= :a)", {":p": s("u#c"), ":a": s("a" * 1024)}, None),
        ("pk = :p", {":p": s("p" * 2048)}, None),
    ],
)
def test_a_query_is_refused_for_the_values_its_key_condition_compares_keys_with(expression, values, says):
    params = {
        "TableName": "ledger",
        "KeyConditionExpression": expression,
        "ExpressionAttributeNames": {"#k": "pk", "#r": "rcpt"} if "#" in expression else None,
        "ExpressionAttributeValues": values,
    }
    params = {k: v for k, v in params.items() if v is not None}
    assert message("Query", params) == says
    assert message("Query", {**params, "IndexName": "by-state"}) == says


def test_a_query_in_the_legacy_form_and_its_start_key_are_checked_too():
    legacy = {"pk": {"AttributeValueList": [s("p" * 2049)], "ComparisonOperator": "EQ"}}
    assert message("Query", {"TableName": "ledger", "KeyConditions": legacy}) == HASH_TOO_LONG
    start = {"TableName": "ledger", "KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": s("x")}}
    assert message("Query", {**start, "ExclusiveStartKey": key(rcpt="r" * 1025)}) == RANGE_TOO_LONG


def test_batch_counts_are_refused_before_any_key():
    keys = [key(rcpt=f"{i}@x.example") for i in range(101)]
    over = {"RequestItems": {"ledger": {"Keys": [*keys[:100], key("p" * 3000)]}}}
    assert "'requestItems.ledger.member.keys'" in (message("BatchGetItem", over) or "")
    two = {
        "RequestItems": {"ledger": {"Keys": keys[:60]}, "lease": {"Keys": [{"queue": s(str(i))} for i in range(41)]}}
    }
    assert message("BatchGetItem", two) == "Too many items requested for the BatchGetItem call"
    assert message("BatchGetItem", {"RequestItems": {"ledger": {"Keys": [*keys[:99], key("p" * 2049)]}}}) == (
        HASH_TOO_LONG
    )

    puts = [{"PutRequest": {"Item": key(rcpt=f"{i}@x.example")}} for i in range(26)]
    says = message("BatchWriteItem", {"RequestItems": {"ledger": puts}}) or ""
    assert says.startswith(
        "1 validation error detected: Value '{ledger=[com.amazonaws.dynamodb.v20120810.WriteRequest@"
    )
    assert says.endswith(BATCH_WRITE_TOO_MANY)
    assert says.count("WriteRequest@") == 26
    lease = [{"DeleteRequest": {"Key": {"queue": s(str(i))}}} for i in range(13)]
    assert message("BatchWriteItem", {"RequestItems": {"ledger": puts[:13], "lease": lease}}) == (
        "Too many items requested for the BatchWriteItem call"
    )
    assert message("BatchWriteItem", {"RequestItems": {"ledger": puts[:25]}}) is None
    delete = {"DeleteRequest": {"Key": key(rcpt="r" * 1025)}}
    assert message("BatchWriteItem", {"RequestItems": {"ledger": [*puts[:3], delete]}}) == RANGE_TOO_LONG


def test_a_transaction_with_a_key_over_its_size_is_cancelled_with_a_reason_per_action():
    ok = {"Update": {"TableName": "ledger", "Key": key(), "UpdateExpression": "SET a = :a"}}
    bad = {"Put": {"TableName": "ledger", "Item": {**key("p" * 2049), "a": s("x")}}}
    refused = refusal("TransactWriteItems", {"TransactItems": [ok, bad, ok]}, schemas)
    assert refused is not None and refused.code == "TransactionCanceledException"
    assert refused.message.endswith("[None, ValidationError, None]")
    status, headers, body = refused.response()
    assert status == 400 and headers["X-Amzn-ErrorType"] == "TransactionCanceledException"
    assert json.loads(body)["CancellationReasons"] == [
        {"Code": "None"},
        {"Code": "ValidationError", "Message": HASH_TOO_LONG},
        {"Code": "None"},
    ]
    assert refusal("TransactWriteItems", {"TransactItems": [ok] * 100}, schemas) is None
    assert "at 'transactItems'" in (message("TransactWriteItems", {"TransactItems": [ok] * 101}) or "")
    get = {"Get": {"TableName": "ledger", "Key": key(rcpt="r" * 1025)}}
    assert message("TransactGetItems", {"TransactItems": [get]}) == (
        "Transaction cancelled, please refer cancellation reasons for specific reasons [ValidationError]"
    )


# --- through the stack -----------------------------------------------------------------------------------
@pytest.fixture(params=["short path", "moto's path"])
def ddb(stack: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The stack's DynamoDB through each of the gateway's two paths."""
    assert stack.gateway is not None
    stack.gateway.fast_dynamodb = request.param == "short path"
    try:
        yield stack.client("dynamodb")
    finally:
        stack.gateway.fast_dynamodb = True


@pytest.fixture
def ledger(stack: Any) -> str:
    return stack.settings.resources.ledger_table.name


def refused(call: Any, **kw: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call(**kw)
    return caught.value.response["Error"]["Code"], caught.value.response["Error"]["Message"]


def test_the_stack_refuses_a_partition_key_over_2048_bytes_on_every_operation_that_carries_one(ddb, ledger, uid):
    over, at = f"{uid}#" + "p" * (2049 - len(uid) - 1), f"{uid}#" + "é" * ((2048 - len(uid) - 1) // 2)
    assert len(over.encode()) == 2049 and len(at.encode()) <= 2048 < len(at) * 2
    k = lambda pk: {"pk": s(pk), "rcpt": s("a@x.example")}  # noqa: E731
    invalid = ("ValidationException", HASH_TOO_LONG)
    assert refused(ddb.get_item, TableName=ledger, Key=k(over)) == invalid
    query = {"TableName": ledger, "KeyConditionExpression": "pk = :p"}
    assert refused(ddb.query, **query, ExpressionAttributeValues={":p": s(over)}) == invalid
    update = {"UpdateExpression": "SET #s = :s", "ExpressionAttributeNames": {"#s": "state"}}
    assert refused(
        ddb.update_item, TableName=ledger, Key=k(over), **update, ExpressionAttributeValues={":s": s("x")}
    ) == (invalid)
    assert refused(ddb.delete_item, TableName=ledger, Key=k(over)) == invalid
    assert refused(ddb.batch_get_item, RequestItems={ledger: {"Keys": [k(at), k(over)]}}) == invalid
    assert refused(ddb.put_item, TableName=ledger, Item=k(over)) == invalid  # moto's own check, as AWS's
    tx = [
        {"Update": {"TableName": ledger, "Key": k(kk), **update, "ExpressionAttributeValues": {":s": s("x")}}}
        for kk in (at, over)
    ]
    code, says = refused(ddb.transact_write_items, TransactItems=tx)
    assert (code, says) == (
        "TransactionCanceledException",
        "Transaction cancelled, please refer cancellation reasons for specific reasons [None, ValidationError]",
    )
    assert "Item" not in ddb.get_item(TableName=ledger, Key=k(at), ConsistentRead=True)  # nothing of it applied
    # at the limit, in bytes, every one of them goes through
    assert "Item" not in ddb.get_item(TableName=ledger, Key=k(at))
    ddb.query(**query, ExpressionAttributeValues={":p": s(at)})
    ddb.update_item(TableName=ledger, Key=k(at), **update, ExpressionAttributeValues={":s": s("x")})
    ddb.batch_get_item(RequestItems={ledger: {"Keys": [k(at)]}})
    check = {"TableName": ledger, "Key": k(uid), "ConditionExpression": "attribute_not_exists(pk)"}
    ddb.transact_write_items(TransactItems=[tx[0], {"ConditionCheck": check}])
    ddb.delete_item(TableName=ledger, Key=k(at))


def test_the_stack_refuses_a_sort_key_over_1024_bytes(ddb, ledger, uid):
    k = lambda rcpt: {"pk": s(f"{uid}#c"), "rcpt": s(rcpt)}  # noqa: E731
    invalid = ("ValidationException", RANGE_TOO_LONG)
    assert refused(ddb.get_item, TableName=ledger, Key=k("r" * 1025)) == invalid
    assert refused(ddb.get_item, TableName=ledger, Key=k("€" * 342)) == invalid  # 342 characters, 1,026 bytes
    assert refused(ddb.delete_item, TableName=ledger, Key=k("r" * 1025)) == invalid
    assert refused(ddb.batch_get_item, RequestItems={ledger: {"Keys": [k("€" * 342)]}}) == invalid
    ddb.get_item(TableName=ledger, Key=k("r" * 1024))
    ddb.get_item(TableName=ledger, Key=k("€" * 341))


def test_the_stack_refuses_more_than_25_batch_writes(ddb, ledger, uid):
    puts = [{"PutRequest": {"Item": {"pk": s(f"{uid}#c"), "rcpt": s(f"{i}@x.example")}}} for i in range(26)]
    code, says = refused(ddb.batch_write_item, RequestItems={ledger: puts})
    assert code == "ValidationException" and says.endswith(BATCH_WRITE_TOO_MANY)
    got = ddb.query(TableName=ledger, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": s(f"{uid}#c")})
    assert got["Items"] == []  # none of the batch was written
    ddb.batch_write_item(RequestItems={ledger: puts[:25]})
    deletes = [{"DeleteRequest": {"Key": p["PutRequest"]["Item"]}} for p in puts[:25]]
    ddb.batch_write_item(RequestItems={ledger: deletes})
