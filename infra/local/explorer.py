"""Emulator: the fault explorer's engine. Every AWS call one invocation makes, found, then failed one at a time.

The soak (infra.local.faults) rolls dice at a few chosen places; the reviews that broke our promises found the
places it never chose. The explorer chooses none: it runs a scenario once and records every AWS call the
watched invocation makes (its function, and the first invocation of it whose event names the scenario's
marker), as sites: the operation and its place among that operation's calls (`PutItem#2`). Then, a fresh
scenario per site, it fails that call in the same invocation in one of these ways:

- **killed before** the call: the process is gone (a timeout, a lost sandbox): the call is not made, no
  `finally` of ours reaches AWS (every later call of the invocation, its threads' too, raises again);
- **killed after** the call: AWS did it, and nothing after it happened;
- **throttled** past the SDK's retries: the call raises the service's throttling error, as botocore does
  once its own retries are spent, and the invocation goes on with it;

and, once per scenario, **twice at once**: the watched invocation's event given to two invocations at the
same time (a duplicate delivery), none failed.

What Lambda does next is the stack's: an async event is retried (infra.local.lambda_runtime), a polled
message comes back once its visibility timeout passes, a stream batch is given again. The time those take
on AWS (a minute, a quarter hour, a claim's half hour) is not waited for: `MovedClock` moves `time.time()`
of the whole process ahead, and an async event's retries come as late as Lambda's do (the clock moved
ASYNC_RETRY_S, then twice that). It must be installed before anything takes `time.time` as a default argument,
so the explorer's own test layer installs it first (tests/faults/conftest.py).

A new AWS call in the code is a new site without anyone writing a scenario for it: sites come from what
the code does, not from a list.
"""

from __future__ import annotations

import contextvars
import datetime
import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.client import BaseClient
from botocore.exceptions import ClientError
from moto.dynamodb.models import table as moto_table

from infra.local.faults import propagating
from infra.local.lambda_context import FunctionCrashed

KILL_BEFORE, KILL_AFTER, THROTTLED, TWICE = "killed before", "killed after", "throttled", "twice at once"
CALL_MODES = (KILL_BEFORE, KILL_AFTER, THROTTLED)
API = "api"  # what the explorer calls the API's function: its requests are watched as one function's
# API Gateway's answer when the function behind a route died (a Lambda proxy integration's "Internal server error").
BAD_GATEWAY = {
    "statusCode": 502,
    "headers": {"Content-Type": "application/json", "x-amzn-ErrorType": "InternalServerErrorException"},
    "multiValueHeaders": {},
    "isBase64Encoded": False,
    "body": json.dumps({"message": "Internal server error"}),
}
# Lambda retries a failed async event "after one minute, then two" (Lambda's guide, asynchronous invocation).
ASYNC_RETRY_S = 60.0

# Each service's answer to a caller over its rate, as botocore raises it once its retries are spent.
_THROTTLING = {
    "dynamodb": (
        "ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput was exceeded",
    ),
    "sqs": ("ThrottlingException", "Rate exceeded"),
    "sns": ("Throttled", "Rate exceeded"),
    "s3": ("SlowDown", "Please reduce your request rate."),
    "lambda": ("TooManyRequestsException", "Rate exceeded"),
    "sesv2": ("TooManyRequestsException", "Too many requests"),
    "ses": ("Throttling", "Maximum sending rate exceeded."),
    "cloudwatch": ("Throttling", "Rate exceeded"),
    "scheduler": ("ThrottlingException", "Rate exceeded"),
    "secretsmanager": ("ThrottlingException", "Rate exceeded"),
    "kms": ("ThrottlingException", "Rate exceeded"),
}


@dataclass(frozen=True, order=True)
class Site:
    """One AWS call of a watched invocation: the `nth` call (from 1) of `operation` to `service`."""

    function: str
    service: str
    operation: str
    nth: int

    def __str__(self) -> str:
        return f"{self.function} {self.service}.{self.operation}#{self.nth}"


