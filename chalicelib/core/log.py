"""Structured logs: one JSON object per line (Powertools Logger), with tenant, campaign and queue where known.

Callers pass fields explicitly (`log.info("sent", user=..., campaign=..., queue=...)`) rather than
appending them to the logger: Lambda's send threads share one container (and a process may run several
handlers at once), so keys appended to a shared logger would leak from one tenant's line into another's.
Secrets are never among the fields (contract.Sender hides its keys even from repr), and any field whose
name looks like a secret is masked as a last line of defence.

The level comes from `MOONSEND_LOG_LEVEL` (or Powertools' own `POWERTOOLS_LOG_LEVEL`), INFO by default.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from aws_lambda_powertools import Logger

_SECRET_WORDS = ("secret", "password", "apikey", "api_key", "token", "credential")

logger = Logger(
    service="moonsend",
    level=os.environ.get("MOONSEND_LOG_LEVEL") or os.environ.get("POWERTOOLS_LOG_LEVEL") or "INFO",
    use_rfc3339=True,
    utc=True,
)
# The stdlib logger Powertools configured (it names it after the service): levels and records by number go
# to it directly, which is what Powertools' own untyped attribute forwarding would do.
_records = logging.getLogger("moonsend")


def stdlib_logger() -> logging.Logger:
    """The stdlib logger under `logger`, for a library that takes a `logging.Logger` (Powertools' batch
    processor): its lines go through the same Powertools handler, formatted the same."""
    return _records


def _safe(key: str, value: Any) -> Any:
    k = key.lower().replace("-", "_")
    if any(word in k for word in _SECRET_WORDS):
        return "***"
    return value


def set_level(level: str | int) -> None:
    logger.setLevel(level)


def event(level: int, message: str, **fields: Any) -> None:
    if not _records.isEnabledFor(level):
        return
    extra = {k: _safe(k, v) for k, v in fields.items() if v is not None}
    _records.log(level, message, extra=extra, stacklevel=3)


def debug(message: str, **fields: Any) -> None:
    event(logging.DEBUG, message, **fields)


def info(message: str, **fields: Any) -> None:
    event(logging.INFO, message, **fields)


def warning(message: str, **fields: Any) -> None:
    event(logging.WARNING, message, **fields)


def error(message: str, **fields: Any) -> None:
    event(logging.ERROR, message, **fields)
