"""Accelerator: moto's DynamoDB update validation without its repeated walks and re-parsing.

Profiled on the local stack (yappi, 400 emails), moto's UpdateItem was 40% of the CPU of the whole
pipeline, most of it in work that repeats itself, each replaced here by an equivalent:

- "at most one SET, REMOVE and ADD clause" (`ActionCountValidator`) and "no overlapping paths"
  (`OverlappingPathsValidator`) walk the tree and, at every nested `UpdateExpression` node, collect the
  clauses of its whole subtree again. Every nested node's clauses are a subset of the root's, so checking
  the root alone raises exactly when moto's walk raises, with the same error (where several paths overlap,
  the message may list them in another order).
- Every traverser rebuilt its node-type map (a dict of bound methods) at every node of the tree; the map's
  keys are fixed per traverser, so they are computed once per traverser.
- The seven traversers left walk every node with two `isinstance` checks against abstract classes (each
  through `ABCMeta.__instancecheck__`) and a rebuilt map. The same walk here answers "is it a node" and
  "which processor" once per class and builds the map once per walk; the visits, the child hook and the
  replacements are moto's. A ledger claim's UpdateItem, client included: 1.84 ms of CPU, 1.77 with it.
- "no update of a key attribute" (`UpdateHashRangeKeyValidator`) only reads the tree: a plain post-order
  walk makes the same checks in the same order, without the generic traverser's bookkeeping.
- The same few update expressions are parsed twice per request (by the response handler and the model):
  parsed trees are cached by their text. moto only reads the parsed tree; the validator deep-copies it
  before changing anything.
- The validator deep-copies the parsed tree before each validation (Python's deepcopy: 12% of a soak
  stack's CPU at 100,000 recipients). A cached tree is pickled once, when parsed, and each copy is
  unpickled from those bytes: the same tree, about ten times cheaper.
- Condition expressions are lexed (a dozen regular expressions tried at every token) twice per request:
  the tokens depend on the text alone, so they are cached by it too, and each parse gets fresh copies.

- TransactWriteItems deep-copied every table a transaction touches, for each of its items, to roll back
  on failure: at 100,000 ledger items one transaction took longer than the client's 30 s read timeout.
  The same transaction here keeps a copy of the items it writes, and restores those: the same answers,
  errors and final state, in time proportional to the transaction. It holds a lock, so that two
  transactions of the gateway's threads do not interleave (moto's did). A transaction that is cancelled
  also takes its writes back off the tables' streams (DynamoDB streams nothing of it), and the local
  stream poller reads a stream under the same lock (`STREAM_LOCK`), so it never sees a write that is
  about to be taken back.

- A table's Query walked and sorted the whole table (every partition, comparing keys in Python) to find one
  partition's items, then stepped past the page's start item by item: at 100,000 ledger rows a page of 50
  recipients took 1.2 s. The same Query here sorts only its partition, by the keys' own values (the order
  moto's comparisons give), finds the start and a `begins_with` prefix by bisection, and reads on from there
  with moto's own per-item rules (its range comparison, its limits, its filter and projection). Index
  queries and the legacy `KeyConditions` form go to moto's.
- Each Query sorted its partition again (100 ms at 100,000 rows, for a page of 50): a partition's sorted
  keys are kept until a key is added to it or taken from it (PutItem of a new key, DeleteItem, a
  transaction's rollback, all through `Table.put_item`, `Table.delete_item` or `_restore`), and are checked
  against the partition's size and identity before use. Items are read by key at each Query, so an item
  changed in place is read as it is now.
- A Query's items were measured twice each and copied by `copy.deepcopy` (1,440 minutes of a timeline:
  half a second): measured once, and copied by a walk of the same shape as moto's `__deepcopy__` (a list,
  a map, a set copied; scalars shared), without deepcopy's dispatch and memo.

- An UpdateItem of an item that did not exist put the key alone first, streamed as an INSERT, and then
  streamed the update as a second INSERT: every new ledger entry reached the stream poller and
  webhook_events twice. DynamoDB streams one record a write; the key's put streams nothing here (and an
  update that fails after it takes the key back, which moto left in the table).

`install()` swaps these in for this process only; it is called by the local stack, never by the Lambda
code. `uninstall()` puts moto's own back (tests compare both).
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import functools
import pickle
import threading
from collections import deque
from typing import Any, cast

from moto.dynamodb.comparisons import ConditionExpressionParser, get_filter_expression
from moto.dynamodb.exceptions import (
    ConditionalCheckFailed,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, StreamShard, Table
from moto.dynamodb.parsing import validators as _validators
from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, Node, UpdateExpression
from moto.dynamodb.parsing.expressions import UpdateExpressionParser
from moto.dynamodb.parsing.validators import (
    ActionCountValidator,
    OverlappingPathsValidator,
    UpdateExpressionPath,
    UpdateHashRangeKeyValidator,
)

_PICKLED = "_moonsend_pickled"  # a cached parse tree's own bytes, made before it was cached
_ORIGINALS: dict[str, Any] = {
    "action_count": ActionCountValidator.traverse,
    "overlapping": OverlappingPathsValidator.traverse,
    "nodes": DepthFirstTraverser.nodes_to_be_processed,
    "hash_range": UpdateHashRangeKeyValidator.traverse,
    "traverse": DepthFirstTraverser.traverse,
    "make": UpdateExpressionParser.__dict__["make"],
    "lex": ConditionExpressionParser._lex_condition_expression,
    "transact": DynamoDBBackend.transact_write_items,
    "query": Table.query,
    "put_item": Table.put_item,
    "delete_item": Table.delete_item,
    "update_item": DynamoDBBackend.update_item,
    "stream_add": StreamShard.add,
}
_ORIGINALS["deepcopy"] = _validators.deepcopy


@functools.lru_cache(maxsize=1024)
def _parse(cls: type, expression: str) -> Any:
    tree = _ORIGINALS["make"].__func__(cls, expression)
    tree.__dict__[_PICKLED] = pickle.dumps(tree, protocol=pickle.HIGHEST_PROTOCOL)
    return tree


def _copy_tree(x: Any, memo: dict[int, Any] | None = None) -> Any:
    """`deepcopy` for moto's validators: a cached parse tree from its bytes, anything else as before."""
    pickled = x.__dict__.get(_PICKLED) if isinstance(x, Node) else None
    return pickle.loads(pickled) if pickled is not None else _ORIGINALS["deepcopy"](x, memo)


