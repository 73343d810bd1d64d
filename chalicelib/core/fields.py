"""One field of a PrecompileEmail message checked: ids, addresses, text, rates, Unicode.

Each check either returns the value or appends a FieldError naming the field and the reason, so that
one message's errors are all reported at once (chalicelib.core.message_parser).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from chalicelib.core.contract import MAX_ADDRESS_LENGTH, MAX_ID_LENGTH, MAX_RATE_PER_SECOND
from chalicelib.core.errors import FieldError

# Control characters a header may not carry (tab, which is white space, aside), C1 ones included.
HEADER_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# One encoder for every metadata size check: json.dumps builds a new one per call when given options.
METADATA_SIZE = json.JSONEncoder(default=str)
# A JSON escape of a UTF-16 surrogate (\ud800-\udfff): paired, it is one character (an emoji); alone it
# decodes to a string that cannot be encoded as UTF-8, and would fail later in SQS, MIME or DynamoDB.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

# Ids travel into queue names, S3 keys, log lines and file names: a conservative alphabet that still
# takes the ids identity providers hand out (`auth0|5f3e...`, `google-oauth2|1234`, emails).
# `\Z`, not `$`: `$` also matches before a final line end, and `acme\n` is not an id (nor `ann@x.org\n` an address).
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.|@:+=-]*\Z")
# Pragmatic address check: one @, a dotted domain, no spaces or control characters, ASCII only.
EMAIL_RE = re.compile(
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+\Z"
)
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}\Z", re.ASCII)


def is_email(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= MAX_ADDRESS_LENGTH
        and bool(EMAIL_RE.match(value))
        and (len(value.split("@", 1)[0]) <= 64)
    )


def is_id(value: object) -> bool:
    """An id as the contract takes it (a tenant's, a campaign's, a digest's, an endpoint's): what may be a key."""
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and bool(ID_RE.match(value))


def id_field(d: dict[str, Any], key: str, path: str, errors: list[FieldError]) -> str:
    value = d.get(key)
    if value is None or value == "":
        errors.append(FieldError(path, "is required"))
        return ""
    if not isinstance(value, str):
        errors.append(FieldError(path, "must be a string"))
        return ""
    if len(value) > MAX_ID_LENGTH:
        errors.append(FieldError(path, f"longer than {MAX_ID_LENGTH} characters"))
        return ""
    if not ID_RE.match(value):
        errors.append(FieldError(path, "may only hold ASCII letters, digits and _.|@:+=- (not first)"))
        return ""
    return value


def object_field(d: dict[str, Any], key: str, path: str, errors: list[FieldError]) -> dict[str, Any]:
    value = d.get(key)
    if value is None:
        errors.append(FieldError(path, "is required"))
        return {}
    if not isinstance(value, dict):
        errors.append(FieldError(path, "must be an object"))
        return {}
    return value


def text_field(
    d: dict[str, Any],
    key: str,
    path: str,
    errors: list[FieldError],
    *,
    max_bytes: int,
    required: bool = True,
    single_line: bool = False,
) -> str:
    value = d.get(key)
    if value is None or (value == "" and required):
        if required:
            errors.append(FieldError(path, "is required"))
        return ""
    if not isinstance(value, str):
        errors.append(FieldError(path, "must be a string"))
        return ""
    if len(value.encode("utf-8")) > max_bytes:
        errors.append(FieldError(path, f"larger than the limit of {max_bytes} bytes"))
        return ""
    if single_line and ("\r" in value or "\n" in value):
        errors.append(FieldError(path, "must not contain line breaks"))
    elif single_line and HEADER_CONTROLS.search(value):
        # NUL, ESC, BS, VT, FF, DEL...: nothing a mail client shows, and some it would obey (RFC 5322 §3.2.5).
        errors.append(FieldError(path, "must not contain control characters"))
        return ""
    return value


def parse_rate(value: object) -> float:
    """`ratePerSecond` as MoonMail sends it (a string) or as a number; positive and finite."""
    if isinstance(value, bool):
        raise ValueError("not a number")
    if isinstance(value, str):
        try:
            rate = float(value.strip())
        except ValueError:
            raise ValueError("not a number") from None
    elif isinstance(value, int | float):
        rate = float(value)
    else:
        raise ValueError("not a number")
    if math.isnan(rate) or math.isinf(rate):
        raise ValueError("not a finite number")
    if rate <= 0:
        raise ValueError("must be greater than zero")
    if rate > MAX_RATE_PER_SECOND:
        raise ValueError(f"above the maximum of {MAX_RATE_PER_SECOND:g}")
    return rate


def lone_surrogate(value: object, path: str) -> str | None:
    """The path of the first string (or key) holding a lone surrogate, or None when all are valid text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            where = lone_surrogate(k, path or "message") or lone_surrogate(v, f"{path}.{k}" if path else str(k))
            if where is not None:
                return where.encode("ascii", "backslashreplace").decode("ascii")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            where = lone_surrogate(v, f"{path}[{i}]")
            if where is not None:
                return where
    return None


def nests_beyond(value: object, limit: int) -> bool:
    """Whether `value` nests objects or lists more than `limit` levels deep (walked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False
