"""The webhook client against receivers on real sockets (loopback): a receiver that drips its answer or never
finishes the TLS handshake is cut off at the request's deadline, whatever the socket timeouts say."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

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

    def _connections(self) -> Iterator[socket.socket]:
        """Each connection made to it, until its socket is closed."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            yield conn


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
        for conn in self._connections():
            self.held.append(conn)  # read nothing, answer nothing


def test_a_receiver_that_never_finishes_the_tls_handshake_is_cut_off_at_the_deadline():
    server = _SilentTls()
    target = Target("https", "localhost", server.port, "/", ("127.0.0.1",))
    started = time.monotonic()
    answer = client.post(target, {}, "{}", timeout_s=30.0, deadline_s=1.0)
    took = time.monotonic() - started
    assert answer.status is None and answer.error == "TimeoutError"
    assert took < 15  # not the 30 s read timeout: the deadline cut the handshake


class _Answering(_Listener):
    """Answers each request with `head` then `body_bytes` of body, counting the requests it got."""

    def __init__(self, head: bytes, body_bytes: int = 0) -> None:
        self.head, self.body_bytes, self.requests = head, body_bytes, 0
        self.sent = 0
        super().__init__()

    def _serve(self) -> None:
        for conn in self._connections():
            self.requests += 1
            conn.recv(65536)
            try:
                conn.sendall(self.head)
                chunk = b"x" * 65536
                while self.sent < self.body_bytes:
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                pass
            finally:
                conn.close()


def test_a_redirect_is_not_followed_to_its_own_host_or_another_and_counts_as_not_delivered():
    elsewhere = _Answering(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    for location in (f"http://127.0.0.1:{elsewhere.port}/", "/again"):  # another host, a loop to itself
        server = _Answering(f"HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n".encode())
        answer = client.post(Target("http", "127.0.0.1", server.port, "/", ("127.0.0.1",)), {}, "{}")
        assert answer.status == 302 and server.requests == 1
    assert elsewhere.requests == 0  # the URL policy checked one address: a redirect never reaches another


def test_a_huge_answer_is_read_up_to_64_kb_and_dropped_the_client_holds_no_more():
    import tracemalloc

    server = _Answering(b"HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n", body_bytes=1 << 30)
    tracemalloc.start()
    try:
        started = time.monotonic()
        answer = client.post(Target("http", "127.0.0.1", server.port, "/", ("127.0.0.1",)), {}, "{}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer.status == 200 and time.monotonic() - started < 5
    assert peak < 2 * 1024 * 1024, peak  # a gigabyte offered, a few hundred KB held at most
    assert server.sent < 64 * 1024 * 1024  # the connection closed: the receiver stopped sending


def test_the_answers_start_is_kept_as_text_at_most_1_kb_whatever_its_bytes():
    body = "Rejected: signature mismatch ✗ ".encode() + b"\xff\xfe" + b"x" * 5000
    head = f"HTTP/1.1 400 Bad Request\r\ncontent-length: {len(body)}\r\n\r\n".encode()
    server = _Answering(head + body)
    answer = client.post(Target("http", "127.0.0.1", server.port, "/", ("127.0.0.1",)), {}, "{}")
    assert answer.status == 400 and answer.excerpt.startswith("Rejected: signature mismatch ✗ \ufffd\ufffd")
    assert len(answer.excerpt.encode("utf-8")) <= client.EXCERPT_BYTES + 6  # two replaced bytes grow by 2 each
