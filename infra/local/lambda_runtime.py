"""Emulator: running the Chalice app's handlers as Lambda would, in this process.

moto can store Lambda functions but needs Docker to run them, and there is none here. This runtime
runs the functions the stack's template created (`functions_from_stack`: each one's handler from the
Chalice app, with its timeout, memory, role and on-failure destination as created), gives each
invocation a Lambda-like context whose remaining time counts down from the function's timeout, signs
its AWS calls as its role (infra.local.identity), and runs asynchronous invocations on a thread pool
with Lambda's retry policy for async events: two retries, then the event goes to the function's
on-failure destination with Lambda's invocation record (and is counted as failed). With workers
(`use_workers`, infra.local.workers), each function's handler runs in processes of its own instead.
"""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infra.local import environment, identity
from infra.local.cloudformation import LAMBDA_ASYNC_RETRIES
from infra.local.identity import RoleCredentials
from infra.local.lambda_context import FunctionCrashed, LambdaContext
from infra.local.workers import FunctionError, WorkerFaults, WorkerPools

DEFAULT_TIMEOUT_S = 60


@dataclass
class LocalFunction:
    handler_name: str  # the name in app.handler_map ("send_emails")
    function_name: str  # the deployed name ("moonsend-local-send_emails")
    handler: Callable[[dict[str, Any], Any], Any]
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = 128
    role: RoleCredentials | None = None  # its calls are signed as this role (None: the operator's keys)
    on_failure: str | None = None  # ARN of the SQS queue an async event goes to when every attempt failed
    async_retries: int = LAMBDA_ASYNC_RETRIES  # retries of a failed async event (the template's EventInvokeConfig)
    # What `os.environ` holds while it runs (infra.local.environment; None: the process's own).
    environment: dict[str, str] | None = None
    # The handler as "module:attribute", for a worker process of its own (infra.local.workers) to load: the
    # runtime runs it there when it has workers. None: in this process.
    worker: str | None = None


@dataclass
class FailedEvent:
    function_name: str
    event: dict[str, Any]
    error: str


def invocation_record(
    fn: LocalFunction, region: str, account: str, request_id: str, event: dict[str, Any], error: str, attempts: int
) -> dict[str, Any]:
    """What Lambda sends an on-failure destination for an async event whose retries were exhausted."""
    last = error.strip().splitlines()[-1] if error.strip() else "Unknown"
    kind, _, message = last.partition(": ")
    return {
        "version": "1.0",
        "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "requestContext": {
            "requestId": request_id,
            "functionArn": f"arn:aws:lambda:{region}:{account}:function:{fn.function_name}:$LATEST",
            "condition": "RetriesExhausted",
            "approximateInvokeCount": attempts,
        },
        "requestPayload": event,
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "responsePayload": {"errorMessage": message or kind, "errorType": kind if message else "Error"},
    }


@dataclass
class InvocationStats:
    started: int = 0
    succeeded: int = 0
    errors: int = 0
    overran: int = 0  # ran past the function's timeout (AWS would have stopped them; here CPU starvation)
    failed_events: list[FailedEvent] = field(default_factory=list)


def functions_from_stack(
    app: Any,
    stack: Any,
    roles: dict[str, RoleCredentials],
    environments: dict[str, dict[str, str]] | None = None,
    module: str = "app",
) -> dict[str, LocalFunction]:
    """The stack's functions (infra.local.cloudformation.CreatedStack) that Lambda invokes, by name; a worker
    process loads each one's handler from `module` (the app's, whose attributes are its handlers).

    The API's function is served by `chalice local` instead (its handler is the app itself)."""
    out: dict[str, LocalFunction] = {}
    for name, f in stack.functions.items():
        handler = app.handler_map.get(f.handler_name)
        if handler is None:
            continue
        out[name] = LocalFunction(
            handler_name=f.handler_name,
            function_name=name,
            handler=handler,
            timeout_s=f.timeout_s,
            memory_mb=f.memory_mb,
            role=roles.get(name),
            on_failure=f.on_failure,
            async_retries=f.async_retries,
            environment=(environments or {}).get(name),
            worker=f"{module}:{f.handler_name}",
        )
    return out


