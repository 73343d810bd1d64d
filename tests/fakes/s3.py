"""S3 in memory: the payload store, the failed copies and the schedule store's bodies run over it."""

from __future__ import annotations

import io


class NoSuchKey(Exception):
    pass


class FakeS3:
    class exceptions:
        NoSuchKey = NoSuchKey

    def __init__(self):
        self.objects = {}

    def put_object(self, Bucket, Key, Body, **_kw):
        self.objects[(Bucket, Key)] = Body if isinstance(Body, bytes) else Body.encode("utf-8")

    def get_object(self, Bucket, Key):
        if (Bucket, Key) not in self.objects:
            raise NoSuchKey(Key)
        return {"Body": io.BytesIO(self.objects[(Bucket, Key)])}

    def delete_object(self, Bucket, Key):
        self.objects.pop((Bucket, Key), None)


def payloads(threshold_bytes=256 * 1024):
    """The real payload store over S3 in memory."""
    from chalicelib.stores.payloads import PayloadStore

    return PayloadStore(FakeS3(), "bucket", threshold_bytes)


def failed_copies():
    """The real failed-copies store over S3 in memory."""
    from chalicelib.stores.failed_copies import FailedCopies

    return FailedCopies(FakeS3(), "bucket")
