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
    keys = {"t": {"Keys": [{"pk": {"S": "a"}}] * 7}, "u": {"Keys": [{"pk": {"S": "a"}}] * 2, "ConsistentRead": True}}
    got = cost.api_params("dynamodb", _request("BatchGetItem", {"RequestItems": keys}))
    assert cost.units_of("dynamodb", "BatchGetItem", got) == {"dynamodb_rru": 7 * 0.5 + 2}
    assert json.loads(batch["body"])  # the body is what was read


def test_a_read_is_half_a_unit_unless_it_is_strongly_consistent():
    get = {"TableName": "t", "Key": {"pk": {"S": "a"}}}
    eventually = cost.api_params("dynamodb", _request("GetItem", get))
    strongly = cost.api_params("dynamodb", _request("GetItem", {**get, "ConsistentRead": True}))
    assert cost.units_of("dynamodb", "GetItem", eventually) == {"dynamodb_rru": 0.5}
    assert cost.units_of("dynamodb", "GetItem", strongly) == {"dynamodb_rru": 1.0}


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


def _measured(alarms: int = 0) -> dict:
    """A measured run as bench/cost.run returns it, with only what the model reads."""
    return {
        "emails": 1000,
        "tenants": 10,
        "units": {"functions": {"dynamodb_wru": 3000.0}},
        "invocations": {"precompile_email": 5},
        "local_gb_s": {"precompile_email": 1.0},
        "memory_mb": {"send_emails": 512, "precompile_email": 512},
        "alarms": alarms,
        "platform_alarms": 10,
    }


def test_lambda_is_priced_at_the_stages_memory_not_the_local_stages():
    sizes = cost.stage_memory("prod")
    m = {**_measured(), "cpu_s": {"precompile_email": 2.0}}
    prod, local = cost.model(m, rate=1.0, stage="prod"), cost.model(m, rate=1.0, stage="local")
    send_prod = sizes["send_emails"] / 1024 * 1e6 * cost.PRICE["lambda_gb_s"]
    precompile = 2.0 * max(1.0, cost.FULL_VCPU_MB / sizes["precompile_email"]) * sizes["precompile_email"] / 1024
    assert prod["usd"]["lambda_gb_s"] == round(send_prod + precompile / 1000 * 1e6 * cost.PRICE["lambda_gb_s"], 2)
    assert local["usd"]["lambda_gb_s"] < prod["usd"]["lambda_gb_s"]


def test_an_idle_tenant_costs_a_few_looks_a_day_and_a_sending_one_its_hours_in_use():
    priced = cost.model(_measured(), rate=14.0)
    idle_looks = 30 * cost.DAILY_WINDOW  # its few minutes a day
    assert priced["usd_idle_tenant_month"] == round(idle_looks * cost.PRICE["sqs_request"], 6)
    hours = cost.CAMPAIGNS_A_MONTH * (1000 / cost.CAMPAIGNS_A_MONTH / 14 / 3600 + cost.HOURS_IN_USE_AFTER)
    assert priced["usd_per_tenant_month"]["sweeper"] == round((idle_looks + 60 * hours) * cost.PRICE["sqs_request"], 6)
    assert priced["usd_per_tenant_month"]["alarms"] == 0  # the run made no queue alarm
    with_alarms = cost.model(_measured(alarms=10), rate=14.0)
    assert with_alarms["usd_per_tenant_month"]["alarms"] == cost.PRICE["alarm_month"]


def test_the_per_million_figure_is_the_per_email_lines_alone():
    priced = cost.model(_measured(), rate=14.0)
    # Each line is rounded to cents, the figure is not: they differ by at most a cent a line.
    assert abs(priced["usd_per_million"] - sum(priced["usd"].values())) <= 0.01 * len(priced["usd"])
    assert priced["usd_total"] > priced["usd_per_million"]  # the month adds the stage's and the tenants' own


def test_a_functions_time_is_its_own_cpu_at_its_share_of_a_vcpu_and_a_round_trip_a_request():
    m = {
        **_measured(),
        "local_gb_s": {"precompile_email": 9.0, "ses_events": 9.0},  # local durations: no measure
        "memory_mb": {"precompile_email": 512, "ses_events": 256},
        "cpu_s": {"precompile_email": 1.0, "(write pool)": 2.0, "ses_events": 1.0},
        "stand_in_s": {"precompile_email": 0.5, "(write pool)": 1.0, "ses_events": 0.5},
        "requests_of": {"precompile_email": 10, "(write pool)": 160, "ses_events": 20},
    }
    got = cost.aws_gb_s(m, {"precompile_email": 3538, "ses_events": 256})
    # precompile: its CPU and its pool's less the stand-ins' (1.5 s; above a vCPU, as long as that), its own
    # round trips and the pool's, sixteen at a time.
    waits = 10 * cost.AWS_REQUEST_S + 160 * cost.AWS_REQUEST_S / 16
    assert abs(got["precompile_email"] - (1.5 + waits) * 3538 / 1024) < 1e-9
    # ses_events at 256 MB: a seventh of a vCPU, its 0.5 s of CPU take 1,769 / 256 times as long.
    assert abs(got["ses_events"] - (0.5 * 1769 / 256 + 20 * cost.AWS_REQUEST_S) * 256 / 1024) < 1e-9
