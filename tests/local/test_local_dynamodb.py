"""The local stack's short path for DynamoDB answers exactly as moto's own server layers do."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.parsing import validators
from moto.dynamodb.parsing.ast_nodes import Node
from moto.dynamodb.parsing.expressions import UpdateExpressionParser

from infra.local import dynamodb_wire, fast_dynamodb


@pytest.fixture
def ddb(stack: Any) -> Any:
    return stack.client("dynamodb")


@pytest.fixture
def short_path_calls(stack: Any, monkeypatch: pytest.MonkeyPatch, uid: str) -> Iterator[list[str]]:
    """The calls the short path answered for the test's own tables (named with its uid): the stack's functions
    may still be finishing an earlier test's work, through the same path."""
    calls: list[str] = []
    real = dynamodb_wire.handle
    own = uid.encode()

    def counting(target: str, region: str, account: str, body: bytes) -> Any:
        answered = real(target, region, account, body)
        if answered is not None and own in body:
            calls.append(target.rpartition(".")[2])
        return answered

    monkeypatch.setattr(dynamodb_wire, "handle", counting)
    yield calls


def _ledger_like_table(ddb: Any, table: str) -> None:
    """A table keyed as the ledger is: pk (hash) and sk (range), both strings."""
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def _scenario(ddb: Any, table: str) -> list[Any]:
    """Every kind of call the pipeline makes, with its successes and its refusals, answers recorded."""
    _ledger_like_table(ddb, table)
    out: list[Any] = []

    def call(name: str, **kw: Any) -> None:
        try:
            resp = getattr(ddb, name)(TableName=table, **kw) if name != "batch_get_item" else ddb.batch_get_item(**kw)
            resp.pop("ResponseMetadata", None)
            resp.pop("ConsumedCapacity", None)
            out.append((name, resp))
        except ClientError as exc:
            err = exc.response["Error"]
            out.append((name, "error", err["Code"], err.get("Message"), exc.response.get("Item")))

    key = {"pk": {"S": "u#c"}, "sk": {"S": "a@x.example"}}
    call("get_item", Key=key)
    # updates that would create their item: refused by each kind of check (none leaves an item), then made
    new = {"pk": {"S": "u#c"}, "sk": {"S": "new@x.example"}}
    one = {":one": {"N": "1"}}
    call("update_item", Key=new, UpdateExpression="SET x = nothere + :one", ExpressionAttributeValues=one)
    call("update_item", Key=new, UpdateExpression="SET n = :nope")
    call("update_item", Key=new, UpdateExpression="SET a = :one, a = :one", ExpressionAttributeValues=one)
    call("update_item", Key=new, UpdateExpression="SET sk = :one", ExpressionAttributeValues=one)
    call("update_item", Key=new, UpdateExpression="SET a = :one ADD a :one", ExpressionAttributeValues=one)
    call("get_item", Key=new, ConsistentRead=True)
    call(
        "update_item",
        Key=new,
        UpdateExpression="SET #s = :q, seen = if_not_exists(seen, :one) ADD tries :one",
        ConditionExpression="attribute_not_exists(#s)",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":q": {"S": "queued"}, ":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    call("get_item", Key=new, ConsistentRead=True)
    call(
        "put_item",
        Item={**key, "state": {"S": "queued"}, "n": {"N": "1"}},
        ConditionExpression="attribute_not_exists(pk)",
    )
    call("put_item", Item={**key, "state": {"S": "queued"}}, ConditionExpression="attribute_not_exists(pk)")
    call("get_item", Key=key, ConsistentRead=True)
    call(
        "update_item",
        Key=key,
        UpdateExpression="SET #s = :c, #n = #n + :one ADD tries :one",
        ConditionExpression="#s = :q",
        ExpressionAttributeNames={"#s": "state", "#n": "n"},
        ExpressionAttributeValues={":c": {"S": "claimed"}, ":q": {"S": "queued"}, ":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    call(
        "update_item",
        Key=key,
        UpdateExpression="SET #s = :c",
        ConditionExpression="#s = :q",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":c": {"S": "claimed"}, ":q": {"S": "queued"}},
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )
    call(
        "update_item",
        Key=key,
        UpdateExpression="SET #s = :a, #s = :b",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":a": {"S": "a"}, ":b": {"S": "b"}},
    )
    call(
        "update_item",
        Key=key,
        UpdateExpression="SET #k = :a",
        ExpressionAttributeNames={"#k": "sk"},
        ExpressionAttributeValues={":a": {"S": "b@x.example"}},
    )
    call(
        "update_item",
        Key=key,
        UpdateExpression="SET meta.opens = if_not_exists(meta.opens, :z) + :one REMOVE gone",
        ExpressionAttributeValues={":z": {"N": "0"}, ":one": {"N": "1"}},
    )
    call("update_item", Key=key, UpdateExpression="SET meta = :m", ExpressionAttributeValues={":m": {"M": {}}})
    # one of each remaining walk's answers: a missing path, a type mismatch, an undefined value, list_append,
    # a set's DELETE, and a nested path's SET beside a REMOVE
    call(
        "update_item",
        Key=key,
        UpdateExpression="SET x = nothere + :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    call(
        "update_item",
        Key=key,
        UpdateExpression="SET n = #s + :one",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    call("update_item", Key=key, UpdateExpression="SET n = :nope")
    call(
        "update_item",
        Key=key,
        UpdateExpression="SET l = list_append(if_not_exists(l, :e), :v), tags = :t",
        ExpressionAttributeValues={":e": {"L": []}, ":v": {"L": [{"S": "a"}]}, ":t": {"SS": ["a", "b"]}},
        ReturnValues="UPDATED_NEW",
    )
    call(
        "update_item",
        Key=key,
        UpdateExpression="DELETE tags :d SET l[0] = :z REMOVE l[5]",
        ExpressionAttributeValues={":d": {"SS": ["a"]}, ":z": {"S": "z"}},
        ReturnValues="UPDATED_NEW",
    )
    for _ in range(2):  # the second time from the cache of parsed expressions
        call(
            "update_item",
            Key=key,
            UpdateExpression="SET meta.opens = if_not_exists(meta.opens, :z) + :one ADD tries :one",
            ExpressionAttributeValues={":z": {"N": "0"}, ":one": {"N": "1"}},
            ReturnValues="UPDATED_NEW",
        )
    call("update_item", Key=key, UpdateExpression="SET = :a", ExpressionAttributeValues={":a": {"S": "x"}})
    for cond in ("attribute_exists(meta.opens) AND tries < :two", "attribute_exists(meta.opens) AND tries < :two"):
        call(
            "update_item",
            Key=key,
            UpdateExpression="ADD tries :one",
            ConditionExpression=cond,
            ExpressionAttributeValues={":one": {"N": "1"}, ":two": {"N": "2"}},
            ReturnValues="UPDATED_NEW",
        )  # the second is refused: the first took tries to 2
    call("update_item", Key=key, UpdateExpression="SET a = :a SET b = :a", ExpressionAttributeValues={":a": {"S": "x"}})
    for i in range(3):
        call("put_item", Item={"pk": {"S": "u#c"}, "sk": {"S": f"r{i}@x.example"}, "state": {"S": "sent"}})
    call(
        "query",
        KeyConditionExpression="pk = :p AND begins_with(sk, :r)",
        ExpressionAttributeValues={":p": {"S": "u#c"}, ":r": {"S": "r"}},
        Limit=2,
    )
    call(
        "batch_get_item",
        RequestItems={table: {"Keys": [key, {"pk": {"S": "u#c"}, "sk": {"S": "nobody"}}], "ConsistentRead": True}},
    )
    call("delete_item", Key=key, ReturnValues="ALL_OLD")
    call("delete_item", Key=key, ConditionExpression="attribute_exists(pk)")
    ddb.delete_table(TableName=table)
    return out


def test_short_path_answers_as_moto_does_including_conditional_refusals(
    stack: Any, ddb: Any, uid: str, short_path_calls: list[str]
) -> None:
    assert stack.gateway is not None
    stack.gateway.fast_dynamodb = False
    try:
        through_moto = _scenario(ddb, f"t-{uid}")
    finally:
        stack.gateway.fast_dynamodb = True
    assert short_path_calls == []
    short = _scenario(ddb, f"t-{uid}")  # the same table, made afresh
    assert short == through_moto
    # and the short path did answer them: every call of the scenario but the table set-up
    assert len(short_path_calls) == len(short)
    assert {"error"} <= {r[1] for r in short if isinstance(r[1], str)}  # the refusals went this way too


def test_local_update_validation_answers_as_moto_own_does(stack: Any, ddb: Any, uid: str) -> None:
    """The local stack's cheaper update-expression validation and parse cache (fast_dynamodb) change no answer."""
    fast_dynamodb.uninstall()
    try:
        moto_own = _scenario(ddb, f"v-{uid}")
    finally:
        fast_dynamodb.install()
    ours = _scenario(ddb, f"v-{uid}")
    assert len(ours) == len(moto_own)
    for i, (a, b) in enumerate(zip(ours, moto_own, strict=True)):
        assert a == b, f"page {i} differs"
    codes = [r[2] for r in ours if isinstance(r[1], str)]
    assert codes.count("ValidationException") >= 4  # key update, syntax error, two SETs, overlapping paths
    opens = [
        r[1]["Attributes"]["meta"]["M"]["opens"]["N"]
        for r in ours
        if r[0] == "update_item" and isinstance(r[1], dict) and "meta" in r[1].get("Attributes", {})
    ]
    assert opens == ["1", "2"]  # a cached parse still applies to each item afresh


def test_binary_attributes_are_left_to_moto(stack: Any, ddb: Any, uid: str, short_path_calls: list[str]) -> None:
    table = f"bin-{uid}"
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName=table, Item={"pk": {"S": "k"}, "blob": {"B": b"\x00\x01"}})
    got = ddb.get_item(TableName=table, Key={"pk": {"S": "k"}})["Item"]
    assert got["blob"]["B"] == b"\x00\x01"
    assert short_path_calls == ["GetItem"]  # the put carried a binary value: moto's parser decoded it