@functools.lru_cache(maxsize=1024)
def _tokens(expression: str) -> tuple[Any, ...]:
    return tuple(_ORIGINALS["lex"](ConditionExpressionParser(expression, None, None)))


def _lex_once(self: ConditionExpressionParser) -> deque[Any]:
    # lexed tokens always have empty children; each parse gets its own lists
    return deque(token._replace(children=[]) for token in _tokens(self.condition_expression or ""))


def _verify_root(self: ActionCountValidator, node: Any) -> Any:
    if isinstance(node, UpdateExpression):
        self.verify_action_counts(node)
    return node


def _check_root(self: OverlappingPathsValidator, node: Any) -> Any:
    if isinstance(node, UpdateExpression):
        self.check_for_overlapping_paths(node)
    return node


def _nodes_once(self: DepthFirstTraverser) -> tuple[type, ...]:
    try:
        return self.__dict__["_moonsend_nodes"]  # type: ignore[no-any-return]
    except KeyError:
        nodes = tuple(self._processing_map())
        self.__dict__["_moonsend_nodes"] = nodes
        return nodes


_IS_NODE: dict[type, bool] = {}
# (traverser class, node class) -> the first key of the traverser's map the node is an instance of, or None
_KEY_OF: dict[tuple[type, type], type | None] = {}


def _is_node(t: type) -> bool:
    try:
        return _IS_NODE[t]
    except KeyError:
        _IS_NODE[t] = answer = issubclass(t, Node)  # an ABC: its isinstance is slow, its answer fixed per type
        return answer


def _key_of(self: DepthFirstTraverser, t: type) -> type | None:
    try:
        return _KEY_OF[(type(self), t)]
    except KeyError:
        key = next((k for k in _nodes_once(self) if issubclass(t, k)), None)
        _KEY_OF[(type(self), t)] = key
        return key


