"""Emulator: path parameters decoded, as API Gateway's REST APIs hand them to a proxy integration.

API Gateway gives a Lambda proxy integration each `{param}` of the route percent-decoded in
`pathParameters` (a request for `/suppressions/ann%2Bnews%40example.org` gives `ann+news@example.org`),
while `path` stays as asked. chalice's local server hands them as they were in the URL, so a route that
takes an address would see `%40` here and `@` on AWS. The app the local server's request handlers call is
wrapped, nothing is patched.
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import unquote


def install(server: Any) -> None:
    """Decode the path parameters of every request `server` (chalice.local's LocalDevServer) hands its app."""
    handler = server.server.RequestHandlerClass  # functools.partial(handler, app_object=..., config=...)
    app = _DecodedPaths(handler.keywords["app_object"])
    server.server.RequestHandlerClass = functools.partial(
        handler.func, *handler.args, **{**handler.keywords, "app_object": app}
    )


class _DecodedPaths:
    """The Chalice app as the local server sees it (its routes, its API settings), its path parameters decoded."""

    def __init__(self, app: Any) -> None:
        self._app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self._app, name)

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        given = event.get("pathParameters")
        if given:
            event = {**event, "pathParameters": {k: unquote(v) for k, v in given.items()}}
        return self._app(event, context)