def _shape(node: Any, seen: dict[int, int]) -> Any:
    """A parse tree as nested tuples (types, attributes, children), its parent links as references."""
    if isinstance(node, Node):
        if id(node) in seen:
            return ("ref", seen[id(node)])
        seen[id(node)] = len(seen)
        attrs = sorted((k, _shape(v, seen)) for k, v in vars(node).items() if not k.startswith("_moonsend"))
        return (type(node).__name__, tuple(attrs))
    if isinstance(node, list | tuple):
        return (type(node).__name__, tuple(_shape(x, seen) for x in node))
    return repr(node)


@pytest.mark.parametrize(
    "expression",
    [
        "SET #s = :s, #r = if_not_exists(#r, :z) + :one REMOVE #x ADD #c :n",
        "SET meta.opens = if_not_exists(meta.opens, :z) + :one ADD tries :one",
        "SET a[1].b = list_append(a, :l) DELETE s :v",
    ],
)
def test_the_validators_copy_of_a_cached_parse_is_a_deep_copy_of_it(expression: str) -> None:
    fast_dynamodb.install()
    tree = UpdateExpressionParser.make(expression)
    assert UpdateExpressionParser.make(expression) is tree  # cached
    ours = validators.deepcopy(tree)
    assert _shape(ours, {}) == _shape(copy.deepcopy(tree), {}) == _shape(tree, {})
    ours.children.clear()  # the validator changes its copy in place: the cached tree must not see it
    assert _shape(validators.deepcopy(tree), {}) == _shape(tree, {}) != _shape(ours, {})