def _traverse(self: DepthFirstTraverser, node: Any) -> Any:
    """moto's depth-first walk (`traverse_node_recursively`): the same visits, hooks and replacements."""
    processors = self._processing_map()  # bound methods of this traverser: the same for every node
    pre = self.pre_processing_of_child
    if type(self).pre_processing_of_child is DepthFirstTraverser.pre_processing_of_child:
        pre = None  # the base hook does nothing

    def visit(node: Any, child_id: int) -> Any:
        if not _is_node(type(node)):
            return node
        parent = node.parent
        children = node.children
        if children is not None:
            for i, child in enumerate(children):
                if pre is not None:
                    pre(node, i)
                visit(child, i)
        key = _key_of(self, type(node))
        if key is not None:
            node = processors[key](node)
            node.parent = parent
            if parent:
                parent.children[child_id] = node
        return node

    return visit(node, -1)


def _check_keys(self: UpdateHashRangeKeyValidator, node: Any) -> Any:
    def walk(n: Any) -> None:
        if isinstance(n, Node):
            for child in n.children or ():
                walk(child)
            if isinstance(n, UpdateExpressionPath):
                self.check_for_hash_or_range_key(n)

    walk(node)
    return node


_TRANSACTION_LOCK = threading.RLock()
STREAM_LOCK = _TRANSACTION_LOCK
# What a transaction wrote: the item before each write, and the records each write added to a stream.
_Before = dict[tuple[str, str], tuple[Any, dict[str, Any], Any]]
_Streamed = list[tuple[Any, Any]]


def _transact_write_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    """moto's TransactWriteItems (same checks, order and errors), rolled back item by item."""
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    with _TRANSACTION_LOCK:
        before: _Before = {}  # what each write replaced
        streamed: _Streamed = []
        seen: set[tuple[str, str]] = set()
        errors: list[tuple[Any, Any, Any]] = []
        try:
            for item in transact_items:
                errors.append(_transact_one(self, item, seen, before, streamed))
        except (MultipleTransactionsException, MockValidationException):
            _restore(self, before, streamed)
            raise
        if any(code is not None for code, _, _ in errors):
            _restore(self, before, streamed)
            raise TransactionCanceledException(errors)


def _transact_one(
    self: DynamoDBBackend,
    item: dict[str, Any],
    seen: set[tuple[str, str]],
    before: _Before,
    streamed: _Streamed,
) -> tuple[Any, Any, Any]:
    if len(item) > 1:
        raise TransactWriteSingleOpException
    original: dict[str, Any] | None = None
    try:
        op_type, op = next(iter(item.items()))
        if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
            raise ValueError("Unsupported transaction operation")
        table_name = op["TableName"]
        condition = op.get("ConditionExpression")
        names, values = op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
        table = self.get_table(table_name)
        if op_type == "Put":
            attrs = op["Item"]
            key = {table.hash_key_attr: attrs[table.hash_key_attr]}
            if table.range_key_attr is not None:
                key[table.range_key_attr] = attrs[table.range_key_attr]
        else:
            key = op["Key"]
        ident = (str(table_name), str(dict(sorted(key.items()))))
        if ident in seen:
            raise MultipleTransactionsException()
        seen.add(ident)
        current = self.get_item(table_name, key)
        if condition is not None and not get_filter_expression(condition, names, values).expr(current):
            if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                original = current.to_json()["Attributes"]
            raise ConditionalCheckFailed(item=original)
        if op_type != "ConditionCheck":
            before.setdefault(ident, (table, key, copy.deepcopy(current)))
        expressions = {
            "condition_expression": condition,
            "expression_attribute_names": names,
            "expression_attribute_values": values,
        }
        shard = table.stream_shard
        records_before = len(shard.items) if shard is not None else 0
        if op_type == "Put":
            self.put_item(table_name, op["Item"], **expressions)
        elif op_type == "Delete":
            self.delete_item(table_name, key, **expressions)
        elif op_type == "Update":
            self.update_item(table_name, key, update_expression=op["UpdateExpression"], **expressions)
        if shard is not None:
            streamed.extend((shard, r) for r in shard.items[records_before:] if r.record["dynamodb"]["Keys"] == key)
        return (None, None, None)
    except (MultipleTransactionsException, MockValidationException):
        raise
    except ConditionalCheckFailed as e:
        return ("ConditionalCheckFailed", str(e.message), original)
    except Exception as e:  # as moto: any other failure of one write is that write's reason
        return (type(e).__name__, str(e), original)


