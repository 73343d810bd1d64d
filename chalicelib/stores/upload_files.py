"""An upload's files in the payload bucket, under `uploads/<tenant>/<upload id>/` for UPLOAD_KEEP_DAYS (the
bucket's lifecycle rule): the tenant's own file (`file`), uploaded straight to S3 with a presigned POST so
that no size limit of API Gateway (10 MB) or Lambda (6 MB) applies; the recipients read from it, one JSON
object a line (`recipients.jsonl`: what is published); and the rows refused, as CSV (`refused.csv`).

The presigned POST's policy holds the upload to its key, its declared content type, a size between one
byte and MAX_UPLOAD_BYTES, and encryption at rest: S3 itself refuses anything else, before moonsend reads
a byte of it. Reads are ranged and pinned to the ETag first seen (`IfMatch`), so a file replaced meanwhile
is refused rather than read half old and half new.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from chalicelib.core.ports import S3Uploads
from chalicelib.core.resources import UPLOADS_PREFIX

MAX_UPLOAD_BYTES = 1024 * 1024 * 1024
UPLOAD_LINK_S = 900
DOWNLOAD_LINK_S = 300
# The content types a file may declare: RFC 4180's, what browsers give a .csv, and JSON Lines'.
CONTENT_TYPES = {
    "csv": ("text/csv", "application/vnd.ms-excel", "text/plain"),
    "jsonl": ("application/jsonl", "application/x-ndjson", "application/json-lines", "text/plain"),
}
SOURCE, RECIPIENTS, REFUSED_ROWS = "file", "recipients.jsonl", "refused.csv"


@dataclass(frozen=True)
class Stored:
    size: int
    etag: str


class UploadFiles:
    def __init__(self, s3: S3Uploads, bucket: str, max_bytes: int = MAX_UPLOAD_BYTES) -> None:
        self._s3 = s3
        self._bucket = bucket
        self.max_bytes = max_bytes

    def key(self, user_id: str, upload_id: str, name: str) -> str:
        return f"{UPLOADS_PREFIX}{quote(user_id, safe='')}/{upload_id}/{name}"

    def upload_form(self, user_id: str, upload_id: str, content_type: str) -> dict[str, Any]:
        """Where and how to POST the file: `url` and the form `fields` to send before the file's own."""
        fields = {"Content-Type": content_type, "x-amz-server-side-encryption": "AES256"}
        conditions: list[Any] = [
            {"Content-Type": content_type},
            {"x-amz-server-side-encryption": "AES256"},
            ["content-length-range", 1, self.max_bytes],
        ]
        form = self._s3.generate_presigned_post(
            Bucket=self._bucket,
            Key=self.key(user_id, upload_id, SOURCE),
            Fields=fields,
            Conditions=conditions,
            ExpiresIn=UPLOAD_LINK_S,
        )
        return {"url": form["url"], "fields": form["fields"]}

    def upload_origin(self) -> str:
        """The origin a browser POSTs an upload's file to (S3's, or the local endpoint's): a page's script may
        send there. Made as a form is made, with no request."""
        form = self._s3.generate_presigned_post(
            Bucket=self._bucket, Key=f"{UPLOADS_PREFIX}origin", Fields={}, Conditions=[], ExpiresIn=60
        )
        parts = urlsplit(str(form["url"]))
        return f"{parts.scheme}://{parts.netloc}"

    def stored(self, key: str) -> Stored | None:
        """The object's size and ETag; None when there is none. S3 answers a HEAD of a missing key with 404 to
        a role that may list the bucket and 403 to one that may not (ours may not: they read keys they were
        given, never lists), so both are "none"."""
        try:
            head = self._s3.head_object(Bucket=self._bucket, Key=key)
        except Exception as exc:  # botocore's ClientError: a missing object is a 404 with no modelled class
            if _status(exc) in (403, 404):
                return None
            raise
        return Stored(int(head["ContentLength"]), str(head["ETag"]))

    def chunks(self, key: str, stored: Stored, start: int = 0, chunk: int = 8 * 1024 * 1024) -> Iterator[bytes]:
        """The object's bytes from `start`, a ranged GET at a time; a replaced object fails (412)."""
        at = start
        while at < stored.size:
            end = min(at + chunk, stored.size) - 1
            answer = self._s3.get_object(Bucket=self._bucket, Key=key, Range=f"bytes={at}-{end}", IfMatch=stored.etag)
            data: bytes = answer["Body"].read()
            if not data:
                return
            yield data
            at += len(data)

    def keep_file(self, key: str, path: str, content_type: str) -> None:
        extra = {"ContentType": content_type, "ServerSideEncryption": "AES256"}
        self._s3.upload_file(Filename=path, Bucket=self._bucket, Key=key, ExtraArgs=extra)

    def keep(self, key: str, body: bytes, content_type: str) -> None:
        self._s3.put_object(
            Bucket=self._bucket, Key=key, Body=body, ContentType=content_type, ServerSideEncryption="AES256"
        )

    def link(self, key: str, filename: str) -> str:
        """A link that downloads the object under `filename` for DOWNLOAD_LINK_S."""
        params = {
            "Bucket": self._bucket,
            "Key": key,
            "ResponseContentDisposition": f'attachment; filename="{filename}"',
        }
        return self._s3.generate_presigned_url("get_object", Params=params, ExpiresIn=DOWNLOAD_LINK_S)


def _status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)) or None
