"""Conditional writes to one table, many at once: each its own UpdateItem, several in flight together.

DynamoDB has no conditional batch write, and every ledger transition is conditional. A transaction
(TransactWriteItems) carries up to 100 conditional updates in one request, and bills two write units for
each: measured on the whole pipeline (bench/cost.py, issue 53), the ledger's transactions were half of what
an email cost us besides SES. An UpdateItem bills one. What a request costs in client CPU (about a
millisecond in botocore) is a small fraction of a write unit's price at any Lambda memory size, so each
write goes alone:

- each write is answered as itself: applied (True), refused by its condition (False), or its own error;
- a batch's writes are made by a small pool of threads of its own, `MAX_IN_FLIGHT` at a time, so that
  precompile's 200 recipients take a few round trips of DynamoDB's latency, not 200;
- two writes to one key are made one after the other, in the order given (the second may depend on the
  first having been applied, or refused).

The drainer's claims and records come one at a time from its send threads (`apply_one`), which are
already as many as its writes in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pynamodb.exceptions import UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.models import Model

from chalicelib.stores.tables import condition_failed

# Writes of one batch in flight at once (the bound tables' connection pool holds more: tables.POOL_SIZE).
MAX_IN_FLIGHT = 16


@dataclass(frozen=True)
class Write:
    """One conditional update of one item: `model(hash_key, range_key).update(actions, condition)`."""

    model: type[Model]
    hash_key: str
    range_key: str | None
    actions: Sequence[Any]
    condition: Condition | None

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.model.Meta.table_name, self.hash_key, self.range_key)

    def item(self) -> Model:
        return self.model(self.hash_key, self.range_key) if self.range_key is not None else self.model(self.hash_key)


def apply_one(write: Write) -> bool:
    """The write alone; False when its condition did not hold (any other failure raises)."""
    try:
        write.item().update(actions=list(write.actions), condition=write.condition)
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


WriteOutcome = bool | Exception  # applied, refused by its condition, or the error the write raised


def apply_all(writes: Sequence[Write]) -> list[bool]:
    """Each write applied (True) or refused by its condition (False), in order. Raises the first error a
    write raised, once every write has been tried."""
    outcomes = apply_each(writes)
    for o in outcomes:
        if isinstance(o, Exception):
            raise o
    return [bool(o) for o in outcomes]


def apply_each(writes: Sequence[Write]) -> list[WriteOutcome]:
    """apply_all's answers, with each write's own error in its place rather than raised."""
    results: list[WriteOutcome] = [False] * len(writes)
    by_key: dict[tuple[str, str, str | None], list[int]] = {}
    for i, w in enumerate(writes):
        by_key.setdefault(w.key, []).append(i)
    chains = list(by_key.values())

    def run(chain: list[int]) -> None:
        for i in chain:
            results[i] = _alone(writes[i])

    if len(chains) <= 1 or _in_pool():  # nothing to overlap; or a pool's own thread, which must not wait on one
        for chain in chains:
            run(chain)
        return results
    # A pool of the batch's own, as each invocation has: one shared by a process would have invocations that run
    # side by side in it wait for each other's writes. Starting sixteen threads costs about a millisecond.
    with ThreadPoolExecutor(min(MAX_IN_FLIGHT, len(chains)), thread_name_prefix=_POOL_PREFIX) as pool:
        for _ in pool.map(run, chains):
            pass
    return results


def _alone(write: Write) -> WriteOutcome:
    try:
        return apply_one(write)
    except Exception as exc:
        return exc


_POOL_PREFIX = "writes"


def _in_pool() -> bool:
    return threading.current_thread().name.startswith(_POOL_PREFIX)
