"""Emulator: API Gateway in front of the API's function, routing and answering as the template's REST API.

`chalice local` routes by the app itself: a path no route has gets its 403 "Missing Authentication Token"
(API Gateway's answer before the template gave it another), a method http.server has no `do_` for (TRACE)
its 501 HTML page, and OPTIONS an answer made up for CORS. Here the routes are the packaged template's
Swagger body (the stood-in `AWS::ApiGateway::RestApi`'s `Body`), as on AWS:

- a path the body has goes to the API's function, by its method's operation or the path's any-method one
  (infra/api_gateway.py: every other method, TRACE and OPTIONS among them, so the app answers 405);
- a path it does not have is answered with the MISSING_AUTHENTICATION_TOKEN gateway response, a body over
  API Gateway's 10 MB with REQUEST_TOO_LARGE (read and dropped), a body over Lambda's 6 MB with DEFAULT_5XX
  (Lambda refuses the invocation), a request that cannot be framed (a Content-Length that is no number, a
  chunk whose size is none) with DEFAULT_4XX (a chunked body is read, as API Gateway reads it), and a
  function slower than its 29 s with INTEGRATION_TIMEOUT (the function still runs to its end, as it does on
  AWS), each as the template writes it, or as API Gateway answers when it writes none;
- a HEAD is answered with the headers and no body, as API Gateway answers it.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from chalice.local import (
    ChaliceRequestHandler,
    LambdaEventConverter,
    LocalDevServer,
    LocalGateway,
    LocalGatewayException,
    RouteMatcher,
    create_local_server,
)

from infra.api_gateway import ANY_METHOD, GATEWAY_RESPONSES, HTTP_METHODS, INTEGRATION_TIMEOUT_S, MAX_BODY_BYTES
from infra.local import api_paths

# API Gateway's own answer to each type this emulator meets, where the template gives it none.
AWS_DEFAULTS = {
    "MISSING_AUTHENTICATION_TOKEN": (403, "Missing Authentication Token"),
    "REQUEST_TOO_LARGE": (413, "Request Too Long"),
    "INTEGRATION_TIMEOUT": (504, "Endpoint request timed out"),
    "DEFAULT_4XX": (400, "Bad Request"),
    "DEFAULT_5XX": (500, "Internal server error"),
}
# Lambda's request payload (its quotas page): a body past it never reaches the API's function.
LAMBDA_PAYLOAD_BYTES = 6 * 1024 * 1024
# The worker process serving the API is handed the REST API in its environment, as JSON.
GATEWAY_VARIABLE = "MOONSEND_LOCAL_REST_API"
_HEADER = re.compile(r"^gatewayresponse\.header\.([A-Za-z0-9-]+)$")
_CONTEXT = re.compile(r"\$context\.[A-Za-z.]+")


class GatewayTemplateError(Exception):
    """The template asks for what this emulator does not do (a mapping it cannot evaluate)."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class RestApi:
    """The REST API as the template has it: the methods of each path, and its gateway responses."""

    paths: dict[str, frozenset[str]]  # Swagger path -> its methods, upper-case; ANY for the any-method one
    responses: dict[str, dict[str, Any]]
    integration_timeout_s: float = INTEGRATION_TIMEOUT_S
    minimum_compression: int | None = None  # MinimumCompressionSize; None: never compressed

    @classmethod
    def of(cls, body: dict[str, Any], minimum_compression: int | None = None) -> RestApi:
        """From the RestApi's Swagger body and its MinimumCompressionSize."""
        paths = {
            path: frozenset(
                "ANY" if m == ANY_METHOD else m.upper() for m in ops if m == ANY_METHOD or m in HTTP_METHODS
            )
            for path, ops in body.get("paths", {}).items()
        }
        compression = int(minimum_compression) if minimum_compression is not None else None
        return cls(paths, body.get(GATEWAY_RESPONSES, {}), minimum_compression=compression)

    def to_json(self) -> str:
        paths = {p: sorted(ms) for p, ms in self.paths.items()}
        return json.dumps({"paths": paths, "responses": self.responses, "compression": self.minimum_compression})

    @classmethod
    def from_json(cls, text: str) -> RestApi:
        given = json.loads(text)
        paths = {p: frozenset(ms) for p, ms in given["paths"].items()}
        return cls(paths, given["responses"], minimum_compression=given.get("compression"))

    def compresses(self, accept_encoding: str | None, headers: dict[str, Any], size: int) -> bool:
        """Whether API Gateway gzips this answer: compression is on, the client names gzip (at a q above 0; a
        bare `*` is not gzip), the body is at least MinimumCompressionSize bytes, and the function did not
        encode it already."""
        if self.minimum_compression is None or size < self.minimum_compression:
            return False
        if any(k.lower() == "content-encoding" for k in headers):
            return False
        return _gzip_weight(accept_encoding) > 0

    def routes(self, method: str, path: str) -> bool:
        """Whether API Gateway hands `method path` to the function (else: no such resource or method)."""
        try:
            resource = RouteMatcher(list(self.paths)).match_route(path).route
        except ValueError:
            return False
        methods = self.paths[resource]
        return method.upper() in methods or "ANY" in methods

    def answer(self, kind: str, request_id: str) -> Answer:
        """The gateway response of `kind`: the template's, else its DEFAULT_4XX or DEFAULT_5XX, else AWS's."""
        default_status, message = AWS_DEFAULTS[kind]
        fallback = "DEFAULT_4XX" if default_status < 500 else "DEFAULT_5XX"
        given = self.responses.get(kind) or self.responses.get(fallback)
        if given is None:
            return Answer(default_status, _aws_headers(request_id), json.dumps({"message": message}).encode())
        status = int(given.get("statusCode") or default_status)
        headers = _aws_headers(request_id)
        for name, value in given.get("responseParameters", {}).items():
            headers[_header_name(name)] = _literal(name, value)
        template = given.get("responseTemplates", {}).get("application/json")
        if template is None:
            body = json.dumps({"message": message})
        else:
            body = _render(template, {"requestId": request_id, "error.responseType": kind, "error.message": message})
        return Answer(status, headers, body.encode("utf-8"))


