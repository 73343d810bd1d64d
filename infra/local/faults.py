"""Emulator: AWS's faults injected at a seed: what the soak test (`bench/soak.py`) runs under.

Each fault is one AWS misbehaviour the pipeline must survive without sending twice or losing a
recipient, injected where the local stand-in for that service sits:

- **SES transient errors** (a 500 InternalFailure) and **throttling bursts** (every send of one
  account refused with TooManyRequests for `burst_s`): the SES stand-in's `fault` hook;
- **duplicate SNS deliveries** (a Lambda subscriber invoked twice for one publish): `SnsDelivery`;
- **duplicate SQS deliveries** (a received message left visible, so it is received again): the fast
  SQS model's `redeliver` hook, on the send queues and the SES events queue;
- **a drain's SQS calls throttled** past botocore's retries (a `DeleteMessageBatch` or a `ReceiveMessage`
  answered with SQS's throttling error): the same wrapper raises the ClientError botocore would;
- **a drainer killed mid-batch**, just before SES is called or just after SES accepted (the email went
  out and nothing was recorded yet), **a precompile killed between steps** (after its ledger write and
  before its enqueue, or after the enqueue), **a digest run killed** at one of its enqueues (its hold and
  open assemblies left as they were), and **a Lambda deadline hit mid-batch** (the invocation's
  context reports more time than it has, so the deadline comes while sends are in flight): a wrapper
  around every client's API call raises `FunctionCrashed` in the invocation, and every later AWS call of
  that invocation (its send threads too) raises it again, as nothing more leaves a dead process. The
  runtime counts it as the invocation's error and retries it as Lambda retries async events. An event is killed at most
  once, so its retry runs (three deaths in a row would be Lambda giving up on the event, a loss that
  Lambda's on-failure destination covers, not the pipeline).

The seed fixes the random streams; which request draws which number still depends on thread timing,
so two runs at one seed inject the same kinds and rates of faults, not the same faults on the same
recipients. Faults stop after `until_s`, so that the run can finish (and crashed drains' messages
come back after the queues' visibility timeout).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from infra.local.fast_sqs import FastQueue
from infra.local.lambda_runtime import FunctionCrashed, LambdaContext, LocalFunction
from infra.local.ses import Refused
from infra.local.sns_delivery import Publication


@dataclass(frozen=True)
class FaultPlan:
    seed: int
    ses_transient: float = 0.01  # per send: a 500
    ses_burst: float = 0.002  # per send: a throttling burst starts on that account
    burst_s: float = 2.0
    sns_duplicate: float = 0.03  # per delivery to a Lambda
    sqs_duplicate: float = 0.01  # per message received from a send queue or the events queue
    drainer_kill: float = 0.002  # per SES send, half before SES is called and half after it accepted
    precompile_kill: float = 0.03  # per enqueue, half before SendMessageBatch and half after
    # Per enqueue of a digest's run, half before and half after: a run killed without its `finally` (its hold
    # kept, its assemblies open), retried by Lambda while the schedule's second firing waits.
    digest_kill: float = 0.1
    deadline: float = 0.05  # per send_emails invocation: its deadline comes mid-batch
    # Per call of a drain: refused with SQS's throttling error, as botocore raises it after its own retries.
    delete_throttle: float = 0.02  # DeleteMessageBatch (the messages come back: each must be found done)
    receive_throttle: float = 0.005  # ReceiveMessage (escapes the drain: its chain must hand on, not stall)
    until_s: float = 600.0  # no new faults after this long


@dataclass
class _Invocation:
    function: str
    event: str  # the event's digest: Lambda's retries of one event carry the same one
    dead: bool = False
    deadline: float | None = None  # monotonic time at which Lambda stops it


# A context variable, not a thread-local: a call the stack answers in this process runs in an empty
# context (infra.local.direct_calls), so the endpoint's own work is never taken for the caller's
# invocation (a killed drainer's fault must not fall on the SES stand-in answering it).
_current: contextvars.ContextVar[_Invocation | None] = contextvars.ContextVar("moonsend_fault_invocation", default=None)


def _invocation() -> _Invocation | None:
    return _current.get()


@dataclass
class Faults:
    plan: FaultPlan
    prefix: str  # the stage's resource prefix ("moonsend-local"): send queues and functions are named by it
    injected: Counter[str] = field(default_factory=Counter)
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _bursts: dict[str, float] = field(default_factory=dict)
    _t0: float = field(default_factory=time.monotonic)
    _undo: list[Callable[[], None]] = field(default_factory=list)
    _killed_events: set[str] = field(default_factory=set)  # each event dies at most once: its retry lives

    def __post_init__(self) -> None:
        self._rng = random.Random(self.plan.seed)

    # --- the dice ------------------------------------------------------------------------------------
    def active(self) -> bool:
        return time.monotonic() - self._t0 < self.plan.until_s

    def _roll(self, p: float, kind: str) -> bool:
        if p <= 0 or not self.active():
            return False
        with self._lock:
            hit = self._rng.random() < p
            if hit:
                self.injected[kind] += 1
        return hit

    # --- installing ----------------------------------------------------------------------------------
    def install(self, stack: Any) -> None:
        """Hook every fault into a started LocalStack (undone by `uninstall`)."""
        assert stack.ses is not None and stack.sns is not None and stack.runner is not None
        ses, sns, runner = stack.ses, stack.sns, stack.runner
        ses.fault = self._ses_fault
        sns.duplicates = self._sns_duplicates
        FastQueue.redeliver = self._sqs_redeliver
        real_invoke, real_context = runner.invoke, runner.context_for
        runner.invoke = self._invoke(real_invoke)
        runner.context_for = self._context_for(real_context)
        if runner.workers is not None:
            # The functions run in worker processes: each invocation takes its dice there (`worker_spec`), and
            # nothing of this process needs patching.
            runner.worker_faults = self

            def undo_workers() -> None:
                ses.fault = None
                sns.duplicates = lambda _p, _f: 0
                FastQueue.redeliver = None
                runner.invoke, runner.context_for = real_invoke, real_context
                runner.worker_faults = None

            self._undo.append(undo_workers)
            return
        real_submit = ThreadPoolExecutor.submit
        ThreadPoolExecutor.submit = propagating(real_submit)  # type: ignore[method-assign]
        # Every AWS call of every client, made before or after this (a client copies its session's event
        # handlers when it is made, so registering handlers would miss the handlers' cached clients).
        real_call = BaseClient._make_api_call

        def call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
            self._before_call(operation)
            answer = real_call(client, operation, params)
            self._after_call(operation)  # only once AWS said yes: "killed after SES accepted"
            return answer

        BaseClient._make_api_call = call  # type: ignore[method-assign]

        def undo() -> None:
            ses.fault = None
            sns.duplicates = lambda _p, _f: 0
            FastQueue.redeliver = None
            runner.invoke, runner.context_for = real_invoke, real_context
            ThreadPoolExecutor.submit = real_submit  # type: ignore[method-assign]
            BaseClient._make_api_call = real_call  # type: ignore[method-assign]

        self._undo.append(undo)

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    # --- SES, SNS, SQS -------------------------------------------------------------------------------
    def _ses_fault(self, access_key: str) -> Refused | None:
        now = time.monotonic()
        if self._bursts.get(access_key, 0.0) > now:
            return Refused("rate", "Maximum sending rate exceeded.")
        if self._roll(self.plan.ses_burst, "ses throttling burst"):
            self._bursts[access_key] = now + self.plan.burst_s
            return Refused("rate", "Maximum sending rate exceeded.")
        if self._roll(self.plan.ses_transient, "ses transient error"):
            return Refused("transient", "Internal failure (injected).")
        return None

    def _sns_duplicates(self, pub: Publication, fn: LocalFunction) -> int:
        return 1 if self._roll(self.plan.sns_duplicate, "sns duplicate delivery") else 0

    def _sqs_redeliver(self, queue_name: str) -> bool:
        ours = (f"{self.prefix}-free", f"{self.prefix}-ses-events")
        if not queue_name.startswith(f"{self.prefix}-t-") and queue_name not in ours:
            return False
        return self._roll(self.plan.sqs_duplicate, "sqs duplicate delivery")

    # --- invocations ---------------------------------------------------------------------------------
    def _invoke(self, real: Callable[[LocalFunction, dict[str, Any]], Any]) -> Callable[..., Any]:
        def invoke(fn: LocalFunction, event: dict[str, Any]) -> Any:
            digest = hashlib.sha256(json.dumps(event, sort_keys=True, default=str).encode()).hexdigest()
            token = _current.set(_Invocation(fn.handler_name, f"{fn.handler_name}:{digest}"))
            try:
                return real(fn, event)
            finally:
                _current.reset(token)

        return invoke

    def _context_for(self, real: Callable[[LocalFunction], LambdaContext]) -> Callable[[LocalFunction], Any]:
        def context_for(fn: LocalFunction) -> Any:
            ctx = real(fn)
            inv = _invocation()
            if (
                inv is not None
                and fn.handler_name == "send_emails"
                and not self._killed_before(inv)
                and self._roll(self.plan.deadline, "deadline hit mid-batch")
            ):
                # The context claims the margin is still ahead when it is not: the drain keeps taking
                # batches, and Lambda stops it a few seconds in, mid-batch.
                cut_s = self._rng.uniform(2.0, 8.0)
                inv.deadline = time.monotonic() + cut_s
                return _LyingContext(ctx, extra_ms=60_000)
            return ctx

        return context_for

    def worker_spec(self, fn: LocalFunction) -> dict[str, Any] | None:
        """The dice an invocation in a worker process rolls at its AWS calls (infra.local.worker): the kill
        points of its function (none for an event killed before), the deadline Lambda stops it at, a seed."""
        inv = _invocation()
        if inv is None or not self.active():
            return None
        killable = not self._killed_before(inv)
        kills = [
            [operation, when, getattr(self.plan, point[0]) / 2, point[1], point[2]]
            for (function, operation, when), point in _KILL_POINTS.items()
            if function == fn.handler_name and killable
        ]
        throttles = [
            [operation, getattr(self.plan, point[0]), point[1]]
            for (function, operation), point in _THROTTLE_POINTS.items()
            if function == fn.handler_name
        ]
        deadline = None if inv.deadline is None else inv.deadline - time.monotonic()
        if not kills and not throttles and deadline is None:
            return None
        with self._lock:
            seed = self._rng.getrandbits(64)
        active_for = self.plan.until_s - (time.monotonic() - self._t0)
        return {
            "seed": seed,
            "kills": kills,
            "throttles": throttles,
            "deadline_in_s": deadline,
            "active_for_s": active_for,
        }

    def worker_report(self, fn: LocalFunction, injected: dict[str, int], crashed: bool) -> None:
        """What an invocation in a worker injected, and whether it died (its event then dies no more)."""
        with self._lock:
            self.injected.update(injected)
        inv = _invocation()
        if crashed and inv is not None:
            inv.dead = True
            with self._lock:
                self._killed_events.add(inv.event)

    def _kill(self, inv: _Invocation, why: str) -> None:
        inv.dead = True
        with self._lock:
            self._killed_events.add(inv.event)
        raise FunctionCrashed(why)

    def _killed_before(self, inv: _Invocation) -> bool:
        with self._lock:
            return inv.event in self._killed_events

    def _before_call(self, operation: str) -> None:
        inv = _invocation()
        if inv is None:
            return
        if inv.dead:
            raise FunctionCrashed("the invocation's process is gone")
        if inv.deadline is not None and time.monotonic() >= inv.deadline:
            self._kill(inv, "Task timed out")
        self._maybe_kill(inv, operation, "before")
        throttle = _THROTTLE_POINTS.get((inv.function, operation))
        if throttle is not None and self._roll(getattr(self.plan, throttle[0]), throttle[1]):
            raise throttled(operation)

    def _after_call(self, operation: str) -> None:
        inv = _invocation()
        if inv is not None and not inv.dead:
            self._maybe_kill(inv, operation, "after")

    def _maybe_kill(self, inv: _Invocation, operation: str, when: str) -> None:
        point = _KILL_POINTS.get((inv.function, operation, when))
        if point is None or self._killed_before(inv):
            return
        if self._roll(getattr(self.plan, point[0]) / 2, point[1]):
            self._kill(inv, point[2])


# (function, operation, before/after the call) -> (the plan's probability, what is counted, why it died)
_KILL_POINTS: dict[tuple[str, str, str], tuple[str, str, str]] = {
    ("send_emails", "SendEmail", "before"): ("drainer_kill", "drainer killed before SES", "killed before SES"),
    ("send_emails", "SendEmail", "after"): (
        "drainer_kill",
        "drainer killed after SES accepted",
        "killed after SES accepted, before the outcome was recorded",
    ),
    ("precompile_email", "SendMessageBatch", "before"): (
        "precompile_kill",
        "precompile killed before enqueue",
        "killed after the ledger write, before the enqueue",
    ),
    ("precompile_email", "SendMessageBatch", "after"): (
        "precompile_kill",
        "precompile killed after enqueue",
        "killed after the enqueue",
    ),
    ("run_digest", "SendMessageBatch", "before"): (
        "digest_kill",
        "digest run killed before an enqueue",
        "killed with its assemblies open, before an enqueue",
    ),
    ("run_digest", "SendMessageBatch", "after"): (
        "digest_kill",
        "digest run killed after an enqueue",
        "killed after an enqueue, before its items were marked mailed",
    ),
}


# (function, operation) -> (the plan's probability, what is counted): calls refused with throttling.
_THROTTLE_POINTS: dict[tuple[str, str], tuple[str, str]] = {
    ("send_emails", "DeleteMessageBatch"): ("delete_throttle", "drain's delete throttled"),
    ("send_emails", "ReceiveMessage"): ("receive_throttle", "drain's receive throttled"),
}


def throttled(operation: str) -> ClientError:
    """SQS's throttling answer, as botocore raises it once its own retries are spent."""
    error = {"Code": "ThrottlingException", "Message": "Rate exceeded", "Type": "Sender"}
    return ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)


class _LyingContext:
    """A Lambda context that reports `extra_ms` more time than the invocation has."""

    def __init__(self, real: LambdaContext, extra_ms: int) -> None:
        self._real = real
        self._extra_ms = extra_ms

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def get_remaining_time_in_millis(self) -> int:
        return self._real.get_remaining_time_in_millis() + self._extra_ms


def propagating(real_submit: Callable[..., Any], var: contextvars.ContextVar[Any] = _current) -> Callable[..., Any]:
    """ThreadPoolExecutor.submit that runs the task as part of the submitting thread's invocation (`var`'s)."""

    def submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        inv = var.get()
        if inv is None:
            return real_submit(self, fn, *args, **kwargs)

        def run(*a: Any, **kw: Any) -> Any:
            token = var.set(inv)
            try:
                return fn(*a, **kw)
            finally:
                var.reset(token)

        return real_submit(self, run, *args, **kwargs)

    return submit
