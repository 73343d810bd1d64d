"""moto's DynamoDB update validation without its repeated walks and re-parsing.

Profiled on the local stack (yappi, 400 emails), moto's UpdateItem was 40% of the CPU of the whole
pipeline, most of it in work that repeats itself, each replaced here by an equivalent:

- "at most one SET, REMOVE and ADD clause" (`ActionCountValidator`) and "no overlapping paths"
  (`OverlappingPathsValidator`) walk the tree and, at every nested `UpdateExpression` node, collect the
  clauses of its whole subtree again. Every nested node's clauses are a subset of the root's, so checking
  the root alone raises exactly when moto's walk raises, with the same error (where several paths overlap,
  the message may list them in another order).
- Every traverser rebuilt its node-type map (a dict of bound methods) at every node of the tree; the map's
  keys are fixed per traverser, so they are computed once per traverser.
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

`install()` swaps these in for this process only; it is called by the local stack, never by the Lambda
code. `uninstall()` puts moto's own back (tests compare both).
"""

from __future__ import annotations

import functools
import pickle
from collections import deque
from typing import Any

from moto.dynamodb.comparisons import ConditionExpressionParser
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
    "make": UpdateExpressionParser.__dict__["make"],
    "lex": ConditionExpressionParser._lex_condition_expression,
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


def _check_keys(self: UpdateHashRangeKeyValidator, node: Any) -> Any:
    def walk(n: Any) -> None:
        if isinstance(n, Node):
            for child in n.children or ():
                walk(child)
            if isinstance(n, UpdateExpressionPath):
                self.check_for_hash_or_range_key(n)

    walk(node)
    return node


def install() -> None:
    """Swap the equivalents in (idempotent)."""
    ActionCountValidator.traverse = _verify_root  # type: ignore[method-assign]
    OverlappingPathsValidator.traverse = _check_root  # type: ignore[method-assign]
    DepthFirstTraverser.nodes_to_be_processed = _nodes_once  # type: ignore[method-assign]
    UpdateHashRangeKeyValidator.traverse = _check_keys  # type: ignore[method-assign]
    UpdateExpressionParser.make = classmethod(_parse)  # type: ignore[method-assign,assignment]
    ConditionExpressionParser._lex_condition_expression = _lex_once  # type: ignore[method-assign]
    _validators.deepcopy = _copy_tree  # type: ignore[attr-defined]


def uninstall() -> None:
    """Put moto's own validation and parsing back (for tests that compare the two)."""
    ActionCountValidator.traverse = _ORIGINALS["action_count"]  # type: ignore[method-assign]
    OverlappingPathsValidator.traverse = _ORIGINALS["overlapping"]  # type: ignore[method-assign]
    DepthFirstTraverser.nodes_to_be_processed = _ORIGINALS["nodes"]  # type: ignore[method-assign]
    UpdateHashRangeKeyValidator.traverse = _ORIGINALS["hash_range"]  # type: ignore[method-assign]
    UpdateExpressionParser.make = _ORIGINALS["make"]  # type: ignore[method-assign]
    ConditionExpressionParser._lex_condition_expression = _ORIGINALS["lex"]  # type: ignore[method-assign]
    _validators.deepcopy = _ORIGINALS["deepcopy"]  # type: ignore[attr-defined]
