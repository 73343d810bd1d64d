"""Accelerator: AWS calls made in the local stack's process go to its endpoint's app directly, not over loopback.

On AWS each function's calls cross the network to AWS. Here the functions run in the process that serves
the endpoint, and a call over loopback paid for a second HTTP exchange nothing of ours is about: the
client's socket writes and reads, http.server parsing the request on a server thread, the server's writes,
and the GIL handed between the two threads on every step. A soak's profile had about a third of the local
stack's CPU there.

`install` routes every botocore request of this process whose URL is a local endpoint's straight into
that endpoint's WSGI app (the gateway, with its access control, moto and the stand-ins), on the calling
thread. Everything botocore does around the wire is unchanged: parameters are validated and serialised,
the request is signed with the calling function's role, retried, and the answer parsed from the bytes
the app wrote. The app runs in an empty context, as on a server thread: the caller's role and any fault
attached to its invocation do not follow the request into the endpoint.

Outside processes (the CLI, a producer, the soak's driver) still call over loopback; within this process,
calls made inside `over_network()` do too (the tests of the HTTP server itself), and
`StackConfig(direct_calls=False)` sends all of them that way.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import botocore.endpoint
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from urllib3 import HTTPResponse
from urllib3._collections import HTTPHeaderDict

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Any]

_apps: dict[str, Wsgi] = {}  # "host:port" of a local endpoint -> its app
_lock = threading.Lock()
_real_send: Callable[..., Any] | None = None
_network: contextvars.ContextVar[bool] = contextvars.ContextVar("moonsend_over_network", default=False)


@contextlib.contextmanager
def over_network() -> Iterator[None]:
    """Calls made in this block (in this context) go over loopback like another process's."""
    token = _network.set(True)
    try:
        yield
    finally:
        _network.reset(token)


def install(endpoint_url: str, app: Wsgi) -> Callable[[], None]:
    """Send this process's requests for `endpoint_url` to `app`; returns undo."""
    netloc = urlsplit(endpoint_url).netloc
    global _real_send
    with _lock:
        _apps[netloc] = app
        if _real_send is None:
            _real_send = botocore.endpoint.Endpoint._send
            botocore.endpoint.Endpoint._send = _send  # type: ignore[method-assign]

    def undo() -> None:
        global _real_send
        with _lock:
            _apps.pop(netloc, None)
            if not _apps and _real_send is not None:
                botocore.endpoint.Endpoint._send = _real_send  # type: ignore[method-assign]
                _real_send = None

    return undo


def _send(endpoint: botocore.endpoint.Endpoint, request: AWSPreparedRequest) -> AWSResponse:
    parts = urlsplit(request.url)
    app = _apps.get(parts.netloc)
    if app is None or parts.scheme != "http" or _network.get():
        assert _real_send is not None
        return _real_send(endpoint, request)
    # A fresh context: the endpoint's work is not the caller's invocation (its role, its faults).
    return contextvars.Context().run(_call, app, request, parts)


def _body_of(request: AWSPreparedRequest) -> bytes:
    body = request.body
    if body is None:
        return b""
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    return body.read()  # a stream (an upload): read whole, as the server would


def _environ(request: AWSPreparedRequest, parts: Any, body: bytes) -> dict[str, Any]:
    host, _, port = parts.netloc.partition(":")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote(parts.path) or "/",
        "RAW_URI": parts.path + (f"?{parts.query}" if parts.query else ""),
        "QUERY_STRING": parts.query,
        "SERVER_NAME": host,
        "SERVER_PORT": port or "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "CONTENT_LENGTH": str(len(body)),
    }
    for name, value in request.headers.items():
        key = name.upper().replace("-", "_")
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if key == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = value
        elif key != "CONTENT_LENGTH":
            environ[f"HTTP_{key}"] = value
    environ.setdefault("HTTP_HOST", parts.netloc)
    return environ


def _call(app: Wsgi, request: AWSPreparedRequest, parts: Any) -> AWSResponse:
    body = _body_of(request)
    environ = _environ(request, parts, body)
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        answer["status"] = int(status.split(" ", 1)[0])
        answer["headers"] = headers
        return lambda _data: None  # the legacy write(): nothing of ours uses it

    try:
        chunks = app(environ, start_response)
        try:
            data = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
    except Exception:
        # What the HTTP server does with an app that raised: the traceback on stderr, a 500 to the client
        # (which botocore retries), not the endpoint's exception raised in the function that called it.
        traceback.print_exc()
        answer["status"], answer["headers"] = 500, [("Content-Type", "text/plain")]
        data = b"Internal Server Error"
    headers = HTTPHeaderDict()
    for name, value in answer["headers"]:
        headers.add(name, value)
    raw = HTTPResponse(
        body=io.BytesIO(data),
        headers=headers,
        status=answer["status"],
        preload_content=False,
        decode_content=False,
        # A HEAD's answer has its object's Content-Length and no body (S3's HeadObject), as HTTP has it.
        request_method=request.method,
    )
    response = AWSResponse(request.url, answer["status"], headers, raw)
    if not request.stream_output:
        response.content  # noqa: B018 - read now, as botocore's own session does
    return response
