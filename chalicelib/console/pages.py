"""The console's pages, rendered on the server with Jinja2 (autoescaped: a tenant's or a recipient's text is
always shown as text), and the headers every page carries: a strict Content-Security-Policy (no script at
all yet; styles and images from the stage only), no framing, no sniffing, no referrer beyond the stage."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

HERE = Path(__file__).parent
STATIC = HERE / "static"
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}

CSP = "; ".join(
    (
        "default-src 'none'",
        "style-src 'self'",
        "img-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
PAGE_HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@functools.cache
def _environment() -> Environment:
    return Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(("html",), default=True),
        undefined=StrictUndefined,  # a name a template uses and the page does not give is an error, not ""
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)


def static_file(name: str) -> tuple[bytes, str] | None:
    """A static asset's bytes and type, by its file name only (no path can leave the folder)."""
    path = STATIC / name
    kind = STATIC_TYPES.get(path.suffix)
    if kind is None or "/" in name or "\\" in name or name.startswith(".") or not path.is_file():
        return None
    return path.read_bytes(), kind
