"""The console's pages, rendered on the server with Jinja2 (autoescaped: a tenant's or a recipient's text is
always shown as text), and the headers every page carries: a strict Content-Security-Policy (scripts,
styles and fetches from the stage only, nothing inline, no eval), no framing, no sniffing, no referrer beyond
the stage. A page names each asset with a hash of its bytes (`asset_url`), so a browser keeps it for a year
and asks again only when it changed: a page view after the first is one request."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from chalicelib.core.contract import iso_ms

HERE = Path(__file__).parent
STATIC = HERE / "static"
STATIC_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


def csp(connect: tuple[str, ...] = ()) -> str:
    """The console's policy; `connect`: the origins besides the stage's that a page's script may send to (the
    upload page's file goes straight to S3)."""
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            " ".join(("connect-src 'self'", *connect)),
            "style-src 'self'",
            "img-src 'self'",
            # A preview of an email is shown in a sandboxed frame of its own document (srcdoc): nothing of it runs.
            "frame-src 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        )
    )


CSP = csp()
PAGE_HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@functools.cache
def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(("html",), disabled_extensions=("txt",), default=True),  # .txt: mail text
        undefined=StrictUndefined,  # a name a template uses and the page does not give is an error, not ""
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["asset"] = asset_url
    env.filters["iso"] = lambda at: iso_ms(int(float(at) * 1000))  # epoch seconds, as the API says times
    return env


@functools.cache
def asset_version(name: str) -> str | None:
    """The first hex digits of a static asset's SHA-256 (None for no such asset)."""
    found = static_file(name)
    return hashlib.sha256(found[0]).hexdigest()[:12] if found else None


def asset_url(base: str, name: str) -> str:
    return f"{base}/console/static/{name}?v={asset_version(name)}"


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)


def static_file(name: str) -> tuple[bytes, str] | None:
    """A static asset's bytes and type, by its file name only (no path can leave the folder)."""
    path = STATIC / name
    kind = STATIC_TYPES.get(path.suffix)
    if kind is None or "/" in name or "\\" in name or name.startswith(".") or not path.is_file():
        return None
    return path.read_bytes(), kind