class FunctionRunner:
    def __init__(
        self,
        functions: dict[str, LocalFunction],
        region: str,
        account_id: str,
        max_concurrency: int = 32,
        retry_delay_s: float = 1.0,
        on_failure: Callable[[LocalFunction, dict[str, Any]], None] | None = None,
    ) -> None:
        self.functions = functions
        self._region = region
        self._account = account_id
        # One pool per function, as Lambda scales each function on its own: with one shared pool, SES's
        # events queued behind minutes-long drains (the soak measured Send events handled 6 minutes late).
        self._max_concurrency = max_concurrency
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._retry_delay_s = retry_delay_s
        # How an async event waits for its next attempt; Lambda's own waits are about 1 and 2 minutes, which
        # the fault explorer passes by moving the clock (infra.local.explorer) instead of sleeping them.
        self.wait_to_retry: Callable[[int], None] = lambda attempt: time.sleep(self._retry_delay_s * attempt)
        self._inflight = 0
        self._running: Counter[str] = Counter()  # in flight, by function name
        self._cv = threading.Condition()
        self.stats = InvocationStats()
        self._closed = False
        # Stopping to save the stack's state: running invocations are told their time is up, and every
        # asynchronous event not yet started (or arriving meanwhile) is deferred, to run after the restart.
        self._hurry = threading.Event()
        self.deferred: list[tuple[str, dict[str, Any]]] = []
        # Sends an invocation record to a function's on-failure destination (the stack's SQS client).
        self._send_on_failure = on_failure
        # Each function's worker processes (infra.local.workers; None: every handler runs in this process),
        # and what the fault injector gives and takes from their invocations (infra.local.faults).
        self.workers: WorkerPools | None = None
        self.worker_faults: WorkerFaults | None = None

    def use_workers(self, per_function: int) -> None:
        """Run every function that names its handler for a worker (`LocalFunction.worker`) in processes of its own."""
        self.workers = WorkerPools(self._region, self._account, per_function, self._hurry)

    def resolve(self, name_or_arn: str) -> LocalFunction | None:
        name = name_or_arn.split(":function:")[-1].split(":")[0]
        return self.functions.get(name) or next((f for f in self.functions.values() if f.handler_name == name), None)

    def context_for(self, fn: LocalFunction) -> LambdaContext:
        return LambdaContext(fn.function_name, fn.timeout_s, fn.memory_mb, self._region, self._account, self._hurry)

    def invoke(self, fn: LocalFunction, event: dict[str, Any]) -> Any:
        """A synchronous invocation (RequestResponse, an event source's batch): the handler's result, or its
        exception. Counted in flight, so that a save waits for it as for an asynchronous one."""
        with self._cv:
            self.stats.started += 1
            self._inflight += 1
            self._running[fn.function_name] += 1
        try:
            return self._invoke(fn, event)
        finally:
            with self._cv:
                self._inflight -= 1
                self._running[fn.function_name] -= 1
                self._cv.notify_all()

    def _invoke(self, fn: LocalFunction, event: dict[str, Any]) -> Any:
        started = time.monotonic()
        try:
            result = self._run(fn, event)
        except (Exception, FunctionCrashed):
            with self._cv:
                self.stats.errors += 1
            raise
        finally:
            took = time.monotonic() - started
            if took > fn.timeout_s:
                with self._cv:
                    self.stats.overran += 1
                print(
                    f"[lambda] {fn.function_name} ran {took:.1f}s, past its "
                    f"{fn.timeout_s:.0f}s timeout: AWS would have stopped it"
                )
        with self._cv:
            self.stats.succeeded += 1
        return result

    def _run(self, fn: LocalFunction, event: dict[str, Any]) -> Any:
        """The handler's result: in one of the function's workers, or here as the function (its role, its
        environment)."""
        workers = self.workers
        if workers is not None and fn.worker is not None:
            with workers.checkout(fn) as worker:
                # The clock starts once a worker has it, as Lambda's starts in a container.
                return workers.invoke(worker, fn, event, self.context_for(fn), self.worker_faults)
        context = self.context_for(fn)
        with identity.acting_as(fn.role), environment.acting_in(fn.environment):
            return fn.handler(event, context)

    def invoke_async(
        self, fn: LocalFunction, event: dict[str, Any], on_done: Callable[[bool], None] | None = None
    ) -> str:
        """An asynchronous invocation (Event): runs later, retried twice on error like Lambda."""
        request_id = str(uuid.uuid4())
        with self._cv:
            if self._closed:
                raise RuntimeError("the local runtime is stopped")
            if self._hurry.is_set():
                self.deferred.append((fn.function_name, event))
                if on_done is not None:
                    on_done(True)  # accepted, as Lambda's async queue accepts it: it runs after the restart
                return request_id
            self._inflight += 1
            self._running[fn.function_name] += 1
            pool = self._pools.get(fn.function_name)
            if pool is None:
                pool = self._pools[fn.function_name] = ThreadPoolExecutor(
                    max_workers=self._max_concurrency, thread_name_prefix=f"lambda-{fn.handler_name}"
                )
        pool.submit(self._run_async, fn, event, on_done, request_id)
        return request_id

    def _run_async(
        self,
        fn: LocalFunction,
        event: dict[str, Any],
        on_done: Callable[[bool], None] | None,
        request_id: str = "",
    ) -> None:
        ok = False
        error = ""
        try:
            if self._hurry.is_set():  # queued behind others when the stack began to stop: runs after the restart
                with self._cv:
                    self.deferred.append((fn.function_name, event))
                ok = True
                return
            for attempt in range(fn.async_retries + 1):
                if attempt:
                    self.wait_to_retry(attempt)
                    if self._hurry.is_set():  # its retry runs after the restart
                        with self._cv:
                            self.deferred.append((fn.function_name, event))
                        ok = True
                        break
                try:
                    self.invoke(fn, event)
                    ok = True
                    break
                except FunctionCrashed as crash:
                    error = f"FunctionCrashed: {crash}"
                    print(f"[lambda] {fn.function_name} died (attempt {attempt + 1}): {crash}")
                except FunctionError as failed:  # raised in a worker: its own traceback, its own type
                    error = failed.traceback
                    print(f"[lambda] {fn.function_name} failed (attempt {attempt + 1}):\n{error}")
                except Exception:
                    error = traceback.format_exc(limit=6)
                    print(f"[lambda] {fn.function_name} failed (attempt {attempt + 1}):\n{error}")
            if not ok:
                with self._cv:
                    self.stats.failed_events.append(FailedEvent(fn.function_name, event, error))
                if fn.on_failure and self._send_on_failure is not None:
                    record = invocation_record(
                        fn, self._region, self._account, request_id, event, error, fn.async_retries + 1
                    )
                    try:
                        with identity.acting_as(fn.role):  # Lambda sends it with the function's role
                            self._send_on_failure(fn, record)
                    except Exception:
                        print(f"[lambda] {fn.function_name}: could not send to its on-failure destination:")
                        traceback.print_exc(limit=4)
        finally:
            if on_done is not None:
                on_done(ok)
            with self._cv:
                self._inflight -= 1
                self._running[fn.function_name] -= 1
                self._cv.notify_all()

    def stop_for_save(self, timeout: float) -> bool:
        """Stop for a save: no new invocation starts (events are deferred), running ones are told their time
        is up; True when every running invocation has finished within `timeout`."""
        self._hurry.set()
        if self.workers is not None:
            self.workers.hurry()
        return self.wait_idle(timeout)

    @property
    def hurrying(self) -> bool:
        """Stopping to save the stack's state: nothing new should start."""
        return self._hurry.is_set()

    def running(self) -> dict[str, int]:
        """Invocations in flight (or waiting for a retry), by function name."""
        with self._cv:
            return {name: n for name, n in self._running.items() if n > 0}

    @property
    def inflight(self) -> int:
        with self._cv:
            return self._inflight

    def wait_idle(self, timeout: float, function: str | None = None) -> bool:
        """Whether every invocation (of `function` only, when named) has finished within `timeout`."""
        end = time.monotonic() + timeout
        with self._cv:
            while self._running[function] if function else self._inflight:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def shutdown(self) -> None:
        with self._cv:
            self._closed = True
            pools = list(self._pools.values())
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
        if self.workers is not None:
            self.workers.shutdown()
