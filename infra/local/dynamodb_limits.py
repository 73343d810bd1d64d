"""Emulator: DynamoDB's key sizes and request counts, refused at the local endpoint as DynamoDB does.

moto 5.2 checks the key sizes of PutItem (and of a BatchWriteItem's PutRequest) only, and none on a key
that is read, updated or deleted; it checks BatchGetItem's 100 keys and the transactions' 100 items, but
not BatchWriteItem's 25 requests. A request that carries a key is checked here before moto (or the
short path, `dynamodb_wire`) sees it; `refusal` decides, as data, from the request's JSON and the key
schema of its table (read from moto's backend in this process, `moto_schemas`).

The figures are the Developer Guide's quotas page ("Service, account, and table quotas in Amazon
DynamoDB": partition key 1 to 2,048 bytes, sort key 1 to 1,024 bytes, UTF-8 for strings, the raw bytes
for binary) and the API reference's (BatchWriteItem 25 requests, BatchGetItem 100 keys, transactions
100 actions). The messages, and how sure we are of each (searched in public reports quoting AWS's
answers; none could be checked against AWS from here):

- Partition key over 2,048 bytes: ValidationException "One or more parameter values were invalid: Size of
  hashkey has exceeded the maximum size limit of2048 bytes" (no space before 2048: AWS's own typo).
  Confirmed on PutItem, GetItem, Query (its key condition's value), UpdateItem, DeleteItem and BatchGetItem
  (reports from 2018 on; an emulator's parity fix measured against the service lists all of them).
- Sort key over 1,024 bytes: ValidationException "One or more parameter values were invalid: Aggregated
  size of all range keys has exceeded the size limit of 1024 bytes". Confirmed on PutItem and GetItem,
  and for UpdateItem, DeleteItem and BatchGetItem by the same parity fix. In a Query's key condition
  (a sort key compared with a value over 1,024 bytes) and in ExclusiveStartKey: unverified, the key's
  messages assumed.
- A key over its size in a transaction (TransactWriteItems, TransactGetItems): TransactionCanceledException,
  the offending action's reason `ValidationError` and the others' `None`. Reported by an emulator's parity
  fix (ExtendDB #211: "cancels the transaction with a per-item TransactionCanceledException carrying a
  ValidationError cancellation reason"); the reason's message (the key's message here) is unverified.
- BatchWriteItem with more than 25 requests for one table: "1 validation error detected: Value
  '{<table>=[com.amazonaws.dynamodb.v20120810.WriteRequest@<hash>, ...]}' at 'requestItems' failed to
  satisfy constraint: Map value must satisfy constraint: [Member must have length less than or equal to
  25, Member must have length greater than or equal to 1]". Confirmed (reports from 2016 to 2025); the
  hashes are Java's object hashes, made up here. More than 25 in all, none over 25 for one table: "Too
  many items requested for the BatchWriteItem call": seen from DynamoDB Local, from AWS unverified (the
  BatchGetItem analogue below is AWS's).
- BatchGetItem over 100 keys for one table: "1 validation error detected: Value at
  'requestItems.<table>.member.keys' failed to satisfy constraint: Member must have length less than or
  equal to 100"; over 100 in all: "Too many items requested for the BatchGetItem call". moto's wording,
  which moto's maintainers took from AWS (moto #3046); checked here first so that the counts are answered
  before any key (AWS validates a request's shape before its values).
- Transactions over 100 actions: "1 validation error detected: Value '[com.amazonaws.dynamodb.v20120810.
  TransactGetItem@<hash>, ...]' at 'transactItems' failed to satisfy constraint: Member must have length
  less than or equal to 100" (moto's TransactGetItems wording, verified by moto against AWS); the same
  shape with TransactWriteItem for TransactWriteItems is unverified.

Which key AWS names first when both are over is not known; here the partition key, as moto does. Numbers
as keys are not counted (38 digits at most: never near a limit). The check is on the hottest path of the
local stack: it reads only the key attributes, and counts a string's bytes only when its characters could
be over (a character is at most 4 bytes in UTF-8).
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

HASH_KEY_MAX_BYTES = 2048
RANGE_KEY_MAX_BYTES = 1024
BATCH_WRITE_MAX_REQUESTS = 25
BATCH_GET_MAX_KEYS = 100
TRANSACTION_MAX_ITEMS = 100

HASH_TOO_LONG = (
    "One or more parameter values were invalid: Size of hashkey has exceeded the maximum size limit "
    f"of{HASH_KEY_MAX_BYTES} bytes"
)
RANGE_TOO_LONG = (
    "One or more parameter values were invalid: Aggregated size of all range keys has exceeded the size limit "
    f"of {RANGE_KEY_MAX_BYTES} bytes"
)
_TYPE = "com.amazonaws.dynamodb.v20120810#"
_JSON = {"Content-Type": "application/x-amz-json-1.0"}
Response = tuple[int, dict[str, str], bytes]
# The targets a check applies to; PutItem is moto's (it refuses an item's key with these messages).
CHECKED = frozenset(
    {
        "GetItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "TransactGetItems",
    }
)


class KeySchema(NamedTuple):
    hash_key: str
    range_key: str | None


# (table name, index name or None) -> its key schema, or None when there is no such table or index.
SchemaLookup = Callable[[str, str | None], KeySchema | None]


@dataclass(frozen=True)
class Refusal:
    """What DynamoDB answers instead: an error of its JSON protocol."""

    code: str
    message: str
    reasons: tuple[str | None, ...] = field(default=())  # a cancelled transaction's: a message per action

    def response(self) -> Response:
        """(status, headers, body) as DynamoDB (and moto's server) writes the error."""
        if self.code == "TransactionCanceledException":
            body: dict[str, Any] = {
                "__type": _TYPE + self.code,
                "CancellationReasons": [
                    {"Code": "ValidationError", "Message": r} if r else {"Code": "None"} for r in self.reasons
                ],
                "Message": self.message,
            }
        else:
            body = {"__type": _TYPE + self.code, "message": self.message}
        return 400, {**_JSON, "X-Amzn-ErrorType": self.code}, json.dumps(body).encode()


def _invalid(message: str) -> Refusal:
    return Refusal("ValidationException", message)


def _cancelled(reasons: list[str | None]) -> Refusal:
    codes = ", ".join("ValidationError" if r else "None" for r in reasons)
    message = f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]"
    return Refusal("TransactionCanceledException", message, tuple(reasons))