def _transactions(ddb: Any, table: str) -> list[Any]:
    """TransactWriteItems that go through, that a condition cancels, that repeat a key; and what is left."""
    _ledger_like_table(ddb, table)
    out: list[Any] = []

    def key(sk: str) -> dict[str, Any]:
        return {"pk": {"S": "u#c"}, "sk": {"S": sk}}

    def update(sk: str, state: str, condition: str | None = "attribute_not_exists(#s)") -> dict[str, Any]:
        op: dict[str, Any] = {
            "TableName": table,
            "Key": key(sk),
            "UpdateExpression": "SET #s = :s ADD n :one",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {":s": {"S": state}, ":one": {"N": "1"}},
        }
        if condition:
            op["ConditionExpression"] = condition
        else:
            del op["ExpressionAttributeNames"]
            op["UpdateExpression"] = "SET #t = :s ADD n :one".replace("#t", "tag")
        return {"Update": op}

    def transact(items: list[dict[str, Any]]) -> None:
        try:
            ddb.transact_write_items(TransactItems=items)
            out.append("ok")
        except ClientError as exc:
            reasons = [(r.get("Code"), r.get("Message")) for r in exc.response.get("CancellationReasons", [])]
            out.append((exc.response["Error"]["Code"], reasons))

    transact([update(f"r{i}", "queued") for i in range(4)])
    # r1 exists: cancelled, and r5 (new) and r6's tag must not be there afterwards
    transact([update("r5", "queued"), update("r1", "queued"), update("r6", "queued", None)])
    transact([update("r7", "queued"), update("r7", "queued")])  # one key twice
    check = {"ConditionCheck": {"TableName": table, "Key": key("r0"), "ConditionExpression": "attribute_exists(sk)"}}
    put = {"Put": {"TableName": table, "Item": {**key("r8"), "state": {"S": "sent"}}}}
    gone = {"Delete": {"TableName": table, "Key": key("r3")}}
    transact([check, put, gone, update("r2", "x", "#s = :s")])  # r2 is queued, not x: all three undone
    transact([check, put, gone])
    items = ddb.query(
        TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "u#c"}}
    )["Items"]
    out.append(sorted((i["sk"]["S"], i.get("state", {}).get("S"), i.get("n", {}).get("N")) for i in items))
    ddb.delete_table(TableName=table)
    return out


