"""The webhook client against receivers on real sockets (loopback): a receiver that drips its answer or never
finishes the TLS handshake is cut off at the request's deadline, whatever the socket timeouts say."""

from __future__ import annotations

import socket
import threading
import time

from chalicelib.webhooks import client
from chalicelib.webhooks.url_policy import Target


class _Listener:
    """A TCP server on loopback whose `_serve` runs in a thread of its own."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        raise NotImplementedError


class _DripServer(_Listener):
    """Answers a request one byte every half second, for ever: each read is within any timeout."""

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        conn.recv(65536)
        try:
            for byte in b"HTTP/1.1 200 OK\r\n" + b"x-drip: " + b"a" * 10000:
                conn.send(bytes([byte]))
                time.sleep(0.5)
        except OSError:
            pass


def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_deadline():
    server = _DripServer()
    target = Target("http", "127.0.0.1", server.port, "/", ("127.0.0.1",))
    started = time.monotonic()
    answer = client.post(target, {}, "{}", timeout_s=1.0, deadline_s=2.0)
    took = time.monotonic() - started
    assert answer.status is None and answer.error == "TimeoutError"
    assert took < 10  # each byte came within the read timeout: only the deadline ends it


class _SilentTls(_Listener):
    """Takes the TCP connection and never answers the TLS handshake."""

    def __init__(self) -> None:
        self.held: list[socket.socket] = []
        super().__init__()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)  # read nothing, answer nothing


def test_a_receiver_that_never_finishes_the_tls_handshake_is_cut_off_at_the_deadline():
    server = _SilentTls()
    target = Target("https", "localhost", server.port, "/", ("127.0.0.1",))
    started = time.monotonic()
    answer = client.post(target, {}, "{}", timeout_s=30.0, deadline_s=1.0)
    took = time.monotonic() - started
    assert answer.status is None and answer.error == "TimeoutError"
    assert took < 15  # not the 30 s read timeout: the deadline cut the handshake