def _java_list(member: str, n: int) -> str:
    """How AWS echoes a list it refuses: Java's toString of each element (the hashes are made up)."""
    return ", ".join(f"com.amazonaws.dynamodb.v20120810.{member}@{0x10000001 + i:x}" for i in range(n))


# --- sizes ---------------------------------------------------------------------------------------------
def _size_over(value: object, limit: int) -> bool:
    """Whether a key value ({"S": ...} or {"B": base64}) is over `limit` bytes."""
    if type(value) is not dict:
        return False
    v = value.get("S")
    if type(v) is str:
        if len(v) * 4 <= limit:  # no string of these characters can be over: not encoded
            return False
        return len(v) > limit if v.isascii() else len(v.encode("utf-8", "surrogatepass")) > limit
    v = value.get("B")
    return type(v) is str and (len(v) * 3) // 4 - v.count("=", -2) > limit


def _key_refusal(item: Mapping[str, Any], schema: KeySchema) -> str | None:
    """The message for a key (or an item's key attributes) over its sizes, or None."""
    if _size_over(item.get(schema.hash_key), HASH_KEY_MAX_BYTES):
        return HASH_TOO_LONG
    if schema.range_key is not None and _size_over(item.get(schema.range_key), RANGE_KEY_MAX_BYTES):
        return RANGE_TOO_LONG
    return None


def _checked_key(params: Mapping[str, Any], member: str, schemas: SchemaLookup) -> Refusal | None:
    key, schema = params.get(member), _schema(params, schemas)
    if not isinstance(key, dict) or schema is None:
        return None
    message = _key_refusal(key, schema)
    return _invalid(message) if message else None


def _schema(params: Mapping[str, Any], schemas: SchemaLookup, index: str | None = None) -> KeySchema | None:
    name = params.get("TableName")
    return schemas(table_name(name), index) if isinstance(name, str) else None


def table_name(name: str) -> str:
    """A table's name, from its name or its ARN (`arn:aws:dynamodb:REGION:ACCOUNT:table/NAME`)."""
    return name.partition(":table/")[2] or name if name.startswith("arn:") else name


# --- Query ---------------------------------------------------------------------------------------------
def _query(params: Mapping[str, Any], schemas: SchemaLookup) -> Refusal | None:
    index = params.get("IndexName") if isinstance(params.get("IndexName"), str) else None
    schema = _schema(params, schemas, index)
    if schema is None:
        return None
    limits = {schema.hash_key: (HASH_KEY_MAX_BYTES, HASH_TOO_LONG)}
    if schema.range_key is not None:
        limits[schema.range_key] = (RANGE_KEY_MAX_BYTES, RANGE_TOO_LONG)
    for attribute, value in _key_condition_values(params):
        limit = limits.get(attribute) if attribute is not None else None
        if limit is not None and _size_over(value, limit[0]):
            return _invalid(limit[1])
    start = params.get("ExclusiveStartKey")
    table = _schema(params, schemas)
    message = _key_refusal(start, table) if isinstance(start, dict) and table is not None else None
    return _invalid(message) if message else None


