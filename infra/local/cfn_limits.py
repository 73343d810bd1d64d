"""Emulator: CloudFormation's template quotas, refused at the local endpoint as CloudFormation does.

moto's CloudFormation checks none of them (alone, it creates a stack from a 100 KB `TemplateBody` with 501
resources), so a deploy that worked locally could fail on AWS. The calls deploy makes (CreateStack,
UpdateStack, CreateChangeSet, ValidateTemplate) are checked here before moto sees them; `refusal` decides,
as data, what AWS would say.

The figures are the quotas page's ("Understand CloudFormation quotas", AWS CloudFormation User Guide)
and the API reference's. The messages, and how sure we are of each (searched in public issue threads and
code quoting AWS's answers; none could be checked against AWS from here):

- TemplateBody over 51,200 bytes: "1 validation error detected: Value '<the body>' at 'templateBody' failed
  to satisfy constraint: Member must have length less than or equal to 51200". Confirmed (many reports,
  2014-2022, ValidationError, HTTP 400), the value echoed whole. Some third-party code quotes a value-less
  "Value at 'templateBody' ..." form: not seen from AWS. The unit, bytes and not characters, is the
  documentation's ("maximum length of 51,200 bytes"); no report shows which AWS counts.
- TemplateURL longer than 5,120 characters (the API model's constraint): the same shape at 'templateURL'.
  Unverified (no report found; the member name is written as AWS writes the body's).
- The object at TemplateURL over 1 MB: "Template may not exceed 1000000 bytes in size." Confirmed in its
  shape ("... 460800 bytes ..." when that was the limit, ValidationError, HTTP 400), and with 1000000 in
  projects quoting AWS (and cfn-lint's own limit table): "1 MB" is 1,000,000 bytes, not 1,048,576.
- No such key: "S3 error: The specified key does not exist.\\nFor more information check
  http://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html". Confirmed (a CreateStack in 2025).
- No such bucket: "S3 error: The specified bucket does not exist" plus the same second line. The first
  line seen once (third-party page), the second line by analogy: partly unverified.
- A URL that is not an S3 URL: "TemplateURL must be a supported URL." Confirmed (reports from 2023 on).
- Resources over 500: "Template format error: Number of resources, 501, is greater than maximum allowed,
  500". Confirmed (several, with 500).
- Outputs over 200: "Template format error: Outputs count 201 is greater than max allowed 200". Confirmed
  in its shape with the old limit of 60; with 200, unverified.
- Parameters over 200: "Template format error: Parameter count 201 is greater than max allowed 200".
  Confirmed in its shape with 60 (ValidationError); one report ends it with a full stop, most do not.

Counts are taken from a JSON template only (ours are JSON). A template that is not JSON (YAML, or
broken) is not parsed: no count is checked for it, and moto answers it as it would. Which count AWS
checks first when several are over is not known; here resources, then outputs, then parameters.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit
from xml.sax.saxutils import escape

ACTIONS = frozenset({"CreateStack", "UpdateStack", "CreateChangeSet", "ValidateTemplate"})

TEMPLATE_BODY_MAX_BYTES = 51_200  # quotas page: "Template body size in a request"
TEMPLATE_URL_MAX_LENGTH = 5_120  # API reference (and botocore's model): TemplateURL's length constraint
TEMPLATE_OBJECT_MAX_BYTES = 1_000_000  # quotas page: "Template body size in an Amazon S3 object", 1 MB
MAX_RESOURCES = 500
MAX_OUTPUTS = 200
MAX_PARAMETERS = 200

_S3_DOCS = "For more information check http://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html"
# The S3 hosts AWS names for an object: BUCKET.s3.amazonaws.com, BUCKET.s3.REGION.amazonaws.com,
# BUCKET.s3-REGION.amazonaws.com (virtual-hosted), and the same without "BUCKET." (path style).
_S3_HOST = re.compile(r"^(?:(?P<bucket>.+)\.)?s3(?:[.-](?:dualstack\.)?[a-z0-9-]+)?\.amazonaws\.com$")


@dataclass(frozen=True)
class Refusal:
    """What CloudFormation answers instead: an error of the Query protocol."""

    code: str
    message: str
    status: int = 400

    def response(self, request_id: str | None = None) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) in CloudFormation's Query-protocol error shape."""
        request_id = request_id or str(uuid.uuid4())
        body = (
            '<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/">'
            f"<Error><Type>Sender</Type><Code>{self.code}</Code><Message>{escape(self.message)}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return self.status, {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}, body.encode()


class StoredObject(Protocol):
    """What is read of an S3 object (moto's FakeKey has both)."""

    @property
    def size(self) -> int: ...

    @property
    def value(self) -> bytes: ...


class NoSuchBucket(LookupError):
    pass


# (bucket, key) -> the object, or None when the bucket has no such key; raises NoSuchBucket.
ObjectLookup = Callable[[str, str], StoredObject | None]


def _validation(message: str) -> Refusal:
    return Refusal("ValidationError", message)


def _too_long(member: str, value: str, limit: int) -> Refusal:
    return _validation(
        f"1 validation error detected: Value '{value}' at '{member}' failed to satisfy constraint: "
        f"Member must have length less than or equal to {limit}"
    )


def s3_location(url: str) -> tuple[str, str] | None:
    """(bucket, key) of a TemplateURL, or None when it names no S3 object.

    AWS's forms: https://BUCKET.s3.REGION.amazonaws.com/KEY, https://BUCKET.s3.amazonaws.com/KEY,
    https://s3.REGION.amazonaws.com/BUCKET/KEY (and the legacy s3-REGION hosts). moto's CloudFormation
    also takes any URL with "localhost" in it as path style (http://localhost:4566/BUCKET/KEY), which
    only a local endpoint can mean; it is read the same way here, and not refused. The key is the URL's
    path decoded, as S3 reads it (moto does not decode it: a key that needs %-escapes is not found by moto's
    CloudFormation; deploy's keys need none). A versionId in the query is not read (moto reads the newest).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http"):
        return None
    path = unquote(parts.path)
    host = (parts.hostname or "").lower()
    m = _S3_HOST.match(host)
    if "localhost" in url or (m and not m.group("bucket")):
        bucket, _, key = path.lstrip("/").partition("/")
    elif m:
        bucket, key = m.group("bucket"), path.lstrip("/")
    else:
        return None
    return (bucket, key) if bucket and key else None


def _fetch(url: str, lookup: ObjectLookup) -> bytes | Refusal:
    location = s3_location(url)
    if location is None:
        return _validation("TemplateURL must be a supported URL.")
    try:
        found = lookup(*location)
    except NoSuchBucket:
        return _validation(f"S3 error: The specified bucket does not exist\n{_S3_DOCS}")
    if found is None:
        return _validation(f"S3 error: The specified key does not exist.\n{_S3_DOCS}")
    if found.size > TEMPLATE_OBJECT_MAX_BYTES:
        return _validation(f"Template may not exceed {TEMPLATE_OBJECT_MAX_BYTES} bytes in size.")
    return found.value


def _counts(template: bytes | str) -> Refusal | None:
    """The template's sections over their quotas; None also for a template that is not JSON (not parsed)."""
    try:
        parsed = json.loads(template)
    except ValueError:
        return None  # YAML or malformed: not counted (moto parses it, and answers what it finds)
    if not isinstance(parsed, dict):
        return None

    def count(section: str) -> int:
        value = parsed.get(section)
        return len(value) if isinstance(value, dict) else 0

    if (n := count("Resources")) > MAX_RESOURCES:
        return _validation(
            f"Template format error: Number of resources, {n}, is greater than maximum allowed, {MAX_RESOURCES}"
        )
    if (n := count("Outputs")) > MAX_OUTPUTS:
        return _validation(f"Template format error: Outputs count {n} is greater than max allowed {MAX_OUTPUTS}")
    if (n := count("Parameters")) > MAX_PARAMETERS:
        return _validation(f"Template format error: Parameter count {n} is greater than max allowed {MAX_PARAMETERS}")
    return None


def refusal(action: str, params: Mapping[str, str], lookup: ObjectLookup) -> Refusal | None:
    """What CloudFormation refuses of this call (its Query-protocol form fields), or None.

    The fields' own constraints first (API validation answers before anything is read), then the object
    at TemplateURL, then the template's counts. The template used is TemplateBody when there is one
    (ValidateTemplate: "If both are passed, only TemplateBody is used"), else the object at TemplateURL."""
    if action not in ACTIONS:
        return None
    body, url = params.get("TemplateBody"), params.get("TemplateURL")
    if body and len(body.encode("utf-8")) > TEMPLATE_BODY_MAX_BYTES:
        return _too_long("templateBody", body, TEMPLATE_BODY_MAX_BYTES)
    if url and len(url) > TEMPLATE_URL_MAX_LENGTH:
        return _too_long("templateURL", url, TEMPLATE_URL_MAX_LENGTH)
    if body:
        return _counts(body)
    if url:
        fetched = _fetch(url, lookup)
        return fetched if isinstance(fetched, Refusal) else _counts(fetched)
    return None


def moto_objects(account: str, region: str) -> ObjectLookup:
    """Objects as moto's CloudFormation reads them: from the S3 backend of the caller's account, in process."""
    from moto.s3.exceptions import MissingBucket
    from moto.s3.models import s3_backends
    from moto.utilities.utils import get_partition

    def lookup(bucket: str, key: str) -> StoredObject | None:
        try:
            return s3_backends[account][get_partition(region)].get_object(bucket, key)
        except MissingBucket as exc:
            raise NoSuchBucket(bucket) from exc

    return lookup


def caller_account(environ: Mapping[str, Any], access_key: str) -> str:
    """The caller's account, found as moto finds it (so the object is looked up where moto will look)."""
    if "MOTO_ACCOUNT_ID" in os.environ:
        return os.environ["MOTO_ACCOUNT_ID"]
    if environ.get("HTTP_X_MOTO_ACCOUNT_ID"):
        return str(environ["HTTP_X_MOTO_ACCOUNT_ID"])
    from moto.iam.models import get_account_id_from

    return get_account_id_from(access_key)


def answer(
    environ: Mapping[str, Any], body: bytes, access_key: str, region: str
) -> tuple[int, dict[str, str], bytes] | None:
    """The endpoint's answer to a CloudFormation request AWS would refuse, or None to let moto answer."""
    if environ.get("REQUEST_METHOD") != "POST" or b"Template" not in body:
        return None
    params = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    if params.get("Action") not in ACTIONS:
        return None

    def lookup(bucket: str, key: str) -> StoredObject | None:  # only a TemplateURL call reads S3
        return moto_objects(caller_account(environ, access_key), region)(bucket, key)

    refused = refusal(params["Action"], params, lookup)
    return refused.response() if refused is not None else None
