"""Binding pynamodb models to a stage's table names at run time.

pynamodb reads a model's table from its `Meta` class; the names depend on the stage (from the
environment), so each model is declared once with a placeholder and bound here to the real table.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

from pynamodb.connection.table import TableConnection
from pynamodb.exceptions import UpdateError
from pynamodb.models import Model

from chalicelib.core import aws

M = TypeVar("M", bound=Model)
POOL_SIZE = 64


class _SharedSession:
    """Mixed into every bound model: its connection uses a client from the platform's boto3 session
    (chalicelib.core.aws.table_client) instead of one pynamodb makes from a session of its own. pynamodb
    keeps its client in `Connection._client` and makes one only when that is empty (or has lost its
    credentials), so the client is put there before each call: the shared one of now (a dictionary look-up),
    so that a model bound before `aws.reset()` (a moved endpoint) follows it like every other client;
    tests/contract/test_tables.py checks it."""

    Meta: Any

    @classmethod
    def _get_connection(cls) -> TableConnection:
        table: TableConnection = super()._get_connection()  # type: ignore[misc]
        shared = aws.table_client(cls.Meta.region, cls.Meta.table_name)
        if table.connection._client is not shared:
            table.connection._client = shared
        return table


@lru_cache(maxsize=32)
def _bind(model: type[Model], table_name: str, region: str) -> type[Model]:
    # As many pooled connections as the drainer has threads (pynamodb's default is 10: the other 38
    # threads would open and drop a connection per request, and urllib3 warns about every one).
    meta = type("Meta", (), {"table_name": table_name, "region": region, "max_pool_connections": POOL_SIZE})
    return type(f"{model.__name__}_{table_name}".replace("-", "_"), (_SharedSession, model), {"Meta": meta})


def bound(model: type[M], table_name: str, region: str) -> type[M]:
    """A subclass of `model` on `table_name` (one per model and table, so connections are reused)."""
    return _bind(model, table_name, region)  # type: ignore[return-value]


def warm(model: type[Model]) -> None:
    """Create a model's DynamoDB client now, in one thread, rather than in many at its first use."""
    model._get_connection().connection.client  # noqa: B018


def response_code(exc: Exception) -> str | None:
    """DynamoDB's error code behind a pynamodb error; None when there was no answer (a timeout, say).

    pynamodb's own `cause_response_code` raises AttributeError for a cause whose `response` is None (a
    botocore read timeout), which would turn a lost request into a confusing error of ours."""
    response = getattr(getattr(exc, "cause", None), "response", None)
    if not isinstance(response, dict):
        return None
    code = response.get("Error", {}).get("Code")
    return str(code) if code else None


def condition_failed(exc: Exception) -> bool:
    """Whether a pynamodb write failed because its condition did not hold (and not for any other reason)."""
    return response_code(exc) == "ConditionalCheckFailedException"


def update_if(item: Model, actions: list[Any], condition: Any) -> bool:
    """Update `item` if `condition` holds; False when it did not (any other failure raises)."""
    try:
        item.update(actions=actions, condition=condition)
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True
