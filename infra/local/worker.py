"""Emulator: one Lambda container, a process that runs one function's invocations one at a time.

infra.local.workers starts it with the function's environment as the process's own `os.environ` and
its role's credentials in `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, so
nothing here is patched: boto3 signs as the role, the handler reads its own variables, and the threads
it starts share both, as in a Lambda container. Its AWS calls go over loopback to `AWS_ENDPOINT_URL`.

It speaks JSON lines: invocations (and "hurry": the stack is stopping, every invocation's time is up)
come on stdin, one answer per invocation goes to the file descriptor named on the command line; stdout
and stderr are the stack's. When the stack injects faults, an invocation may carry their dice
(`_Faults`): a killed invocation's answer says so and the process exits at once, as a killed container
does, taking the invocation's threads with it.

    python -m infra.local.worker module:handler REPLY_FD FUNCTION_NAME MEMORY_MB REGION ACCOUNT
    python -m infra.local.worker --api READY_FD HOST PORT STAGE     # the API's function, as `chalice local`
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import random
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from infra.local.lambda_context import FunctionCrashed, LambdaContext

CRASH_EXIT = 70  # the exit code of a worker killed by an injected fault


def load(spec: str) -> Callable[[dict[str, Any], Any], Any]:
    """The handler named `module:attribute` ("app:send_emails")."""
    module, _, name = spec.partition(":")
    handler: Callable[[dict[str, Any], Any], Any] = getattr(importlib.import_module(module), name)
    return handler


class _Answers:
    """The answers' channel, written from whichever thread answers (a killed send thread included)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def send(self, answer: dict[str, Any]) -> None:
        line = json.dumps(answer, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


class _Faults:
    """The faults of one invocation, its dice rolled here at every AWS call of the process (infra.local.faults
    decides which points may kill and with what chance; this process has only the one invocation)."""

    def __init__(self, spec: dict[str, Any], answers: _Answers) -> None:
        now = time.monotonic()
        self._rng = random.Random(spec["seed"])
        self._kills = {(op, when): (p, kind, why) for op, when, p, kind, why in spec["kills"]}
        self._throttles = {op: (p, kind) for op, p, kind in spec.get("throttles", [])}
        self._deadline = now + spec["deadline_in_s"] if spec.get("deadline_in_s") is not None else None
        self._until = now + spec["active_for_s"]
        self._answers = answers
        self._lock = threading.Lock()
        self.injected: Counter[str] = Counter()

    def before(self, operation: str) -> None:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._die("Task timed out")
        self._maybe_kill(operation, "before")
        throttle = self._throttles.get(operation)
        if throttle is not None and time.monotonic() < self._until and self._hit(throttle[0], throttle[1]):
            from infra.local.faults import throttled

            raise throttled(operation)

    def _hit(self, p: float, kind: str) -> bool:
        with self._lock:
            hit = self._rng.random() < p
            if hit:
                self.injected[kind] += 1
        return hit

    def after(self, operation: str) -> None:
        self._maybe_kill(operation, "after")

    def _maybe_kill(self, operation: str, when: str) -> None:
        point = self._kills.get((operation, when))
        if point is None or time.monotonic() >= self._until:
            return
        p, kind, why = point
        with self._lock:
            hit = self._rng.random() < p
            if hit:
                self.injected[kind] += 1
        if hit:
            self._die(why)

    def _die(self, why: str) -> None:
        # Nothing more leaves a dead process: the answer first, then the process ends (its threads too).
        self._answers.send({"ok": False, "crashed": why, "injected": dict(self.injected)})
        os._exit(CRASH_EXIT)


_armed: _Faults | None = None


def _arm_faults() -> None:
    """Route every AWS call of this process through the armed invocation's dice (installed at the first
    invocation that carries faults; a no-op for an invocation that carries none)."""
    from botocore.client import BaseClient

    real_call = BaseClient._make_api_call

    def call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        armed = _armed
        if armed is not None:
            armed.before(operation)
        answer = real_call(client, operation, params)
        if armed is not None:
            armed.after(operation)
        return answer

    BaseClient._make_api_call = call


def serve(
    handler: Callable[[dict[str, Any], Any], Any],
    answers: _Answers,
    context: Callable[[float, threading.Event], LambdaContext],
) -> None:
    """Run invocations from stdin until it closes (the runtime is gone or shut this worker down)."""
    global _armed
    hurry = threading.Event()
    jobs: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            message = json.loads(line)
            if message.get("hurry"):
                hurry.set()
            else:
                jobs.put(message)
        jobs.put(None)

    threading.Thread(target=read, daemon=True, name="worker-stdin").start()
    faults_installed = False
    while (job := jobs.get()) is not None:
        if job.get("hurry"):
            hurry.set()
        spec = job.get("faults")
        if spec is not None and not faults_installed:
            _arm_faults()
            faults_installed = True
        _armed = _Faults(spec, answers) if spec is not None else None
        ctx = context(job["remaining_ms"] / 1000, hurry)
        try:
            result = handler(job["event"], ctx)
            answer: dict[str, Any] = {"ok": True, "result": result}
        except FunctionCrashed as crash:
            answer = {"ok": False, "crashed": str(crash)}
        except Exception as exc:
            answer = {
                "ok": False,
                "error_type": type(exc).__name__,
                "message": str(exc),
                "error": traceback.format_exc(limit=6),
            }
        if _armed is not None:
            answer["injected"] = dict(_armed.injected)
            _armed = None
        answers.send(answer)


def serve_api(ready_fd: str, host: str, port: str, stage: str) -> int:
    """Serve the app's HTTP routes as `chalice local` does, as the API's function; its address to `ready_fd`."""
    from chalice.config import Config

    import app
    from infra.local import api_gateway

    root = os.getcwd()
    with open(os.path.join(root, ".chalice", "config.json"), encoding="utf-8") as f:
        on_disk = json.load(f)
    cfg = Config.create(chalice_stage=stage, app_name="moonsend", config_from_disk=on_disk, project_dir=root)
    with os.fdopen(int(ready_fd), "w", encoding="utf-8") as ready:
        try:
            rest_api = api_gateway.RestApi.from_json(os.environ.pop(api_gateway.GATEWAY_VARIABLE))
            server = api_gateway.serve(app.app, cfg, host, int(port), rest_api)
        except OSError as exc:
            print(f"cannot serve the API on {host}:{port}: {exc}", file=sys.stderr)
            return 1
        url = f"http://{host}:{server.server.server_port}"
        os.environ["MOONSEND_API_URL"] = url  # links in its answers point here
        ready.write(url + "\n")
    server.server.serve_forever()
    return 0


def main(argv: list[str]) -> int:
    if argv[0] == "--api":
        return serve_api(*argv[1:])
    spec, reply_fd, function_name, memory_mb, region, account = argv
    answers = _Answers(os.fdopen(int(reply_fd), "w", encoding="utf-8"))
    handler = load(spec)

    def context(timeout_s: float, hurry: threading.Event) -> LambdaContext:
        return LambdaContext(function_name, timeout_s, int(memory_mb), region, account, hurry)

    serve(handler, answers, context)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