def _restore(self: DynamoDBBackend, before: _Before, streamed: _Streamed) -> None:
    """Put back every item a failed transaction wrote: the copy taken before, or nothing if it was new; and
    take its writes off the streams."""
    for shard, record in streamed:
        with contextlib.suppress(ValueError):  # a poller that trimmed it could only have under the lock
            shard.items.remove(record)
    for table, key, old in before.values():
        hash_value = DynamoType(key[table.hash_key_attr])
        _forget(table, hash_value)
        range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        if old is None:
            shard = table.stream_shard
            n = len(shard.items) if shard is not None else 0
            table.delete_item(hash_value, range_value)
            if shard is not None:  # the removal of an item that, streamed, never was
                for record in [r for r in shard.items[n:] if r.record["dynamodb"]["Keys"] == key]:
                    shard.items.remove(record)
        elif range_value is not None:
            table.items[hash_value][range_value] = old
        else:
            table.items[hash_value] = old


_SORTED = "_moonsend_sorted"  # a table's sorted range keys per partition (see `_sorted_keys`)


def _sorted_keys(table: Table, hash_key: DynamoType, partition: dict[Any, Item]) -> tuple[list[Any], list[Any]]:
    """The partition's range keys in key order, and their sort values: kept on the table until a key is
    added or removed (`_put_item`, `_delete_item`, `_restore` forget them); used only if the partition is
    still the same dict of the same size."""
    kept: dict[Any, Any] = table.__dict__.setdefault(_SORTED, {})
    found = kept.get(hash_key)
    if found is not None and found[0] is partition and found[1] == len(partition):
        return found[2], found[3]
    ranges = sorted(partition, key=_order)
    keys = [_order(r) for r in ranges]
    kept[hash_key] = (partition, len(partition), ranges, keys)
    return ranges, keys


def _forget(table: Table, hash_key: Any) -> None:
    kept = table.__dict__.get(_SORTED)
    if kept:
        kept.pop(hash_key, None)


# Per thread: `creating` while an UpdateItem has not yet put its new item's key; `quiet` while that put runs;
# `made`, the table and key it put, until the update is done.
_updating = threading.local()


