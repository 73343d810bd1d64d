"""S3 in memory: the payload store, the failed copies and the schedule store's bodies run over it."""

from __future__ import annotations

import io
from typing import Any

from chalicelib.stores.failed_copies import FailedCopies
from chalicelib.stores.payloads import PayloadStore


class NoSuchKey(Exception):
    pass


class FakeS3:
    class exceptions:
        NoSuchKey = NoSuchKey

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes | str, **_kw: Any) -> dict[str, Any]:
        self.objects[(Bucket, Key)] = Body if isinstance(Body, bytes) else Body.encode("utf-8")
        return {}

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        if (Bucket, Key) not in self.objects:
            raise NoSuchKey(Key)
        return {"Body": io.BytesIO(self.objects[(Bucket, Key)])}

    def delete_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        self.objects.pop((Bucket, Key), None)
        return {}


def payloads(threshold_bytes: int = 256 * 1024) -> PayloadStore:
    """The real payload store over S3 in memory."""
    return PayloadStore(FakeS3(), "bucket", threshold_bytes)


def failed_copies() -> FailedCopies:
    """The real failed-copies store over S3 in memory."""
    return FailedCopies(FakeS3(), "bucket")
