"""Entity tags for the API's GET answers (RFC 9110 §8.8.3, §13.1.2): a client that sends back the tag it
has (`If-None-Match`) gets `304 Not Modified` and no body when the answer has not changed.

The tag is a digest of the answer's JSON: strong (the same bytes), computed from what was read, so it
saves the client the transfer and its parsing, not moonsend the reads."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def etag(body: Any) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return '"' + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32] + '"'


def not_modified(if_none_match: str | None, tag: str) -> bool:
    """Whether `If-None-Match` names this tag (or `*`). Weak comparison, as the RFC asks of If-None-Match."""
    if not if_none_match:
        return False
    for given in if_none_match.split(","):
        given = given.strip()
        if given == "*" or given.removeprefix("W/") == tag:
            return True
    return False