def test_local_transactions_answer_and_roll_back_as_motos_own(stack: Any, ddb: Any, uid: str) -> None:
    """The local stack's transaction (rolled back item by item, not by copying tables) changes no answer."""
    fast_dynamodb.uninstall()
    try:
        moto_own = _transactions(ddb, f"x-{uid}")
    finally:
        fast_dynamodb.install()
    ours = _transactions(ddb, f"x-{uid}")
    assert len(ours) == len(moto_own)
    for i, (a, b) in enumerate(zip(ours, moto_own, strict=True)):
        assert a == b, f"page {i} differs"
    assert ours[0] == "ok" and ours[1][0] == "TransactionCanceledException"
    assert [code for code, _ in ours[1][1]] == ["None", "ConditionalCheckFailed", "None"]
    assert ours[-1] == [
        ("r0", "queued", "1"),
        ("r1", "queued", "1"),
        ("r2", "queued", "1"),
        ("r8", "sent", None),
    ]


def _queries(ddb: Any, table: str, numeric: bool) -> list[Any]:
    """Every page of a battery of Queries: directions, limits, key conditions, filters, projections."""
    key = "N" if numeric else "S"

    def v(x: Any) -> dict[str, str]:
        return {key: str(x)}

    conditions: list[tuple[str, dict[str, Any]]] = [
        ("pk = :h", {":h": {"S": "p1"}}),
        ("pk = :h", {":h": {"S": "nobody"}}),
        ("pk = :h AND sk < :a", {":h": {"S": "p1"}, ":a": v(150 if numeric else "m")}),
        ("pk = :h AND sk >= :a", {":h": {"S": "p2"}, ":a": v(20 if numeric else "b")}),
        (
            "pk = :h AND sk BETWEEN :a AND :b",
            {":h": {"S": "p1"}, ":a": v(10 if numeric else "a"), ":b": v(90 if numeric else "r0")},
        ),
    ]
    if not numeric:
        for prefix in ("r1", "R", "r", "zz", "é", "r19"):
            conditions.append(("pk = :h AND begins_with(sk, :a)", {":h": {"S": "p1"}, ":a": {"S": prefix}}))
    pages: list[Any] = []
    for expression, values in conditions:
        for forward in (True, False):
            for limit in (1, 7, 1000):
                for extra in ({}, {"FilterExpression": "st = :s"}, {"ProjectionExpression": "sk"}):
                    asked = {"TableName": table, "KeyConditionExpression": expression, "Limit": limit}
                    asked["ExpressionAttributeValues"] = dict(values)
                    if "FilterExpression" in extra:
                        asked["ExpressionAttributeValues"][":s"] = {"S": "sent"}
                    asked.update(extra, ScanIndexForward=forward)
                    start = None
                    for _ in range(200):
                        answer = ddb.query(**asked, **({"ExclusiveStartKey": start} if start else {}))
                        pages.append(
                            (answer["Items"], answer["Count"], answer["ScannedCount"], answer.get("LastEvaluatedKey"))
                        )
                        start = answer.get("LastEvaluatedKey")
                        if not start:
                            break
    return pages


