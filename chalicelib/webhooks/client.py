"""One webhook request: to the addresses the URL policy checked, never to what DNS says a moment later.

http.client resolves the host itself when it connects; here the connection is made to an address checked
by chalicelib.webhooks.url_policy (the first that answers), and TLS is verified against the host's name
as usual (SNI and the certificate check use the name, not the address).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import TypeVar

from chalicelib.webhooks.url_policy import Target

_Socket = TypeVar("_Socket", bound=socket.socket)  # a plain socket, or the TLS socket wrapping it

TIMEOUT_S = 10.0
# The whole request, however it is spent: a receiver that drips its answer a byte at a time, each within
# TIMEOUT_S, is cut off here (the socket is shut, which ends a read in progress).
DEADLINE_S = 15.0
# Addresses tried, each with its own timeout: a name with many silent ones must not hold the caller.
MAX_ADDRESSES = 2
USER_AGENT = "moonsend-webhooks/1"
EXCERPT_BYTES = 1024


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no HTTP answer (refused, timed out, TLS failed)
    error: str | None
    took_ms: int
    excerpt: str = ""  # the answer's body up to EXCERPT_BYTES, as text (a test shows it to the tenant)


class _Deadline:
    """The part of a pinned connection the watchdog reaches: its socket as soon as it exists, the TLS one
    before its handshake (so a handshake in progress is cut too), and whether the deadline passed (a socket
    made after it is not used)."""

    def __init__(self) -> None:
        self.raw: socket.socket | None = None
        self.passed = False
        self.lock = threading.Lock()

    def adopt(self, sock: _Socket) -> _Socket:
        with self.lock:
            self.raw = sock
            if self.passed:
                sock.close()
                raise TimeoutError("the request's deadline passed")
        return sock

    def cut(self) -> None:
        with self.lock:
            self.passed = True
            if self.raw is not None:
                with contextlib.suppress(OSError):
                    self.raw.shutdown(socket.SHUT_RDWR)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float, deadline: _Deadline) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address
        self._deadline = deadline

    def connect(self) -> None:
        sock = self._deadline.adopt(socket.create_connection((self._address, self.port), self.timeout))
        context: ssl.SSLContext = self._context  # type: ignore[attr-defined]
        tls = self._deadline.adopt(context.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False))
        tls.do_handshake()
        self.sock = tls


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float, deadline: _Deadline) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._deadline = deadline

    def connect(self) -> None:
        self.sock = self._deadline.adopt(socket.create_connection((self._address, self.port), self.timeout))


def post(
    target: Target, headers: dict[str, str], body: str, timeout_s: float = TIMEOUT_S, deadline_s: float = DEADLINE_S
) -> Answer:
    """POST `body` to the target; its status, or why there was none. The answer's body is read up to 64 KB
    (a receiver that answers forever does not hold up deliver_webhooks), and its start kept as text."""
    started = time.monotonic()
    error = "no address"
    for address in target.addresses[:MAX_ADDRESSES]:
        left = deadline_s - (time.monotonic() - started)
        if left <= 0:
            error = "TimeoutError"
            break
        kind = _PinnedHTTPS if target.scheme == "https" else _PinnedHTTP
        deadline = _Deadline()
        conn = kind(target.host, target.port, address, min(timeout_s, left), deadline)
        watchdog = threading.Timer(left, deadline.cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.request("POST", target.path, body=body.encode("utf-8"), headers={**headers, "user-agent": USER_AGENT})
            response = conn.getresponse()
            said = response.read(65536)
            took = int((time.monotonic() - started) * 1000)
            return Answer(response.status, None, took, said[:EXCERPT_BYTES].decode("utf-8", "replace"))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            # The kind of failure only: the peer's words (a banner where a status line was due) stay with it.
            error = type(exc).__name__
            if time.monotonic() - started >= deadline_s:
                error = "TimeoutError"  # cut off by the deadline, whatever the read raised then
        finally:
            watchdog.cancel()
            conn.close()
    return Answer(None, error, int((time.monotonic() - started) * 1000))