@dataclass(frozen=True)
class Fault:
    site: Site
    mode: str  # KILL_BEFORE, KILL_AFTER or THROTTLED

    def __str__(self) -> str:
        return f"{self.site} {self.mode}"


@dataclass
class _Watched:
    """One invocation the explorer looks at: its calls so far, and whether it died."""

    function: str
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    order: list[Site] = field(default_factory=list)
    dead: bool = False


_current: contextvars.ContextVar[_Watched | None] = contextvars.ContextVar("moonsend_explored", default=None)


class MovedClock:
    """`time.time()` moved ahead for the whole process: Lambda's retry a minute later, a visibility timeout or a
    claim passed, without waiting for them. `time.monotonic()` is left alone: what measures elapsed time (a
    Lambda's deadline, a poll's wait) still sees the real seconds."""

    def __init__(self) -> None:
        self._real = time.time
        self._offset = 0.0
        self._lock = threading.Lock()

    def install(self) -> None:
        real, clock = self._real, self

        def moved() -> float:
            return real() + clock._offset

        def moved_utc() -> datetime.datetime:  # moto's clock for a stream record's ApproximateCreationDateTime
            return datetime.datetime.fromtimestamp(moved(), datetime.UTC).replace(tzinfo=None)

        time.time = moved
        self._moto_utcnow = moto_table.utcnow
        moto_table.utcnow = moved_utc  # as DynamoDB stamps a record by the clock Lambda's functions read

    def uninstall(self) -> None:
        time.time = self._real
        moto_table.utcnow = self._moto_utcnow

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._offset += seconds

    @property
    def moved_s(self) -> float:
        return self._offset


