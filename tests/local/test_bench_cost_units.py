"""bench/cost.py prices what AWS bills: a batch or a transaction by its items, read from the request as botocore's
`before-call` hands it (serialised), not as none."""

from __future__ import annotations

import json

import botocore.session

from bench import cost


def _request(operation: str, params: dict) -> dict:
    """The request dict botocore serialises for a DynamoDB call, as `before-call` receives it."""
    client = botocore.session.get_session().create_client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    model = client.meta.service_model.operation_model(operation)
    return client._serializer.serialize_to_request(params, model)


def test_a_batch_write_is_priced_by_its_items_and_a_transaction_at_two_units_an_item():
    put = {"PutRequest": {"Item": {"pk": {"S": "a"}}}}
    batch = _request("BatchWriteItem", {"RequestItems": {"t1": [put] * 20, "t2": [put] * 5}})
    assert isinstance(batch["body"], (bytes, str)) and "RequestItems" not in batch  # serialised, not the API's
    assert cost.units_of("dynamodb", "BatchWriteItem", cost.api_params("dynamodb", batch)) == {"dynamodb_wru": 25}
    item = {"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}}}}
    transact = _request("TransactWriteItems", {"TransactItems": [item] * 3})
    assert cost.units_of("dynamodb", "TransactWriteItems", cost.api_params("dynamodb", transact)) == {"dynamodb_wru": 6}
    keys = {"t": {"Keys": [{"pk": {"S": "a"}}] * 7}}
    got = cost.api_params("dynamodb", _request("BatchGetItem", {"RequestItems": keys}))
    assert cost.units_of("dynamodb", "BatchGetItem", got) == {"dynamodb_rru": 7}
    assert json.loads(batch["body"])  # the body is what was read


def test_a_dynamodb_request_is_labelled_by_the_tables_it_reaches():
    """Each table's share of the cost: the floor each could reach is worked out table by table."""
    update = {
        "Update": {"TableName": "moonsend-local-ledger", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET a=:a"}
    }
    count = {"Update": {"TableName": "moonsend-local-usage", "Key": {"pk": {"S": "b"}}, "UpdateExpression": "SET b=:b"}}
    transact = cost.api_params("dynamodb", _request("TransactWriteItems", {"TransactItems": [update, count]}))
    assert cost._labelled("dynamodb", "TransactWriteItems", transact) == "TransactWriteItems ledger+usage"
    get = cost.api_params("dynamodb", _request("GetItem", {"TableName": "moonsend-local-tenants", "Key": {}}))
    assert cost._labelled("dynamodb", "GetItem", get) == "GetItem tenants"
    assert cost._labelled("sqs", "SendMessage", {}) == "SendMessage"