def _gzip_weight(accept_encoding: str | None) -> float:
    """gzip's q in an Accept-Encoding header (RFC 9110 12.5.3); 0 when it is not named."""
    weight = 0.0
    for coding in (accept_encoding or "").split(","):
        name, *params = (part.strip() for part in coding.split(";"))
        if name.lower() != "gzip":
            continue
        weight = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
    return weight


def _aws_headers(request_id: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "x-amzn-RequestId": request_id}


def _header_name(parameter: str) -> str:
    found = _HEADER.match(parameter)
    if found is None:
        raise GatewayTemplateError(f"{parameter}: the emulator maps gateway response headers only")
    return found.group(1)


def _literal(name: str, value: str) -> str:
    if len(value) < 2 or value[0] != "'" or value[-1] != "'":
        raise GatewayTemplateError(f"{name}: the emulator maps literal values ('...') only, not {value}")
    return value[1:-1]


def _render(template: str, context: dict[str, str]) -> str:
    """A gateway response's template with its `$context` variables put in; any other VTL is refused."""

    def put(found: re.Match[str]) -> str:
        name = found.group(0).removeprefix("$context.")
        if name not in context:
            raise GatewayTemplateError(f"{found.group(0)}: not a variable the emulator puts in")
        return context[name]

    left = _CONTEXT.sub("", template)
    if "$" in left or "#" in left:
        raise GatewayTemplateError(f"the emulator renders $context variables only: {template[:80]}")
    return _CONTEXT.sub(put, template)


_SIGN_IN_LINK = re.compile(r"(/console/link/)[^ ?]+")


