"""moto's DynamoDB update validation without its quadratic clause walks.

moto 5.2 checks "at most one SET, REMOVE and ADD clause" (`ActionCountValidator`) by walking the
update expression's tree and, at every nested `UpdateExpression` node, collecting the clauses of
its whole subtree again: for the ledger's and counters' expressions that one check was most of the
CPU of an UpdateItem on the local stack (profiled: 8 of 13 s in moto's `update_item`). Every nested
node's clauses are a subset of the root's, so checking the root alone raises exactly when moto's
walk raises, with the same error. Its overlapping-paths check (`OverlappingPathsValidator`) walks
the tree the same way and is checked at the root alone for the same reason (it raises for the same
expressions; where several paths overlap, the message may list them in another order). `install()`
swaps both in for this process only; it is called by the local stack, never by the Lambda code.
"""

from __future__ import annotations

from typing import Any

from moto.dynamodb.parsing.ast_nodes import UpdateExpression
from moto.dynamodb.parsing.validators import ActionCountValidator, OverlappingPathsValidator


def _verify_root(self: ActionCountValidator, node: Any) -> Any:
    if isinstance(node, UpdateExpression):
        self.verify_action_counts(node)
    return node


def _check_root(self: OverlappingPathsValidator, node: Any) -> Any:
    if isinstance(node, UpdateExpression):
        self.check_for_overlapping_paths(node)
    return node


def install() -> None:
    """Check an update expression's clause counts and overlapping paths once, at its root (idempotent)."""
    ActionCountValidator.traverse = _verify_root  # type: ignore[method-assign]
    OverlappingPathsValidator.traverse = _check_root  # type: ignore[method-assign]
