"""Emulator: S3's browser-based upload (POST Object with a presigned policy), its policy enforced at the local
endpoint as S3 enforces it; moto stores whatever form it is sent.

What the AWS documentation (sigv4-HTTPPOSTConstructPolicy) gives, and S3 answers:
- `expiration` past: 403 AccessDenied, `Invalid according to Policy: Policy expired.`
- each condition, in the policy's order: an exact match (`{"field": "value"}` or `["eq", "$field", "value"]`),
  a prefix (`["starts-with", "$field", "prefix"]`), or the file's size (`["content-length-range", min,
  max]`); a field that fails: 403 AccessDenied, `Invalid according to Policy: Policy Condition failed:
  ["eq", "$Content-Type", "text/csv"]`; a size outside the range: 400 EntityTooSmall or EntityTooLarge.
  `bucket` is the request's (the path's), not a form field.
- every form field but `file`, `policy`, the signature's and `x-ignore-*` must have a condition: 403
  AccessDenied, `Invalid according to Policy: Extra input fields: <name>`.
Field names are compared without case. The policy's signature is not checked here (the local stack's keys
sign nothing an attacker could forge); its conditions are what a tenant's upload is held to.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import HTTP
from html import escape
from typing import Any

Response = tuple[int, dict[str, str], bytes]
# Never in a condition: the file, the policy, and its signature (SigV4's, or SigV2's key id and signature).
_UNCOVERED = ("file", "policy", "x-amz-signature", "awsaccesskeyid", "signature")


def is_post_object(environ: dict[str, Any]) -> bool:
    """A browser-based upload: a form POSTed to a bucket's path, signed by its policy, not by a header."""
    path = environ.get("PATH_INFO", "")
    return (
        environ.get("REQUEST_METHOD") == "POST"
        and str(environ.get("CONTENT_TYPE", "")).startswith("multipart/form-data")
        and path.count("/") <= 2
        and not environ.get("QUERY_STRING")
    )


def refusal(environ: dict[str, Any], body: bytes, now: float | None = None) -> Response | None:
    """S3's answer to a form its policy does not allow, or None."""
    fields, size = _form(str(environ.get("CONTENT_TYPE", "")), body)
    bucket = environ.get("PATH_INFO", "").strip("/").split("/")[0]
    if "policy" not in fields:  # an anonymous write, which the bucket's public access block refuses
        return _denied("Access Denied")
    try:
        policy = json.loads(base64.b64decode(fields["policy"]))
        expires = datetime.fromisoformat(str(policy["expiration"]).replace("Z", "+00:00")).timestamp()
        conditions = list(policy["conditions"])
    except (ValueError, KeyError, TypeError):
        return _error(400, "InvalidPolicyDocument", "Invalid Policy: Invalid JSON.")
    # By the clock botocore signs the policy with (the fault explorer moves time.time(), not this one).
    if expires < (datetime.now(UTC).timestamp() if now is None else now):
        return _denied("Invalid according to Policy: Policy expired.")
    values = {**fields, "bucket": bucket}
    covered = {"bucket"}
    for condition in conditions:
        refused = _check(condition, values, size, covered)
        if refused is not None:
            return refused
    extra = sorted(n for n in fields if n not in covered and n not in _UNCOVERED and not n.startswith("x-ignore-"))
    if extra:
        return _denied(f"Invalid according to Policy: Extra input fields: {extra[0]}")
    return None


def _check(condition: Any, values: dict[str, str], size: int, covered: set[str]) -> Response | None:
    if isinstance(condition, dict) and len(condition) == 1:
        ((name, wanted),) = condition.items()
        condition = ["eq", f"${name}", wanted]
    shown = json.dumps(condition)
    if not isinstance(condition, list) or len(condition) != 3:
        return _denied(f"Invalid according to Policy: Policy Condition failed: {shown}")
    op, target, wanted = condition
    if op == "content-length-range":
        if size < int(target):
            return _error(400, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed size")
        if size > int(wanted):
            return _error(400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed size")
        return None
    name = str(target).lstrip("$").lower()
    covered.add(name)
    given = values.get(name)
    ok = given is not None and (given == wanted if op == "eq" else op == "starts-with" and given.startswith(wanted))
    return None if ok else _denied(f"Invalid according to Policy: Policy Condition failed: {shown}")


def _form(content_type: str, body: bytes) -> tuple[dict[str, str], int]:
    """The form's fields (names lower-cased) and its file's size."""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, str] = {}
    size = 0
    for part in message.iter_parts() if message.is_multipart() else ():
        name = str(part.get_param("name", header="content-disposition") or "").lower()
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        if name == "file":
            size = len(data)
        elif name:
            fields[name] = data.decode("utf-8", "replace")
    return fields, size


def _denied(message: str) -> Response:
    return _error(403, "AccessDenied", message)


def _error(status: int, code: str, message: str) -> Response:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{escape(message, quote=False)}</Message>"
        "<RequestId>local</RequestId><HostId>local</HostId></Error>"
    )
    return status, {"Content-Type": "application/xml"}, body.encode()