def _update_item(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
    """moto's UpdateItem, streaming one record a write as DynamoDB does. Of an item that does not exist yet,
    moto first puts the key alone (`Table.put_item`, streamed as an INSERT of the key) and then streams the
    update as a second INSERT: the key's put streams nothing here (`_put_item`). An update that fails after
    that put (its item grown past 400 KB) takes the key back, as DynamoDB never made it."""
    _updating.creating, _updating.made = True, None
    try:
        return _ORIGINALS["update_item"](self, *args, **kwargs)
    except Exception:
        made = _updating.made
        if made is not None:
            table, hash_value, range_value = made
            _updating.quiet = True
            try:
                _delete_item(table, hash_value, range_value)
            finally:
                _updating.quiet = False
        raise
    finally:
        _updating.creating, _updating.made = False, None


def _stream_add(self: StreamShard, old: Any, new: Any) -> None:
    if not getattr(_updating, "quiet", False):
        _ORIGINALS["stream_add"](self, old, new)


def _put_item(self: Table, item_attrs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """moto's PutItem, forgetting the partition's sorted keys when it adds a key; unstreamed when it is the
    key an UpdateItem puts first (`_update_item`)."""
    if self.range_key_attr is not None and self.hash_key_attr in item_attrs and self.range_key_attr in item_attrs:
        hash_value = DynamoType(item_attrs[self.hash_key_attr])
        if DynamoType(item_attrs[self.range_key_attr]) not in self.items.get(hash_value, {}):
            _forget(self, hash_value)
    if not getattr(_updating, "creating", False):
        return _ORIGINALS["put_item"](self, item_attrs, *args, **kwargs)
    _updating.creating, _updating.quiet = False, True
    try:
        item = _ORIGINALS["put_item"](self, item_attrs, *args, **kwargs)
    finally:
        _updating.quiet = False
    _updating.made = (self, item.hash_key, item.range_key)
    return item


def _delete_item(self: Table, hash_key: DynamoType, range_key: DynamoType | None) -> Any:
    _forget(self, hash_key)
    return _ORIGINALS["delete_item"](self, hash_key, range_key)


def _copy_value(v: DynamoType) -> DynamoType:
    """What moto's `DynamoType.__deepcopy__` makes, without deepcopy's dispatch and memo (the trees are
    acyclic)."""
    out = DynamoType.__new__(DynamoType)
    out.type = kind = v.type
    if kind == "L":
        out.value = [_copy_value(x) for x in v.value]
    elif kind == "M":
        out.value = {k: _copy_value(x) for k, x in v.value.items()}
    elif kind in ("SS", "NS", "BS"):
        out.value = list(v.value)
    else:
        out.value = v.value
    return out


def _copy_item(item: Item) -> Item:
    """What moto's `Item.__deepcopy__` makes (its attributes set without re-checking their size)."""
    out = cast(Item, Item.__new__(Item))
    out.hash_key = _copy_value(item.hash_key)
    out.range_key = _copy_value(item.range_key) if item.range_key is not None else None
    attrs = LimitedSizeDict.__new__(LimitedSizeDict)
    dict.__init__(attrs)
    for key, value in item.attrs.items():
        dict.__setitem__(attrs, key, _copy_value(value))
    out.attrs = attrs
    return out


def _size(v: DynamoType) -> int:
    """moto's `DynamoType.size`, with the common kinds (numbers, strings, maps, lists) read directly."""
    kind = v.type
    if kind == "N":
        return len(str(v.value))
    if kind == "S" and isinstance(v.value, str):
        return len(v.value.encode("utf-8"))
    if kind == "M":
        return sum(len(k.encode("utf-8")) + _size(x) for k, x in v.value.items())
    if kind == "L":
        return sum(_size(x) for x in v.value)
    return int(v.size())


def _item_size(item: Item) -> int:
    return sum(len(k.encode("utf-8")) + _size(v) for k, v in item.attrs.items())


def _order(key: DynamoType) -> Any:
    """A range key's sort value: what moto's comparisons compare (`cast_value`), read without its property's
    checks for the string keys nearly every table has."""
    return key.value if key.type == "S" else key.cast_value


def _query(
    self: Table,
    hash_key: DynamoType | None,
    range_comparison: str | None,
    range_objs: list[DynamoType],
    limit: int,
    exclusive_start_key: dict[str, Any] | None,
    scan_index_forward: bool,
    projection_expressions: list[list[str]] | None,
    index_name: str | None = None,
    consistent_read: bool = False,
    filter_expression: Any = None,
    hash_key_conditions: list[tuple[str, DynamoType]] | None = None,
    range_key_conditions: list[tuple[str, str, list[DynamoType]]] | None = None,
    **filter_kwargs: Any,
) -> tuple[list[Item], int, dict[str, Any] | None]:
    start_key = (exclusive_start_key or {}).get(self.range_key_attr or "")
    if (
        index_name is not None
        or filter_kwargs
        or hash_key is None
        or self.range_key_attr is None
        or (range_key_conditions is not None and len(range_key_conditions) > 1)
        or (exclusive_start_key is not None and start_key is None)
    ):
        return _ORIGINALS["query"](
            self,
            hash_key,
            range_comparison,
            range_objs,
            limit,
            exclusive_start_key,
            scan_index_forward,
            projection_expressions,
            index_name,
            consistent_read,
            filter_expression,
            hash_key_conditions,
            range_key_conditions,
            **filter_kwargs,
        )
    partition = self.items.get(hash_key)
    if partition is None:
        partition = {}
        ranges: list[Any] = []
        keys: list[Any] = []
    else:
        ranges, keys = _sorted_keys(self, hash_key, partition)
    low, high = 0, len(ranges)
    strings = bool(ranges) and all(isinstance(k, str) for k in (keys[0], keys[-1]))
    if range_comparison == "BEGINS_WITH" and range_objs and range_objs[0].type == "S" and strings:
        prefix = range_objs[0].value  # only keys with it can match: the span of them, found by bisection
        low = bisect.bisect_left(keys, prefix)
        high = low
        while high < len(keys) and isinstance(keys[high], str) and keys[high].startswith(prefix):
            high += 1
    if start_key is not None:  # past the start, in the Query's direction
        start = _order(start_key if isinstance(start_key, DynamoType) else DynamoType(start_key))
        if scan_index_forward:
            low = max(low, bisect.bisect_right(keys, start))
        else:
            high = min(high, bisect.bisect_left(keys, start))
    span = ranges[low:high] if scan_index_forward else ranges[low:high][::-1]
    results: list[Item] = []
    result_size = 0
    scanned_count = 0
    last_evaluated_key = None
    for range_value in span:  # moto's own rules, item by item
        result = partition[range_value]
        size = _item_size(result)
        if len(results) == limit or (result_size + size) > RESULT_SIZE_LIMIT:
            last_evaluated_key = self._get_last_evaluated_key(results[-1], None)
            break
        if range_comparison and not result.range_key.compare(range_comparison, range_objs):
            continue
        results.append(result)
        result_size += size
        scanned_count += 1
    else:  # moto reads on past a prefix's span (items that cannot match), and stops at the first if full
        after_key = (
            (ranges[high] if high < len(ranges) else None) if scan_index_forward else ranges[low - 1] if low else None
        )
        after = partition[after_key] if after_key is not None else None
        if (
            results
            and after is not None
            and (len(results) == limit or result_size + _item_size(after) > RESULT_SIZE_LIMIT)
        ):
            last_evaluated_key = self._get_last_evaluated_key(results[-1], None)
    results = [_copy_item(r) for r in results]
    if filter_expression is not None:
        results = [item for item in results if filter_expression.expr(item)]
    if projection_expressions:
        results = [r.project(projection_expressions) for r in results]
    return results, scanned_count, last_evaluated_key


def install() -> None:
    """Swap the equivalents in (idempotent)."""
    ActionCountValidator.traverse = _verify_root  # type: ignore[method-assign]
    OverlappingPathsValidator.traverse = _check_root  # type: ignore[method-assign]
    DepthFirstTraverser.nodes_to_be_processed = _nodes_once  # type: ignore[method-assign]
    UpdateHashRangeKeyValidator.traverse = _check_keys  # type: ignore[method-assign]
    DepthFirstTraverser.traverse = _traverse
    UpdateExpressionParser.make = classmethod(_parse)  # type: ignore[method-assign,assignment]
    ConditionExpressionParser._lex_condition_expression = _lex_once  # type: ignore[method-assign]
    _validators.deepcopy = _copy_tree  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = _transact_write_items  # type: ignore[method-assign]
    Table.query = _query  # type: ignore[method-assign]
    Table.put_item = _put_item  # type: ignore[method-assign]
    Table.delete_item = _delete_item  # type: ignore[method-assign]
    DynamoDBBackend.update_item = _update_item  # type: ignore[method-assign]
    StreamShard.add = _stream_add  # type: ignore[method-assign]


def uninstall() -> None:
    """Put moto's own validation and parsing back (for tests that compare the two)."""
    ActionCountValidator.traverse = _ORIGINALS["action_count"]  # type: ignore[method-assign]
    OverlappingPathsValidator.traverse = _ORIGINALS["overlapping"]  # type: ignore[method-assign]
    DepthFirstTraverser.nodes_to_be_processed = _ORIGINALS["nodes"]  # type: ignore[method-assign]
    UpdateHashRangeKeyValidator.traverse = _ORIGINALS["hash_range"]  # type: ignore[method-assign]
    DepthFirstTraverser.traverse = _ORIGINALS["traverse"]
    UpdateExpressionParser.make = _ORIGINALS["make"]  # type: ignore[method-assign]
    ConditionExpressionParser._lex_condition_expression = _ORIGINALS["lex"]  # type: ignore[method-assign]
    _validators.deepcopy = _ORIGINALS["deepcopy"]  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = _ORIGINALS["transact"]  # type: ignore[method-assign]
    Table.query = _ORIGINALS["query"]  # type: ignore[method-assign]
    Table.put_item = _ORIGINALS["put_item"]  # type: ignore[method-assign]
    Table.delete_item = _ORIGINALS["delete_item"]  # type: ignore[method-assign]
    DynamoDBBackend.update_item = _ORIGINALS["update_item"]  # type: ignore[method-assign]
    StreamShard.add = _ORIGINALS["stream_add"]  # type: ignore[method-assign]
