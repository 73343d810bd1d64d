"""DynamoDB's answer to a transaction that met another on one of its items, given where moto never gives it.

DynamoDB cancels such a transaction (TransactionCanceledException, reason TransactionConflict); moto runs
transactions one at a time and never does. `Conflicts` answers a table's first `times` TransactWriteItems
that mention `marker` (a tenant's id, say) so, before the request is sent, as botocore would raise it.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from chalicelib import wiring
from chalicelib.core import aws


class Conflicts:
    def __init__(self, table_name: str, marker: str, times: int, first: str = "None") -> None:
        """`first`: the reason given for the transaction's first item (its last meets the other transaction)."""
        self._client = aws.table_client(wiring.container().settings.region, table_name)
        self._marker, self._left, self.calls, self._first = marker, times, 0, first

    def __enter__(self) -> Conflicts:
        self._client.meta.events.register("before-call.dynamodb.TransactWriteItems", self._answer)
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", self._answer)

    def _answer(self, params: dict[str, Any], **_: Any) -> Any:
        body = json.loads(params["body"])  # the request as it will be sent
        if self._marker not in json.dumps(body) or self._left == 0:
            return None
        self._left -= 1
        self.calls += 1
        items = body["TransactItems"]
        reasons = [{"Code": "None"} for _ in items]
        reasons[-1] = {"Code": "TransactionConflict"}
        if self._first != "None":
            reasons[0] = {"Code": self._first}
        error = {"Code": "TransactionCanceledException", "Message": "Transaction cancelled: [TransactionConflict]"}
        return SimpleNamespace(status_code=400, headers={}), {"Error": error, "CancellationReasons": reasons}
