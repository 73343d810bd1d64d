"""An API exchange checked against the OpenAPI document with openapi-core (tests/e2e/conftest.py)."""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Iterable
from http.cookies import CookieError, SimpleCookie

import jsonschema
from openapi_core import Config, OpenAPI
from openapi_core.deserializing.media_types.exceptions import MediaTypeDeserializeError
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


def _cookies(header: str) -> dict[str, str]:
    try:
        return {name: morsel.value for name, morsel in SimpleCookie(header).items()}
    except CookieError:
        return {}


def _request(x: Exchange) -> MockRequest:
    return MockRequest(
        HOST,
        x.method,
        x.path,
        path_pattern=x.route,
        # The document's optional query parameters allow an empty value, read as if not given.
        args={name: values for name, values in x.query.items() if any(values)},
        view_args=x.path_parameters,
        headers=x.request_headers,
        cookies=_cookies(x.request_headers.get("cookie", "")),
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


def _unreadable(exc: BaseException) -> bool:
    e: BaseException | None = exc
    while e is not None:
        if isinstance(e, (MediaTypeDeserializeError, RecursionError, UnicodeDecodeError)):
            return True
        e = e.__cause__ or e.__context__
    return False


def check(x: Exchange) -> str | None:
    """What is wrong with the exchange by the document, or None."""
    with warnings.catch_warnings():  # the document's allowEmptyValue, deprecated by OpenAPI but what the API does
        warnings.simplefilter("ignore", DeprecationWarning)
        return _check(x)


@functools.cache
def _raw() -> dict:
    return json.loads(openapi.document())


def _method_not_taken(x: Exchange) -> str | None:
    """A method the path does not take: no operation to check it by, so as the document's description
    says: 405, `Allow` naming the path's methods, a problem."""
    taken = {m.upper() for m in _raw()["paths"][x.route] if m in ("get", "head", "put", "post", "delete", "patch")}
    allowed = {m.strip() for m in x.response_headers.get("Allow", "").split(",")}
    if x.status != 405 or allowed != taken:
        return f"{x}: a method the path does not take, answered {x.status}, Allow {x.response_headers.get('Allow')}"
    try:
        jsonschema.validate(json.loads(x.response_body), _raw()["components"]["schemas"]["Problem"])
    except (ValueError, jsonschema.ValidationError) as exc:
        return f"{x}: a 405 that is not a problem: {exc}"
    return None if x.content_type == "application/problem+json" else f"{x}: a 405 as {x.content_type}"


def _check(x: Exchange) -> str | None:
    if x.method.lower() not in _raw()["paths"].get(x.route, {x.method.lower(): None}):
        return _method_not_taken(x)
    spec = document()
    request = _request(x)
    try:
        spec.validate_request(request)
        request_error = None
    except OpenAPIError as exc:
        # A body that is not JSON at all is outside what a document can say: the routes whose body is
        # optional take it as none, the others answer 400 (checked as every response is).
        request_error = None if _unreadable(exc) else _why(exc)
    except Exception:  # openapi-core could not read it (a multipart body it asserts on): its limit, not ours
        request_error = None
    try:
        spec.validate_response(request, _response(x))
    except OpenAPIError as exc:
        return f"{x}: the response is not one the document gives:\n    {_why(exc)}\n    body: {x.response_body[:300]!r}"
    if request_error is not None and not 400 <= x.status < 500:
        return f"{x}: the document forbids the request, yet it was answered {x.status}:\n    {request_error}"
    return None


def violations(exchanges: Iterable[Exchange]) -> list[str]:
    return [found for found in map(check, exchanges) if found is not None]
