"""Structured logs: one JSON object per line, with tenant, campaign and queue where known.

Callers pass fields explicitly; secrets are never among them (contract.Sender hides its keys even from
repr), and any field whose name looks like a secret is masked as a last line of defence.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

_SECRET_WORDS = ("secret", "password", "apikey", "api_key", "token", "credential")

logger = logging.getLogger("moonsend")


def _safe(key: str, value: Any) -> Any:
    k = key.lower().replace("-", "_")
    if any(word in k for word in _SECRET_WORDS):
        return "***"
    return value


def event(level: int, message: str, **fields: Any) -> None:
    if not logger.isEnabledFor(level):
        return
    record = {"ts": round(time.time(), 3), "level": logging.getLevelName(level), "message": message}
    record.update({k: _safe(k, v) for k, v in fields.items() if v is not None})
    logger.log(level, json.dumps(record, default=str, ensure_ascii=False))


def info(message: str, **fields: Any) -> None:
    event(logging.INFO, message, **fields)


def warning(message: str, **fields: Any) -> None:
    event(logging.WARNING, message, **fields)


def error(message: str, **fields: Any) -> None:
    event(logging.ERROR, message, **fields)
