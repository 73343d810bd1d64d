"""Accelerator: HTTP keep-alive for the local endpoint, so that each AWS call does not open a connection.

werkzeug's development server answers every request with `Connection: close`: Python's http.server
cannot tell where a request body it did not read ends, so the next request line would be lost. Every
AWS call of the local stack therefore opened a connection, and the server started a thread for it; a
soak's profile had about 15% of the CPU there (connect, thread start, close), for nothing that AWS does.

`KeepAliveHandler` keeps the connection open for requests whose body has a Content-Length: the app reads
the body through a stream limited to that length, the rest of it is drained after the response, so the
next request starts where the next request line does. werkzeug's own drain after each response (which
reads whatever the socket holds, meant for a body the app refused) would read and discard the client's
next request on a kept connection, so `install()` turns it off in this process. Requests with a chunked
body still close their connection, as before.
"""

from __future__ import annotations

import selectors
import socket
from typing import Any

from moto.moto_server.werkzeug_app import MotoRequestHandler
from werkzeug import serving
from werkzeug.wsgi import LimitedStream


class KeepAliveHandler(MotoRequestHandler):
    _body: LimitedStream | None = None

    def setup(self) -> None:
        super().setup()
        # A response goes out in several small writes (status and headers, then the body): on a kept
        # connection Nagle's algorithm holds each one back for the client's delayed ACK, ~40 ms a request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def make_environ(self) -> dict[str, Any]:
        environ = super().make_environ()
        if environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked":
            self._body = None  # where it ends is werkzeug's to find: this connection closes
            return environ
        try:
            length = max(0, int(environ.get("CONTENT_LENGTH") or 0))
        except ValueError:
            self._body = None
            return environ
        self._body = LimitedStream(self.rfile, length)
        environ["wsgi.input"] = self._body
        environ["wsgi.input_terminated"] = True  # werkzeug must not wrap it in a stream of its own
        return environ

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "connection" and value.lower() == "close" and self._body is not None:
            return  # the body is accounted for: keep the connection for the client's next request
        super().send_header(keyword, value)

    def run_wsgi(self) -> None:
        self._body = None
        super().run_wsgi()
        body, self._body = self._body, None
        if body is None:
            self.close_connection = True
        else:
            body.exhaust()  # what the app did not read, so that the next request line comes next


class _NoDrainSelector:
    """What werkzeug's post-response drain gets instead of a selector: nothing is ever readable."""

    def register(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    def select(self, timeout: float | None = None) -> list[Any]:
        return []

    def close(self) -> None:
        return None


class _Selectors:
    DefaultSelector = _NoDrainSelector
    EVENT_READ = selectors.EVENT_READ


# Connections the endpoint's listening socket queues before accepting them (werkzeug: 128). A burst of
# precompiles (a 100,000-recipient soak) connected faster than the CPU-starved accept loop took them,
# and their calls failed with "connection refused" or "reset by peer".
LISTEN_BACKLOG = 1024


def install() -> None:
    """Turn off werkzeug's post-response drain, and lengthen its listen queue, in this process
    (idempotent; the local stack only)."""
    serving.selectors = _Selectors  # type: ignore[assignment]
    serving.BaseWSGIServer.request_queue_size = max(serving.BaseWSGIServer.request_queue_size, LISTEN_BACKLOG)
