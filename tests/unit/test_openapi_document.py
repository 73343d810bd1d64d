"""The OpenAPI document (chalicelib/control/openapi.json) against what nobody here wrote: it passes
openapi-spec-validator as OpenAPI 3.1, names every route of app.py and nothing else, and every example
in it is valid by its own schema (openapi-schema-validator's OpenAPI 3.1 dialect)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import OpenAPIV31SpecValidator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

import app
from chalicelib.control import openapi

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
DOC_URI = "urn:moonsend:openapi"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(openapi.PATH.read_text(encoding="utf-8"))
    return loaded


def operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method.upper()) for path, item in doc["paths"].items() for method in item if method in METHODS}


def routes() -> set[tuple[str, str]]:
    return {(path, method) for path, methods in app.app.routes.items() for method in methods}


def test_the_document_is_valid_openapi_3_1(doc: dict[str, Any]):
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in OpenAPIV31SpecValidator(doc).iter_errors()]
    assert errors == []
    assert doc["openapi"] == "3.1.0"


def test_every_route_of_the_app_is_in_the_document(doc: dict[str, Any]):
    assert sorted(routes() - operations(doc)) == []


def test_every_operation_of_the_document_is_a_route_of_the_app(doc: dict[str, Any]):
    assert sorted(operations(doc) - routes()) == []


def test_the_tenant_routes_take_the_bearer_key_the_console_its_session_and_the_public_ones_none(doc: dict[str, Any]):
    assert doc["components"]["securitySchemes"]["bearer"] == {
        **doc["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    public = {"/openapi.json", "/unsubscribe/{token}", "/o/{token}", "/c/{token}", "/", "/console/static/{name}"}
    public |= {"/console/sign-in", "/console/sign-in/link", "/console/link/{token}"}
    # The console's session cookie, or none: to the sign-in page.
    signed_in = {p for p in doc["paths"] if p.startswith("/console") and p not in public}
    for path, method in operations(doc):
        security = doc["paths"][path][method.lower()]["security"]
        expected = [] if path in public else [{"session": []}, {}] if path in signed_in else [{"bearer": []}]
        assert security == expected, (path, method)


def test_every_tenant_error_is_a_problem_the_frameworks_too(doc: dict[str, Any]):
    wrong = []
    for path, method, status, response in _responses(doc):
        tenant = doc["paths"][path][method]["security"] == [{"bearer": []}]
        if tenant and int(status) >= 400 and list(response.get("content", {})) != ["application/problem+json"]:
            wrong.append(f"{method.upper()} {path} {status}")
    assert wrong == []


def test_every_operation_has_an_example_of_its_success(doc: dict[str, Any]):
    missing = []
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            examples = [
                media
                for status, response in operation["responses"].items()
                if status.startswith("2")
                for media in _resolve(doc, response).get("content", {}).values()
                if "example" in media
            ]
            binary = any("image/" in t for r in operation["responses"].values() for t in r.get("content", {}))
            redirect = set(operation["responses"]) & {"301", "302", "303", "307"}
            if not examples and not binary and not redirect:
                missing.append(f"{method.upper()} {path}")
    assert missing == []


def test_every_example_is_valid_by_its_schema(doc: dict[str, Any]):
    found = list(_examples(doc))
    assert len(found) > 60
    wrong = []
    for where, schema_pointer, example in found:
        try:
            _validator(doc, schema_pointer).validate(example)
        except ValidationError as exc:
            wrong.append(f"{where}: {exc.message}")
    assert wrong == []


def test_an_invalid_example_is_found():
    """The check above can fail: an example that breaks its schema is reported."""
    doc = {"openapi": "3.1.0", "components": {"schemas": {"N": {"type": "integer", "examples": ["one"]}}}}
    [(_where, pointer, example)] = list(_examples(doc))
    with pytest.raises(ValidationError):
        _validator(doc, pointer).validate(example)


def _resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = _at(doc, node["$ref"].removeprefix("#"))
    return node


def _at(doc: dict[str, Any], pointer: str) -> Any:
    node: Any = doc
    for part in pointer.strip("/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _pointer(*parts: str) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _validator(doc: dict[str, Any], schema_pointer: str) -> OAS31Validator:
    registry: Registry[Any] = Registry().with_resource(DOC_URI, Resource.from_contents(doc, DRAFT202012))
    return OAS31Validator({"$ref": f"{DOC_URI}#{schema_pointer}"}, registry=registry)


def _responses(doc: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                for status, response in operation["responses"].items():
                    yield path, method, status, _resolve(doc, response)


def _examples(doc: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(where, the JSON pointer of its schema, the example) for every example: a media type's or a
    parameter's `example` and `examples`, and a schema's `examples`."""

    def walk(node: Any, parts: tuple[str, ...]) -> Iterator[tuple[str, str, Any]]:
        if isinstance(node, dict):
            if "schema" in node and isinstance(node["schema"], dict):
                schema = _pointer(*parts, "schema")
                if "example" in node:
                    yield _pointer(*parts, "example"), schema, node["example"]
                for name, ex in (node.get("examples") or {}).items():
                    yield _pointer(*parts, "examples", name), schema, _resolve(doc, ex)["value"]
            if parts and parts[-1] != "properties" and isinstance(node.get("examples"), list):
                for i, ex in enumerate(node["examples"]):
                    yield _pointer(*parts, "examples", str(i)), _pointer(*parts), ex
            for key, value in node.items():
                yield from walk(value, (*parts, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, (*parts, str(i)))

    yield from walk(doc, ())
