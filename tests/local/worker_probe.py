"""Handlers for the worker-process tests (tests/local/test_worker_processes.py), loaded by a worker process."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def describe(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """What the process is: its pid, environment, credentials as boto3 finds them, and its time left."""
    import boto3

    creds = boto3.session.Session().get_credentials()
    with ThreadPoolExecutor(1) as pool:  # a thread the handler starts sees the same environment
        in_thread = pool.submit(lambda: os.environ.get("PROBE_ONLY_MINE")).result()
    time.sleep(float(event.get("sleep_s", 0)))
    return {
        "pid": os.getpid(),
        "env": dict(os.environ),
        "in_thread": in_thread,
        "access_key": creds.access_key if creds else None,
        "token": creds.token if creds else None,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "function_name": context.function_name,
    }


def fail(event: dict[str, Any], context: Any) -> None:
    raise ValueError(f"no good: {event.get('n')}")


def exit_now(event: dict[str, Any], context: Any) -> None:
    """The process dies mid-invocation, as one out of memory does."""
    os._exit(9)


def wait_for_hurry(event: dict[str, Any], context: Any) -> int:
    """Waits until the runtime says its time is up; how long it waited, in ms."""
    started = time.monotonic()
    while context.get_remaining_time_in_millis() > 0 and time.monotonic() - started < 20:
        threading.Event().wait(0.02)
    return int((time.monotonic() - started) * 1000)


def call_sqs(event: dict[str, Any], context: Any) -> str:
    """One AWS call (to nowhere): a fault armed before it kills the invocation first."""
    import boto3

    client = boto3.client("sqs", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    try:
        client.list_queues()
    except Exception as exc:
        return type(exc).__name__
    return "answered"
