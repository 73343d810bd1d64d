"""A list route's query parameters, read as the tenant API reads every input: bounded, checked, and answered
with a 400 that says what is wrong (never a crash, never a table key made of whatever was given).

Cursors are opaque to clients: base64url of what the list needs to go on, decoded strictly."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from chalicelib.core.errors import Invalid

MAX_PARAM_CHARS = 1024  # longer than any value a list takes: a 400 before anything else reads it


class BadParam(Invalid):
    """A query parameter the route cannot take; its text is the refusal's detail."""


def text(params: Mapping[str, str] | None, name: str, *, max_chars: int = MAX_PARAM_CHARS) -> str | None:
    """A parameter's value (None when absent or empty); BadParam when too long or not printable text."""
    value = (params or {}).get(name)
    if not value:
        return None
    if len(value) > max_chars or not value.isprintable():
        raise BadParam(f"{name}: at most {max_chars} printable characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: what a non-UTF-8 query string decodes to
        raise BadParam(f"{name}: not UTF-8 text") from None
    return value


def choice(params: Mapping[str, str] | None, name: str, allowed: tuple[str, ...]) -> str | None:
    value = text(params, name)
    if value is not None and value not in allowed:
        raise BadParam(f"{name}: one of {', '.join(allowed)}")
    return value


def limit(params: Mapping[str, str] | None, *, default: int, most: int) -> int:
    given = text(params, "limit")
    if given is None:
        return default
    # ASCII digits only: `²` is a digit to str.isdigit that int() refuses (a ValueError, not a 400).
    if not (given.isascii() and given.isdigit()) or not 1 <= int(given) <= most:
        raise BadParam(f"limit: a whole number from 1 to {most}")
    return int(given)


def encode_cursor(position: str) -> str:
    return base64.urlsafe_b64encode(position.encode("utf-8")).rstrip(b"=").decode("ascii")


def decode_cursor(params: Mapping[str, str] | None, name: str = "after") -> str | None:
    """The position an `after` names (None when absent); BadParam for anything no page of ours answered."""
    given = text(params, name)
    if given is None:
        return None
    try:
        decoded = base64.urlsafe_b64decode(given + "=" * (-len(given) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        raise bad_cursor(name) from None
    if not decoded:  # `====`, or only characters base64 skips: no page ends at nothing (nor can a key be empty)
        raise bad_cursor(name)
    return decoded


def bad_cursor(name: str = "after") -> BadParam:
    return BadParam(f"{name}: not a cursor of this list (give the `next` of the page before)")