@pytest.mark.parametrize("numeric", [False, True], ids=["string keys", "number keys"])
def test_local_queries_answer_page_by_page_as_motos_own(stack: Any, ddb: Any, uid: str, numeric: bool) -> None:
    """The local stack's Query (its partition alone, sorted by key value, the start and a prefix found by
    bisection) answers every page as moto's own does, its counts and its LastEvaluatedKey too."""
    table = f"q-{uid}-{'n' if numeric else 's'}"
    key_type = "N" if numeric else "S"
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": key_type},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    names = [f"r{i}" for i in range(60)] + ["R5", "a", "b", "éa", "é", "m", "zz9", "r", "r19x"]
    for p in ("p1", "p2", "p3"):
        for i, name in enumerate(names):
            sk = {"N": str(i * 3 - 20)} if numeric else {"S": name}
            item = {"pk": {"S": p}, "sk": sk, "st": {"S": "sent" if i % 3 else "failed"}, "pad": {"S": "x" * (i % 5)}}
            ddb.put_item(TableName=table, Item=item)
    fast_dynamodb.uninstall()
    try:
        moto_own = _queries(ddb, table, numeric)
    finally:
        fast_dynamodb.install()
    ours = _queries(ddb, table, numeric)
    assert len(ours) == len(moto_own) > 300
    for i, (a, b) in enumerate(zip(ours, moto_own, strict=True)):
        assert a == b, f"page {i} differs"


def test_local_queries_answer_as_motos_own_after_keys_are_added_removed_and_rolled_back(
    stack: Any, ddb: Any, uid: str
) -> None:
    """The sorted keys a Query keeps per partition are forgotten when a key comes or goes (a put of a new
    key, a delete, a batch, a transaction that failed and took its new item back); an item changed in place
    is read as it is now."""
    table = f"qk-{uid}"
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for i in range(40):
        ddb.put_item(TableName=table, Item={"pk": {"S": "p1"}, "sk": {"S": f"r{i}"}, "st": {"S": "queued"}})
    _queries(ddb, table, False)  # the partitions' keys are kept from here on
    ddb.put_item(TableName=table, Item={"pk": {"S": "p1"}, "sk": {"S": "r5a"}, "st": {"S": "sent"}})
    ddb.delete_item(TableName=table, Key={"pk": {"S": "p1"}, "sk": {"S": "r10"}})
    ddb.update_item(
        TableName=table,
        Key={"pk": {"S": "p1"}, "sk": {"S": "r3"}},
        UpdateExpression="SET st = :s",
        ExpressionAttributeValues={":s": {"S": "sent"}},
    )
    ddb.update_item(  # a new key by an update
        TableName=table,
        Key={"pk": {"S": "p1"}, "sk": {"S": "r0b"}},
        UpdateExpression="SET st = :s",
        ExpressionAttributeValues={":s": {"S": "failed"}},
    )
    ddb.batch_write_item(
        RequestItems={
            table: [
                {"PutRequest": {"Item": {"pk": {"S": "p1"}, "sk": {"S": "r99"}, "st": {"S": "sent"}}}},
                {"DeleteRequest": {"Key": {"pk": {"S": "p1"}, "sk": {"S": "r20"}}}},
            ]
        }
    )
    with pytest.raises(ddb.exceptions.TransactionCanceledException):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"pk": {"S": "p1"}, "sk": {"S": "r77"}, "st": {"S": "x"}}}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {"pk": {"S": "p1"}, "sk": {"S": "r1"}},
                        "ConditionExpression": "st = :no",
                        "ExpressionAttributeValues": {":no": {"S": "never"}},
                    }
                },
            ]
        )
    ours = _queries(ddb, table, False)
    fast_dynamodb.uninstall()
    try:
        moto_own = _queries(ddb, table, False)
    finally:
        fast_dynamodb.install()
    assert len(ours) == len(moto_own) > 300
    for i, (a, b) in enumerate(zip(ours, moto_own, strict=True)):
        assert a == b, f"page {i} differs"
    keys = [
        item["sk"]["S"]
        for item in ddb.query(
            TableName=table, KeyConditionExpression="pk = :h", ExpressionAttributeValues={":h": {"S": "p1"}}
        )["Items"]
    ]
    assert "r5a" in keys and "r0b" in keys and "r99" in keys and "r10" not in keys and "r20" not in keys
    assert "r77" not in keys
