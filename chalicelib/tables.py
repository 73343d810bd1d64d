"""Binding pynamodb models to a stage's table names at run time.

pynamodb reads a model's table from its `Meta` class; the names depend on the stage (from the
environment), so each model is declared once with a placeholder and bound here to the real table.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TypeVar

from pynamodb.models import Model

M = TypeVar("M", bound=Model)


@lru_cache(maxsize=32)
def _bind(model: type[Model], table_name: str, region: str) -> type[Model]:
    meta = type("Meta", (), {"table_name": table_name, "region": region})
    return type(f"{model.__name__}_{table_name}".replace("-", "_"), (model,), {"Meta": meta})


def bound(model: type[M], table_name: str, region: str) -> type[M]:
    """A subclass of `model` on `table_name` (one per model and table, so connections are reused)."""
    return _bind(model, table_name, region)  # type: ignore[return-value]
