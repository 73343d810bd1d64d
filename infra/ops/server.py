"""The operator's page served on loopback (IPv4's 127.0.0.1 only), one thread per request."""

from __future__ import annotations

import threading
import time
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

OPS_PORT = 8025  # the page's port unless told (`--port`, `--ops-port`)
OPS_PAGE_SAYS = "operator's page:"  # how `moonsend ops` starts the line with its link


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per request: the link's key is in the sign-in request's path."""


def start_beside(endpoint: str, port: int, wait_s: float = 60.0) -> Any:
    """`moonsend ops --stage local` beside a local stack (`moonsend up`, `moonsend demo --keep`), in a process of
    its own as an operator's shell runs it, its link printed; it ends when this process does (its stdin
    closes). None, said, when it has not printed its link within `wait_s` (its port taken, a crash): the
    stack goes on without it. Whatever else it prints is passed on, line by line, as it comes."""
    import queue
    import subprocess
    import sys

    command = [sys.executable, "-u", "-m", "infra", "ops", "--stage", "local", "--endpoint", endpoint]
    command += ["--port", str(port), "--until-stdin-closes"]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    proc = subprocess.Popen(command, text=True, **pipes)  # type: ignore[call-overload]
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:  # always drained: a full pipe would stop the page
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True, name="ops-page-output").start()
    said: list[str] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        if line.startswith(OPS_PAGE_SAYS):
            print(f"  {line.strip()}", flush=True)
            threading.Thread(target=_pass_on, args=(lines,), daemon=True).start()
            return proc
        said.append(line)
    proc.kill()
    proc.wait()
    print(f"  the operator's page did not start: {''.join(said[-20:]).strip() or 'no word from it'}", flush=True)
    return None


def _pass_on(lines: Any) -> None:
    while (line := lines.get()) is not None:
        print(line, end="", flush=True)


def serve(app: Any, port: int) -> tuple[WSGIServer, threading.Thread]:
    """Start serving `app` at 127.0.0.1:`port` (0: any free port; the server says which) in a thread."""
    server = make_server("127.0.0.1", port, app, server_class=_Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="ops-page")
    thread.start()
    return server, thread
