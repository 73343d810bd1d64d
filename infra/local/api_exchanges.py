"""Emulator: API Gateway's execution logs with full request and response data, for the API's function.

Off until a test turns it on (`start`), as a stage's data tracing is: then each exchange the API's function
answers is kept, its request (method, route, path, query, headers, body) and its response (status, headers,
body) as they go over the wire, until `stop` hands them over. tests/e2e/conftest.py checks each against
the OpenAPI document (chalicelib/control/openapi.json). The app the local server's request handlers call
is wrapped, nothing is patched: only the API's requests pass through the recorder.
"""

from __future__ import annotations

import base64
import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What API Gateway (and the local server) says of a response that names no Content-Type.
DEFAULT_CONTENT_TYPE = "application/json"


@dataclass(frozen=True)
class Exchange:
    method: str
    route: str  # the route's template: `/campaigns/{campaign_id}/report`
    path: str  # as asked: `/campaigns/spring/report`
    path_parameters: dict[str, str]
    query: dict[str, list[str]]
    request_headers: dict[str, str]  # names lower-cased
    request_body: bytes | None
    status: int
    response_headers: dict[str, str]  # names as the app gave them, Content-Type always there
    response_body: bytes

    @property
    def content_type(self) -> str:
        return self.response_headers.get("Content-Type", DEFAULT_CONTENT_TYPE)

    def __str__(self) -> str:
        return f"{self.method} {self.route} ({self.path}) -> {self.status}"


def _body(value: str | bytes | None, base64_encoded: bool) -> bytes | None:
    if value is None:
        return None
    if base64_encoded:
        return base64.b64decode(value)
    return value.encode("utf-8") if isinstance(value, str) else value


def exchange_of(event: Mapping[str, Any], response: Mapping[str, Any]) -> Exchange:
    """The exchange a Lambda proxy event and its function's answer make."""
    context = event["requestContext"]
    headers = {name: str(value) for name, value in (response.get("headers") or {}).items()}
    for name, values in (response.get("multiValueHeaders") or {}).items():
        headers[name] = ", ".join(map(str, values))
    headers.setdefault("Content-Type", DEFAULT_CONTENT_TYPE)
    return Exchange(
        method=context["httpMethod"],
        route=context["resourcePath"],
        path=context["path"],
        path_parameters=dict(event.get("pathParameters") or {}),
        query={k: list(v) for k, v in (event.get("multiValueQueryStringParameters") or {}).items()},
        request_headers=dict(event.get("headers") or {}),
        request_body=_body(event.get("body"), bool(event.get("isBase64Encoded"))),
        status=int(response["statusCode"]),
        response_headers=headers,
        response_body=_body(response.get("body"), bool(response.get("isBase64Encoded"))) or b"",
    )


class ApiExchanges:
    """The recorder: `install` it on the local server, then `start` and `stop` around what to check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recording = False
        self._taken: list[Exchange] = []

    def install(self, server: Any) -> None:
        """Record what `server` (chalice.local's LocalDevServer, already made: it makes the app its own
        LocalChalice, whose current request is per thread) hands its app: each request's handler is given
        the app wrapped."""
        handler = server.server.RequestHandlerClass  # functools.partial(handler, app_object=..., config=...)
        app = _RecordedApp(handler.keywords["app_object"], self)
        server.server.RequestHandlerClass = functools.partial(
            handler.func, *handler.args, **{**handler.keywords, "app_object": app}
        )

    def start(self) -> None:
        with self._lock:
            self._recording, self._taken = True, []

    def stop(self) -> list[Exchange]:
        """The exchanges since `start`, in the order they were answered; recording stops."""
        with self._lock:
            taken, self._recording, self._taken = self._taken, False, []
        return taken

    def taken(self) -> list[Exchange]:
        """The exchanges so far, recording going on."""
        with self._lock:
            return list(self._taken)

    def record(self, event: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        if not self._recording:
            return
        exchange = exchange_of(event, response)
        with self._lock:
            if self._recording:
                self._taken.append(exchange)


class _RecordedApp:
    """The Chalice app as the local server sees it (its routes, its API settings), each call recorded."""

    def __init__(self, app: Any, recorder: ApiExchanges) -> None:
        self._app = app
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        return getattr(self._app, name)

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        response: dict[str, Any] = self._app(event, context)
        self._recorder.record(event, response)
        return response
