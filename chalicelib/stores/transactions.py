"""DynamoDB transactions, tried again when they meet another transaction on one of their items.

DynamoDB cancels a transaction that meets another one in flight on one of its items (TransactionCanceled,
reason TransactionConflict: the Developer Guide's "Transaction conflict handling"), and botocore does not
retry it. Where several writers count on one item (the adds of a tenant's webhook endpoints; the bounces of
one tenant's day, ten events of a batch at a time), a conflict is the ordinary case, and is tried again
after a short jittered backoff. A condition that did not hold is an answer, given back, never retried.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable

from pynamodb.connection import Connection
from pynamodb.exceptions import TransactWriteError
from pynamodb.transactions import TransactWrite

from chalicelib.stores.tables import response_code

CONFLICT_ATTEMPTS = 4
CONFLICT_BACKOFF_S = 0.05  # doubled at each attempt


class StillConflicting(Exception):
    """Every attempt met another transaction on one of its items: nothing was written."""


def transact(
    connection: Connection, write: Callable[[TransactWrite], None], sleep: Callable[[float], None] = time.sleep
) -> TransactWriteError | None:
    """Run the transaction `write` makes: None if it went through, else DynamoDB's cancellation for a
    condition that did not hold. Cancelled for a conflict, it is tried again, CONFLICT_ATTEMPTS in all, then
    StillConflicting."""
    for attempt in range(CONFLICT_ATTEMPTS):
        if attempt:
            sleep(CONFLICT_BACKOFF_S * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
        # A token per transaction: botocore's retry of one that went through is answered as done, not as a
        # condition that failed against its own write.
        tx = TransactWrite(connection=connection, client_request_token=uuid.uuid4().hex)
        try:
            with tx:
                write(tx)
            return None
        except TransactWriteError as exc:
            if response_code(exc) != "TransactionCanceledException":
                raise
            codes = {r.code for r in exc.cancellation_reasons or [] if r is not None}
            # A condition that did not hold is the answer, even where another item met a transaction too.
            if "ConditionalCheckFailed" in codes or "TransactionConflict" not in codes:
                return exc
    raise StillConflicting(f"the transaction met another on one of its items {CONFLICT_ATTEMPTS} times")


def first_reason(cancelled: TransactWriteError) -> str | None:
    """The reason DynamoDB gave for the transaction's first item (its code), if any."""
    reasons = getattr(cancelled, "cancellation_reasons", None) or []
    return reasons[0].code if reasons and reasons[0] is not None else None
