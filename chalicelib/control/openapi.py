"""The API's OpenAPI 3.1 document, `openapi.json` beside this module (it ships in the bundle), as `GET
/openapi.json` serves it: read once per container, served as it is kept (docs/api.md)."""

from __future__ import annotations

import functools
import pathlib

PATH = pathlib.Path(__file__).with_name("openapi.json")


@functools.cache
def document() -> str:
    return PATH.read_text(encoding="utf-8")
