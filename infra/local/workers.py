"""Emulator: each function's invocations in worker processes of its own, as Lambda runs them in containers.

With `StackConfig(worker_processes=True)` the runtime (infra.local.lambda_runtime) hands each invocation
of a function to one of that function's worker processes (infra.local.worker): an idle one, warm from an
earlier invocation, else a new one, up to `per_function` of them (more invocations wait for one to be
free, as Lambda throttles a function at its concurrency). A worker's `os.environ` is the function's
environment, with its role's credentials in the usual variables, so neither the environment view
(infra.local.environment) nor the per-call credentials and pool patches (infra.local.identity) are
needed. Its AWS calls cross processes over loopback to the endpoint: direct calls
(infra.local.direct_calls) serve only the stack's own process.

What stays in the stack's process: the invocation's bookkeeping (in flight, retries of async events,
the on-failure destination, deferral when stopping), the Lambda context's clock (the remaining time is
sent with the invocation; "hurry" is sent to every worker when the stack stops to save), and the fault
injector's decisions (infra.local.faults sends each invocation the dice it may roll, and is told what
was injected and whether the invocation died).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from infra.local.api_gateway import GATEWAY_VARIABLE, RestApi
from infra.local.lambda_context import FunctionCrashed

if TYPE_CHECKING:
    from infra.local.identity import RoleCredentials
    from infra.local.lambda_runtime import LocalFunction

ROOT = Path(__file__).resolve().parents[2]
_TICKS = os.sysconf("SC_CLK_TCK")


class FunctionError(Exception):
    """The handler raised in its worker: the exception's type name, message and traceback, as the worker sent them."""

    def __init__(self, error_type: str, message: str, traceback_text: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.traceback = traceback_text


class WorkerFaults(Protocol):
    """What the fault injector tells a worker's invocation, and is told back (infra.local.faults)."""

    def worker_spec(self, fn: LocalFunction) -> dict[str, Any] | None: ...

    def worker_report(self, fn: LocalFunction, injected: dict[str, int], crashed: bool) -> None: ...


def worker_environment(
    environment: dict[str, str] | None, role: RoleCredentials | None, process: dict[str, str]
) -> dict[str, str]:
    """A worker's whole environment: the function's, its role's credentials, and the operator's log level."""
    env = dict(environment if environment is not None else process)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(var, None)
    if role is not None:
        env.update(
            AWS_ACCESS_KEY_ID=role.access_key,
            AWS_SECRET_ACCESS_KEY=role.secret_key,
            AWS_SESSION_TOKEN=role.token,
        )
    else:  # the operator's keys, as in the stack's process
        env.update({k: process[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if k in process})
    if "MOONSEND_LOG_LEVEL" in process:  # how much the operator wants to read, not a setting of the function
        env.setdefault("MOONSEND_LOG_LEVEL", process["MOONSEND_LOG_LEVEL"])
    return env


def _cpu_s(pid: int) -> float:
    """A child's user and system CPU seconds (a zombie's too: read before it is waited for)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


class Worker:
    """One worker process of one function (a container), running one invocation at a time."""

    def __init__(self, fn: LocalFunction, env: dict[str, str], region: str, account: str) -> None:
        assert fn.worker is not None
        read_fd, write_fd = os.pipe()
        args = [fn.worker, str(write_fd), fn.function_name, str(fn.memory_mb), region, account]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "infra.local.worker", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            pass_fds=(write_fd,),
            text=True,
        )
        os.close(write_fd)
        self._answers = os.fdopen(read_fd, "r", encoding="utf-8")
        self._write_lock = threading.Lock()
        self.cpu_at_exit: float | None = None

    def _write(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        with self._write_lock:
            self.process.stdin.write(json.dumps(message, default=str) + "\n")
            self.process.stdin.flush()

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """Run one invocation; the worker's answer (a worker that ends without one: FunctionCrashed)."""
        try:
            self._write(message)
            line = self._answers.readline()
        except (OSError, ValueError):
            line = ""
        if not line:
            code = self.end()
            raise FunctionCrashed(f"the function's process exited (code {code})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def hurry(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._write({"hurry": True})

    def cpu_s(self) -> float:
        return self.cpu_at_exit if self.cpu_at_exit is not None else _cpu_s(self.process.pid)

    def end(self, timeout: float = 5.0) -> int:
        """Close its stdin (it exits when idle) and wait for it; its exit code."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError, ValueError), self._write_lock:
                self.process.stdin.close()
        if self.cpu_at_exit is None:
            if not _exited(self.process.pid, timeout):
                self.process.kill()
                _exited(self.process.pid, timeout)
            self.cpu_at_exit = _cpu_s(self.process.pid)  # a zombie's, before the wait reaps it
        code = self.process.wait()
        self._answers.close()
        return code


def _exited(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` for a child to exit, leaving it unreaped (its /proc entry still readable)."""
    end = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:  # reaped already
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.01)


class ApiWorker:
    """The API's function in a process of its own, serving the app's routes as `chalice local` does."""

    def __init__(self, env: dict[str, str], host: str, port: int, stage: str, rest_api: RestApi) -> None:
        read_fd, write_fd = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "infra.local.worker", "--api", str(write_fd), host, str(port), stage],
            cwd=ROOT,
            env={**env, GATEWAY_VARIABLE: rest_api.to_json()},
            pass_fds=(write_fd,),
        )
        os.close(write_fd)
        with os.fdopen(read_fd, "r", encoding="utf-8") as ready:
            self.url = ready.readline().strip()  # its address once it listens ("": it could not)
        if not self.url:
            self.process.wait()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class WorkerPools:
    """Every function's workers: warm ones reused, new ones started up to `per_function` per function."""

    def __init__(self, region: str, account: str, per_function: int, hurry: threading.Event) -> None:
        self._region = region
        self._account = account
        self._limit = per_function
        self._hurry = hurry
        self._idle: dict[str, list[Worker]] = {}
        self._count: Counter[str] = Counter()
        self._all: list[Worker] = []
        self._cv = threading.Condition()
        self._closed = False
        self.started = 0  # processes started, over the stack's life

    @contextlib.contextmanager
    def checkout(self, fn: LocalFunction) -> Iterator[Worker]:
        """A worker of `fn` for one invocation (waits while every allowed one is busy); back to the idle ones
        after, unless it ended."""
        worker = self._take(fn)
        try:
            yield worker
        finally:
            with self._cv:
                if worker.process.poll() is None and not self._closed:
                    self._idle.setdefault(fn.function_name, []).append(worker)
                else:
                    self._count[fn.function_name] -= 1
                self._cv.notify_all()

    def _take(self, fn: LocalFunction) -> Worker:
        name = fn.function_name
        with self._cv:
            while not self._idle.get(name) and self._count[name] >= self._limit:
                if self._closed:
                    raise RuntimeError("the local runtime is stopped")
                self._cv.wait()
            if self._idle.get(name):
                return self._idle[name].pop()
            self._count[name] += 1
        try:
            env = worker_environment(fn.environment, fn.role, dict(os.environ))
            worker = Worker(fn, env, self._region, self._account)
        except BaseException:
            with self._cv:
                self._count[name] -= 1
                self._cv.notify_all()
            raise
        with self._cv:
            self._all.append(worker)
            self.started += 1
        return worker

    def invoke(self, worker: Worker, fn: LocalFunction, event: dict[str, Any], context: Any, faults: Any) -> Any:
        """One invocation on `worker`: the handler's result, or FunctionError / FunctionCrashed."""
        spec = faults.worker_spec(fn) if faults is not None else None
        message = {
            "event": event,
            "remaining_ms": context.get_remaining_time_in_millis(),
            "hurry": self._hurry.is_set(),
            "faults": spec,
        }
        try:
            answer = worker.call(message)
        except FunctionCrashed:
            if spec is not None:
                faults.worker_report(fn, {}, True)
            raise
        crashed = answer.get("crashed")
        if crashed is not None:
            worker.end()  # a killed invocation's process is gone (it exits after answering)
        if spec is not None:
            faults.worker_report(fn, answer.get("injected") or {}, crashed is not None)
        if crashed is not None:
            raise FunctionCrashed(crashed)
        if answer["ok"]:
            return answer["result"]
        raise FunctionError(answer["error_type"], answer["message"], answer["error"])

    def hurry(self) -> None:
        """Tell every worker its invocation's time is up (the stack stops to save its state)."""
        with self._cv:
            workers = list(self._all)
        for worker in workers:
            worker.hurry()

    def cpu_s(self) -> float:
        """CPU seconds of every worker started so far (those that ended included)."""
        with self._cv:
            workers = list(self._all)
        return sum(w.cpu_s() for w in workers)

    def processes(self) -> int:
        """Worker processes running now."""
        with self._cv:
            return sum(self._count.values())

    def shutdown(self) -> None:
        with self._cv:
            self._closed = True
            workers = list(self._all)
            self._cv.notify_all()
        for worker in workers:
            worker.end(timeout=2.0)
