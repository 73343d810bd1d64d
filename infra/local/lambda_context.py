"""Emulator: what a Lambda invocation sees of Lambda itself: its context object, and dying mid-invocation.

Kept apart from the runtime (infra.local.lambda_runtime) so that a function's worker process
(infra.local.worker) imports it without the stack's modules.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Protocol


class Flag(Protocol):
    def is_set(self) -> bool: ...


class LambdaContext:
    """The attributes and method of AWS Lambda's Python context object that code uses."""

    def __init__(
        self,
        function_name: str,
        timeout_s: float,
        memory_mb: int,
        region: str,
        account_id: str,
        hurry: threading.Event | Flag | None = None,
    ) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{account_id}:function:{function_name}"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = time.strftime("%Y/%m/%d/[$LATEST]") + uuid.uuid4().hex
        self._deadline = time.monotonic() + timeout_s
        self._hurry = hurry  # set when the stack stops to save its state: every invocation's time is up

    def get_remaining_time_in_millis(self) -> int:
        if self._hurry is not None and self._hurry.is_set():
            return 0
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class FunctionCrashed(BaseException):
    """The function's process died mid-invocation (killed, timed out, out of memory).

    A BaseException, so that no `except Exception` in the handler runs, as none would in a killed
    process; the runtime counts it as the invocation's error (and retries an async one, as Lambda does).
    Raised by fault injection (`infra.local.faults`), and when a function's worker process ends mid-invocation.
    """
