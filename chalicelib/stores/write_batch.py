"""Conditional writes to one table, many to a request: DynamoDB's TransactWriteItems.

DynamoDB has no conditional batch write, and every ledger transition is conditional: one UpdateItem per
recipient cost precompile a request per recipient and the drainer two per email (claim, record), each about
a millisecond of client CPU in botocore. A transaction carries up to 100 conditional updates in one
request. It is all or nothing, which is not what a batch of independent recipients wants, so:

- a transaction that went through applied every write;
- one cancelled names, per write, why (`CancellationReasons`): a write whose condition failed is refused,
  as its own UpdateItem would have been; the others were not applied, and go again as one more
  transaction (the soak's redeliveries cancel many: making each alone cost 7% of the soak's CPU);
  if that one is cancelled too, each of its writes is made alone, so a batch costs at most two requests
  more than it cost before;
- one write alone is a plain UpdateItem (a transaction bills two write units per item, an UpdateItem one).

Each transaction carries a client request token, so that botocore's retry of a transaction that went
through does not find its own writes and call them refused. A key may appear once per transaction: a
second write to it goes alone, after.

`GroupCommit` gathers writes from concurrent threads (the drainer's) into such batches: a thread whose write
finds no commit under way commits everything waiting; the others wait for one and take their answers. A
batch is whatever arrived while the request before it was on the wire. A second commit (up to
`max_commits`) starts beside one under way only when that one is slow (on the wire longer than
`SLOW_COMMIT_S`) or a full transaction's worth of writes waits: one slow request then does not hold up
every send thread of the container (nor every drain of a process that runs several at once: one commit at
a time made all their claims queue behind each other), and a fast one is waited for, so its
followers go together (with four commits free to start at any time, most writes went alone: measured,
half the drainer's DynamoDB CPU went on single UpdateItems).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pynamodb.exceptions import TransactWriteError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from chalicelib.stores.tables import condition_failed, response_code

# Past about 25 the request's size grows with nothing more saved, and a conflict cancels more writes.
MAX_ITEMS = 25
# Commits under way at once, per GroupCommit.
MAX_COMMITS = 4
# A commit on the wire longer than this lets another start beside it (DynamoDB answers in a few ms).
SLOW_COMMIT_S = 0.025
_REFUSED = "ConditionalCheckFailed"


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


WriteOutcome = bool | Exception  # applied, refused by its condition, or the error a write alone would raise


def apply_all(writes: Sequence[Write], max_items: int = MAX_ITEMS) -> list[bool]:
    """Each write applied (True) or refused by its condition (False), in order, in as few requests as the
    table's rules allow. Raises the first error a write alone raised, once every write has been tried."""
    outcomes = apply_each(writes, max_items)
    for o in outcomes:
        if isinstance(o, Exception):
            raise o
    return [bool(o) for o in outcomes]


def apply_each(writes: Sequence[Write], max_items: int = MAX_ITEMS) -> list[WriteOutcome]:
    """apply_all's answers, with each write's own error in its place rather than raised."""
    results: list[WriteOutcome] = [False] * len(writes)
    todo = list(range(len(writes)))
    while todo:
        batch: list[int] = []
        keys: set[tuple[str, str, str | None]] = set()
        later: list[int] = []
        for i in todo:
            if len(batch) < max_items and writes[i].key not in keys:
                batch.append(i)
                keys.add(writes[i].key)
            else:
                later.append(i)
        for i, outcome in zip(batch, _transact([writes[i] for i in batch]), strict=True):
            results[i] = outcome
        todo = later
    return results


def _alone(write: Write) -> WriteOutcome:
    try:
        return apply_one(write)
    except Exception as exc:
        return exc


def _transact(writes: list[Write], again: bool = True) -> list[WriteOutcome]:
    if not writes:
        return []
    if len(writes) == 1:
        return [_alone(writes[0])]
    connection = writes[0].model._get_connection().connection
    try:
        with TransactWrite(connection=connection, client_request_token=uuid.uuid4().hex) as tx:
            for w in writes:
                tx.update(w.item(), actions=list(w.actions), condition=w.condition)
    except TransactWriteError as exc:
        reasons = exc.cancellation_reasons if response_code(exc) == "TransactionCanceledException" else []
        if len(reasons) != len(writes):
            return [_alone(w) for w in writes]  # no reason per write: each alone says its own
        refused = [r is not None and r.code == _REFUSED for r in reasons]
        rest = [w for w, no in zip(writes, refused, strict=True) if not no]
        done = iter(_transact(rest, again=False) if again else [_alone(w) for w in rest])
        return [False if no else next(done) for no in refused]
    return [True] * len(writes)


@dataclass(eq=False)  # found in the waiting list by identity: two equal writes are two writers
class _Waiting:
    write: Write
    outcome: WriteOutcome | None = field(default=None, repr=False)


class GroupCommit:
    """Writes from many threads committed together (apply_all), each thread given its own answer."""

    def __init__(
        self,
        max_items: int = MAX_ITEMS,
        max_commits: int = MAX_COMMITS,
        slow_s: float = SLOW_COMMIT_S,
        clock: Any = time.monotonic,
    ) -> None:
        self._max = max_items
        self._max_commits = max_commits
        self._slow_s = slow_s
        self._clock = clock
        self._cv = threading.Condition()
        self._waiting: list[_Waiting] = []
        self._started: list[float] = []  # when each commit under way started
        self.requests = 0  # commits made (for benches)

    @property
    def waiting(self) -> int:
        """How many writes wait for a commit, not yet in one (for benches and tests)."""
        with self._cv:
            return len(self._waiting)

    def apply(self, write: Write) -> bool:
        mine = _Waiting(write)
        with self._cv:
            self._waiting.append(mine)
        while True:
            with self._cv:
                if mine.outcome is not None:
                    break
                if mine not in self._waiting:  # in a commit under way: its answer is coming
                    self._cv.wait()
                    continue
                wait_s = self._wait_before_commit()
                if wait_s > 0:
                    self._cv.wait(timeout=wait_s)
                    continue
                started = self._clock()
                self._started.append(started)
                batch, self._waiting = self._waiting[: self._max], self._waiting[self._max :]
            self._commit(batch, mine, started)
        if isinstance(mine.outcome, Exception):
            raise mine.outcome
        return bool(mine.outcome)

    def _wait_before_commit(self) -> float:
        """0 when a waiting writer may commit now; else how long until the commit under way turns slow."""
        if not self._started:
            return 0.0
        if len(self._started) >= self._max_commits:
            return self._slow_s  # woken when one ends
        if len(self._waiting) >= self._max:
            return 0.0
        return max(0.0, min(self._started) + self._slow_s - self._clock())

    def _commit(self, batch: list[_Waiting], mine: _Waiting, started: float) -> None:
        outcomes: list[WriteOutcome] = []
        try:
            outcomes = apply_each([w.write for w in batch], self._max)
        except Exception as exc:  # not one write's error (a model misconfigured): every writer hears it
            outcomes = [exc] * len(batch)
        finally:
            with self._cv:
                if outcomes:
                    for w, outcome in zip(batch, outcomes, strict=True):
                        w.outcome = outcome
                else:  # this thread is dying (its process killed): the other writes wait for another commit
                    self._waiting[:0] = [w for w in batch if w is not mine]
                self._started.remove(started)
                self.requests += 1
                self._cv.notify_all()
