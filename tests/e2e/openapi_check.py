"""An API exchange checked against the OpenAPI document with openapi-core (tests/e2e/conftest.py)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable

from openapi_core import Config, OpenAPI
from openapi_core.exceptions import OpenAPIError
from openapi_core.testing import MockRequest, MockResponse

from chalicelib.control import openapi
from infra.local.api_exchanges import Exchange

HOST = "http://localhost"


@functools.cache
def document() -> OpenAPI:
    # openapi-core reads only some JSON media types as JSON: the problems' is told here.
    config = Config(extra_media_type_deserializers={"application/problem+json": json.loads})
    return OpenAPI.from_dict(json.loads(openapi.document()), config=config)


def _request(x: Exchange) -> MockRequest:
    return MockRequest(
        HOST,
        x.method,
        x.path,
        path_pattern=x.route,
        args=x.query,
        view_args=x.path_parameters,
        headers=x.request_headers,
        data=x.request_body,
        content_type=x.request_headers.get("content-type", ""),
    )


def _response(x: Exchange) -> MockResponse:
    return MockResponse(x.response_body, x.status, x.response_headers, x.content_type)


def _why(exc: BaseException) -> str:
    """The error and the causes openapi-core chains to it (a schema's own errors are the useful part)."""
    parts, seen = [], set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        parts.append(f"{type(e).__name__}: {e}")
        parts += [
            f"  {s.message} at {'/'.join(map(str, s.absolute_path)) or '(body)'}"
            for s in getattr(e, "schema_errors", ())
        ]
        e = e.__cause__ or e.__context__
    return "\n    ".join(parts)


def check(x: Exchange) -> str | None:
    """What is wrong with the exchange by the document, or None."""
    spec = document()
    request = _request(x)
    try:
        spec.validate_request(request)
        request_error = None
    except (OpenAPIError, RecursionError) as exc:  # JSON nested past what the parser reads: not the document's
        request_error = _why(exc)
    try:
        spec.validate_response(request, _response(x))
    except OpenAPIError as exc:
        return f"{x}: the response is not one the document gives:\n    {_why(exc)}\n    body: {x.response_body[:300]!r}"
    if request_error is not None and not 400 <= x.status < 500:
        return f"{x}: the document forbids the request, yet it was answered {x.status}:\n    {request_error}"
    return None


def violations(exchanges: Iterable[Exchange]) -> list[str]:
    return [found for found in map(check, exchanges) if found is not None]