class Explorer:
    """Watches one function's invocation at a time in a started LocalStack (functions in this process)."""

    def __init__(self, stack: Any, clock: MovedClock) -> None:
        assert stack.runner is not None and stack.runner.workers is None, "the explorer needs in-process functions"
        self._runner = stack.runner
        self._clock = clock
        self._undo: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._target: tuple[str, tuple[str, ...]] | None = None  # (handler, markers) of the invocation to watch
        self._fault: Fault | None = None
        self.watched: _Watched | None = None  # the watched invocation, once it started
        self.injected: Fault | None = None  # the fault, once it was made
        self.twice = False

    # --- installing ----------------------------------------------------------------------------------
    def install(self) -> None:
        runner = self._runner
        real_invoke = runner.invoke
        real_submit = ThreadPoolExecutor.submit
        real_call = BaseClient._make_api_call
        real_wait = runner.wait_to_retry

        def invoke(fn: Any, event: dict[str, Any]) -> Any:
            watched = self._watch(fn.handler_name, event)
            if watched is None:
                return real_invoke(fn, event)
            return self.run_watched(watched, lambda: real_invoke(fn, event))

        def call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
            watched = _current.get()
            if watched is None:
                return real_call(client, operation, params)
            site = self._site(watched, client.meta.service_model.service_name, operation)
            fault = self._fault if self._fault is not None and self._fault.site == site else None
            if fault is not None and fault.mode == KILL_BEFORE:
                self._kill(watched, fault)
            if fault is not None and fault.mode == THROTTLED:
                self.injected = fault
                raise _throttled(site)
            answer = real_call(client, operation, params)
            if fault is not None and fault.mode == KILL_AFTER:
                self._kill(watched, fault)
            return answer

        def wait_to_retry(attempt: int) -> None:
            self._clock.advance(ASYNC_RETRY_S * attempt)
            real_wait(attempt)

        runner.invoke = invoke
        runner.wait_to_retry = wait_to_retry
        ThreadPoolExecutor.submit = propagating(real_submit, _current)  # type: ignore[method-assign]
        BaseClient._make_api_call = call

        def undo() -> None:
            runner.invoke = real_invoke
            runner.wait_to_retry = real_wait
            ThreadPoolExecutor.submit = real_submit  # type: ignore[method-assign]
            BaseClient._make_api_call = real_call

        self._undo.append(undo)

    def install_api(self, server: Any) -> None:
        """Watch the API's requests too (as the function API, their event API Gateway's): the app that chalice
        local's server (a LocalDevServer, started) calls is wrapped, as infra.local.api_exchanges wraps it."""
        handler = server.server.RequestHandlerClass  # functools.partial(handler, app_object=..., config=...)
        explored = _ExploredApp(handler.keywords["app_object"], self)
        server.server.RequestHandlerClass = functools.partial(
            handler.func, *handler.args, **{**handler.keywords, "app_object": explored}
        )
        self._undo.append(lambda: setattr(server.server, "RequestHandlerClass", handler))

    def run_watched(self, watched: _Watched, call: Callable[[], Any]) -> Any:
        """The watched invocation, its AWS calls seen as its own (twice at once when the run asks for it)."""
        token = _current.set(watched)
        try:
            return _at_once(call, call) if self.twice else call()
        finally:
            _current.reset(token)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    # --- one run -------------------------------------------------------------------------------------
    @contextmanager
    def watching(
        self, handler: str, markers: tuple[str, ...], fault: Fault | None = None, *, twice: bool = False
    ) -> Iterator[None]:
        """Watch the first invocation of `handler` whose event names every one of `markers` (a tenant, and what
        only the event to watch carries), and fail it by `fault`."""
        with self._lock:
            self._target, self._fault, self.twice = (handler, markers), fault, twice
            self.watched = self.injected = None
        try:
            yield
        finally:
            with self._lock:
                self._target, self._fault, self.twice = None, None, False

    def sites(self) -> list[Site]:
        """The watched invocation's calls, in the order they were made."""
        return list(self.watched.order) if self.watched is not None else []

    def _watch(self, handler: str, event: dict[str, Any]) -> _Watched | None:
        with self._lock:
            if self._target is None or self.watched is not None or handler != self._target[0]:
                return None
            text = json.dumps(event, default=str)
            if not all(marker in text for marker in self._target[1]):
                return None
            self.watched = _Watched(handler)
            return self.watched

    def _site(self, watched: _Watched, service: str, operation: str) -> Site:
        if watched.dead:
            raise FunctionCrashed("the invocation's process is gone")
        with self._lock:
            watched.calls[(service, operation)] += 1
            site = Site(watched.function, service, operation, watched.calls[(service, operation)])
            watched.order.append(site)
        return site

    def _kill(self, watched: _Watched, fault: Fault) -> None:
        watched.dead = True
        self.injected = fault
        raise FunctionCrashed(f"killed by the explorer: {fault}")


class _ExploredApp:
    """The Chalice app as chalice local's server calls it: the watched request's calls seen; a request killed
    is answered as API Gateway answers a function that died (502, its own message)."""

    def __init__(self, app: Any, explorer: Explorer) -> None:
        self._app = app
        self._explorer = explorer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._app, name)

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        watched = self._explorer._watch(API, event)
        if watched is None:
            return dict(self._app(event, context))
        try:
            return dict(self._explorer.run_watched(watched, lambda: self._app(event, context)))
        except FunctionCrashed:
            return dict(BAD_GATEWAY)


def _throttled(site: Site) -> ClientError:
    code, message = _THROTTLING.get(site.service, ("ThrottlingException", "Rate exceeded"))
    error = {"Code": code, "Message": message, "Type": "Sender"}
    return ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, site.operation)


def _at_once(*calls: Callable[[], Any]) -> Any:
    """Run each call in its own thread at the same moment; the first one's answer (or its error)."""
    barrier = threading.Barrier(len(calls))
    results: list[tuple[bool, Any]] = [(False, None)] * len(calls)
    context = contextvars.copy_context()

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = (True, calls[i]())
        except BaseException as exc:  # a crash of one is the other's business too: reported below
            results[i] = (False, exc)

    threads = [threading.Thread(target=lambda i=i: context.copy().run(run, i)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok, value = results[0]
    if not ok:
        raise value
    return value