def _key_condition_values(params: Mapping[str, Any]) -> Iterator[tuple[str | None, Any]]:
    """(attribute, value) of each value a Query's key condition compares a key attribute with."""
    legacy = params.get("KeyConditions")
    if isinstance(legacy, dict):
        for attribute, condition in legacy.items():
            for value in (condition or {}).get("AttributeValueList") or ():
                yield attribute, value
    expression = params.get("KeyConditionExpression")
    if isinstance(expression, str):
        names = params.get("ExpressionAttributeNames") or {}
        values = params.get("ExpressionAttributeValues") or {}
        for attribute, placeholders in _clauses(expression, names):
            for p in placeholders:
                yield attribute, values.get(p)


def _clauses(expression: str, names: Mapping[str, str]) -> Iterator[tuple[str | None, tuple[str, ...]]]:
    """Each clause of a key condition: the attribute it names and the value placeholders it holds."""
    for attribute, placeholders in _parsed(expression):
        yield (names.get(attribute) if attribute and attribute[0] == "#" else attribute), placeholders


@functools.lru_cache(maxsize=512)
def _parsed(expression: str) -> tuple[tuple[str | None, tuple[str, ...]], ...]:
    """A key condition's clauses (`a = :v`, `begins_with(b, :p)`, `b BETWEEN :x AND :y`), each as the name
    it compares (or its `#` placeholder) and its value placeholders; clauses are joined by AND, and the AND
    of a BETWEEN is its own. Cached by text: the pipeline sends the same few expressions again and again."""
    clauses: list[tuple[str | None, tuple[str, ...]]] = []
    attribute: str | None = None
    placeholders: list[str] = []
    between = False
    for token in _tokens(expression):
        upper = token.upper()
        if upper == "AND" and not between:
            clauses.append((attribute, tuple(placeholders)))
            attribute, placeholders = None, []
        elif upper == "AND":
            between = False
        elif upper == "BETWEEN":
            between = True
        elif token[0] == ":":
            placeholders.append(token)
        elif upper != "BEGINS_WITH":
            attribute = token
    clauses.append((attribute, tuple(placeholders)))
    return tuple(clauses)


def _tokens(expression: str) -> Iterator[str]:
    """Names, placeholders and words of an expression (operators and brackets left out)."""
    word: list[str] = []
    for ch in expression:
        if ch.isalnum() or ch in "_:#":
            word.append(ch)
        elif word:
            yield "".join(word)
            word = []
    if word:
        yield "".join(word)


# --- batches -------------------------------------------------------------------------------------------
def _batch_get(params: Mapping[str, Any], schemas: SchemaLookup) -> Refusal | None:
    tables = params.get("RequestItems")
    if not isinstance(tables, dict):
        return None
    counts = {name: len((request or {}).get("Keys") or ()) for name, request in tables.items()}
    for name, n in counts.items():
        if n > BATCH_GET_MAX_KEYS:
            return _invalid(
                f"1 validation error detected: Value at 'requestItems.{name}.member.keys' failed to satisfy "
                f"constraint: Member must have length less than or equal to {BATCH_GET_MAX_KEYS}"
            )
    if sum(counts.values()) > BATCH_GET_MAX_KEYS:
        return _invalid("Too many items requested for the BatchGetItem call")
    for name, request in tables.items():
        message = _first_key_refusal(schemas(table_name(name), None), (request or {}).get("Keys") or ())
        if message:
            return _invalid(message)
    return None


def _batch_write(params: Mapping[str, Any], schemas: SchemaLookup) -> Refusal | None:
    tables = params.get("RequestItems")
    if not isinstance(tables, dict):
        return None
    for name, requests in tables.items():
        if len(requests or ()) > BATCH_WRITE_MAX_REQUESTS:
            return _invalid(
                f"1 validation error detected: Value '{{{name}=[{_java_list('WriteRequest', len(requests))}]}}' "
                "at 'requestItems' failed to satisfy constraint: Map value must satisfy constraint: "
                f"[Member must have length less than or equal to {BATCH_WRITE_MAX_REQUESTS}, "
                "Member must have length greater than or equal to 1]"
            )
    if sum(len(r or ()) for r in tables.values()) > BATCH_WRITE_MAX_REQUESTS:
        return _invalid("Too many items requested for the BatchWriteItem call")
    for name, requests in tables.items():
        message = _first_key_refusal(schemas(table_name(name), None), _written_keys(requests or ()))
        if message:
            return _invalid(message)
    return None