class _ApiGatewayEvents(LambdaEventConverter):
    """chalice local's events, with the `requestContext.domainName` API Gateway gives: the domain the request
    came in on, whatever Host header the client sent (the console's emailed links are made with it)."""

    DOMAIN_NAME = "127.0.0.1"

    def create_lambda_event(self, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> Any:
        event = super().create_lambda_event(method, path, headers, body)
        event["requestContext"]["domainName"] = self.DOMAIN_NAME
        return event


class _EveryMethodToTheFunction(LocalGateway):
    """chalice local's gateway, but an OPTIONS no route has goes to the function too (API Gateway has no CORS
    of its own here: the path's any-method operation takes it)."""

    def __init__(self, app_object: Any, config: Any) -> None:
        super().__init__(app_object, config)
        self.events = _ApiGatewayEvents(RouteMatcher(list(app_object.routes)), app_object.api.binary_types)
        self.event_converter = self.events

    def _has_user_defined_options_method(self, lambda_event: Any) -> bool:
        return True


class _GatewayHandler(ChaliceRequestHandler):
    def __init__(
        self, request: Any, client_address: Any, server: Any, app_object: Any, config: Any, rest_api: RestApi
    ) -> None:
        self.rest_api = rest_api
        self.api_gateway = _EveryMethodToTheFunction(app_object, config)
        self.local_gateway = self.api_gateway
        # The request is handled inside the base class's constructor: everything it uses is set above.
        BaseHTTPRequestHandler.__init__(self, request, client_address, server)

    def log_message(self, format: str, *args: Any) -> None:
        """http.server's line per request, with a sign-in link's token cut out: the terminal is no place for
        a way in (the demo's links last hours)."""
        super().log_message(format, *(_SIGN_IN_LINK.sub(r"\1…", a) if isinstance(a, str) else a for a in args))

    def __getattr__(self, name: str) -> Any:
        # http.server looks up `do_<METHOD>`: every method reaches the gateway, none gets http.server's 501 page.
        if name.startswith("do_"):
            return self._through_the_gateway
        raise AttributeError(name)

    def _through_the_gateway(self) -> None:
        request_id = str(uuid.uuid4())
        try:
            length, body = self._body()
        except ValueError:  # a length that is no number, a chunk size that is none: the request cannot be framed
            self.close_connection = True
            self._send_answer(self.rest_api.answer("DEFAULT_4XX", request_id), closing=True)
            return
        if length > MAX_BODY_BYTES:
            self._send_answer(self.rest_api.answer("REQUEST_TOO_LARGE", request_id))
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
        if not self.rest_api.routes(self.command, self.path):
            self._send_answer(self.rest_api.answer("MISSING_AUTHENTICATION_TOKEN", request_id))
            return
        if length > LAMBDA_PAYLOAD_BYTES:  # Lambda refuses the invocation; API Gateway answers its 5XX
            self._send_answer(self.rest_api.answer("DEFAULT_5XX", request_id))
            return
        started = time.monotonic()
        # API Gateway's sourceIp is the client's address (chalice local's is always 127.0.0.1).
        self.local_gateway.event_converter.LOCAL_SOURCE_IP = self.client_address[0]
        host, port = self.server.server_address[:2]
        self.api_gateway.events.DOMAIN_NAME = f"{host}:{port}"
        try:
            response = self.local_gateway.handle_request(self.command, self.path, headers, body)
        except LocalGatewayException as refused:  # the app has no route the template has: chalice local's 403
            self._send_error_response(refused)
            return
        if time.monotonic() - started > self.rest_api.integration_timeout_s:
            self._send_answer(self.rest_api.answer("INTEGRATION_TIMEOUT", request_id))
            return
        out = {**response["headers"], **response["multiValueHeaders"]}
        body = self._handle_binary(response)["body"]
        self._send(response["statusCode"], out, body)

    def _body(self) -> tuple[int, bytes | None]:
        """The request's length and body (None past MAX_BODY_BYTES: read and dropped, so that a client still
        sending can read the answer), whether framed by Content-Length or chunked; ValueError if neither."""
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            return self._chunked()
        given = self.headers.get("content-length") or "0"
        if not (given.isascii() and given.isdigit()):
            raise ValueError(given)
        length = int(given)
        if length > MAX_BODY_BYTES:
            self._discard(length)
            return length, None
        return length, self.rfile.read(length) if length else None

    def _chunked(self) -> tuple[int, bytes | None]:
        parts, length = [], 0
        while True:
            size = int(self.rfile.readline(66).split(b";")[0].strip() or b"x", 16)  # ValueError: not a size
            if size == 0:
                break
            length += size
            if length > MAX_BODY_BYTES:
                self._discard(size)
            else:
                parts.append(self.rfile.read(size))
            self.rfile.readline(3)  # the chunk's CRLF
        while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return length, (b"".join(parts) or None) if length <= MAX_BODY_BYTES else None

    def _discard(self, length: int) -> None:
        while length > 0:
            chunk = self.rfile.read(min(length, 1 << 20))
            if not chunk:
                break
            length -= len(chunk)

    def _send_answer(self, answer: Answer, closing: bool = False) -> None:
        self._send(answer.status, {**answer.headers, **({"Connection": "close"} if closing else {})}, answer.body)

    def _send(self, status: int, headers: dict[str, Any], body: str | bytes | None) -> None:
        data = body.encode("utf-8") if isinstance(body, str) else body
        if data and self.rest_api.compresses(self.headers.get("accept-encoding"), headers, len(data)):
            body, headers = gzip.compress(data), {**headers, "Content-Encoding": "gzip"}
        if self.command != "HEAD":
            self._send_http_response(status, headers, body)
            return
        # The headers a GET would have, its length among them, and no body: API Gateway drops it.
        data = body.encode("utf-8") if isinstance(body, str) else body or b""
        self.send_response(status)
        self._send_headers({"Content-Type": "application/json", **headers, "Content-Length": str(len(data))})

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = _through_the_gateway


def serve(app: Any, config: Any, host: str, port: int, rest_api: RestApi) -> LocalDevServer:
    """chalice local's server for `app` on `host:port` (bound, not yet serving), behind `rest_api`."""
    server = create_local_server(app, config, host, port)
    server.server.RequestHandlerClass = functools.partial(
        _GatewayHandler, app_object=server.app_object, config=config, rest_api=rest_api
    )
    api_paths.install(server)  # API Gateway decodes path parameters before the function sees them
    return server