def _written_keys(requests: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    for r in requests:
        if not isinstance(r, dict):
            continue
        put, delete = r.get("PutRequest"), r.get("DeleteRequest")
        found = (put or {}).get("Item") if isinstance(put, dict) else (delete or {}).get("Key")
        if isinstance(found, dict):
            yield found


def _first_key_refusal(schema: KeySchema | None, keys: Iterable[Any]) -> str | None:
    if schema is None:
        return None
    return next((m for k in keys if isinstance(k, dict) and (m := _key_refusal(k, schema))), None)


# --- transactions --------------------------------------------------------------------------------------
def _transaction(params: Mapping[str, Any], schemas: SchemaLookup, member: str) -> Refusal | None:
    items = params.get("TransactItems")
    if not isinstance(items, list):
        return None
    if len(items) > TRANSACTION_MAX_ITEMS:
        return _invalid(
            f"1 validation error detected: Value '[{_java_list(member, len(items))}]' at 'transactItems' "
            f"failed to satisfy constraint: Member must have length less than or equal to {TRANSACTION_MAX_ITEMS}"
        )
    reasons = [_action_refusal(item, schemas) for item in items]
    return _cancelled(reasons) if any(reasons) else None


def _action_refusal(item: object, schemas: SchemaLookup) -> str | None:
    if not isinstance(item, dict) or len(item) != 1:
        return None
    kind, op = next(iter(item.items()))
    if not isinstance(op, dict):
        return None
    schema = _schema(op, schemas)
    key = op.get("Item") if kind == "Put" else op.get("Key")
    return _key_refusal(key, schema) if isinstance(key, dict) and schema is not None else None


def refusal(target: str, params: Mapping[str, Any], schemas: SchemaLookup) -> Refusal | None:
    """What DynamoDB refuses of this request (its operation and JSON) for its key sizes or counts, or None."""
    if target in ("GetItem", "UpdateItem", "DeleteItem"):
        return _checked_key(params, "Key", schemas)
    if target == "Query":
        return _query(params, schemas)
    if target == "BatchGetItem":
        return _batch_get(params, schemas)
    if target == "BatchWriteItem":
        return _batch_write(params, schemas)
    if target == "TransactWriteItems":
        return _transaction(params, schemas, "TransactWriteItem")
    if target == "TransactGetItems":
        return _transaction(params, schemas, "TransactGetItem")
    return None


# --- moto's tables, in this process --------------------------------------------------------------------
_lookups: dict[tuple[str, str], SchemaLookup] = {}
# (account, region, table, index) -> (the table it was read from, its schema): read again when the
# table is not that one any more (deleted and made again, or restored from a saved state).
_schemas: dict[tuple[str, str, str, str | None], tuple[weakref.ref[Any], KeySchema | None]] = {}


def moto_schemas(account: str, region: str) -> SchemaLookup:
    """Key schemas as moto holds them: the tables of the caller's account and region, read in process."""
    found = _lookups.get((account, region))
    if found is None:
        found = _lookups[(account, region)] = _moto_lookup(account, region)
    return found


def _moto_lookup(account: str, region: str) -> SchemaLookup:
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[account][region]

    def lookup(name: str, index: str | None) -> KeySchema | None:
        table = backend.tables.get(name)
        if table is None:
            return None
        cached = _schemas.get((account, region, name, index))
        if cached is not None and cached[0]() is table:
            return cached[1]
        schema = _schema_of(table, index)
        _schemas[(account, region, name, index)] = (weakref.ref(table), schema)
        return schema

    return lookup


def _schema_of(table: Any, index: str | None) -> KeySchema | None:
    if index is None:
        return KeySchema(table.hash_key_attr, table.range_key_attr)
    for i in [*table.global_indexes, *table.indexes]:
        if i.name == index:
            parts = {k["KeyType"]: k["AttributeName"] for k in i.schema}
            return KeySchema(parts["HASH"], parts.get("RANGE"))
    return None


def check(target: str, params: Mapping[str, Any], account: str, region: str) -> Response | None:
    """The endpoint's answer to a parsed DynamoDB request AWS would refuse, or None to let it through."""
    if target not in CHECKED:
        return None
    refused = refusal(target, params, moto_schemas(account, region))
    return refused.response() if refused is not None else None


def answer(target: str, body: bytes, account: str, region: str) -> Response | None:
    """`check` for a request not yet parsed (moto's own path); a body that is not JSON is moto's to answer."""
    if target not in CHECKED:
        return None
    try:
        params = json.loads(body or b"{}")
    except ValueError:
        return None
    return check(target, params, account, region) if isinstance(params, dict) else None
