"""Queued emails too large for a queue message go to S3; the message carries a pointer instead.

The pattern of seed 001 (and of the SQS extended client, whose 256 KiB threshold is hard-coded): here
the threshold is configurable (`MOONSEND_PAYLOAD_THRESHOLD_BYTES`, default 256 KiB). Objects are keyed
under the tenant and campaign, written with server-side encryption, deleted once the email has its
outcome, and expired by the bucket's lifecycle rule if anything is left behind.
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

from chalicelib.core.contract import utf8_size
from chalicelib.core.ports import S3Objects
from chalicelib.core.resources import QUEUED_PREFIX

POINTER_KEY = "moonsendPayload"
DEFAULT_THRESHOLD_BYTES = 256 * 1024


class PayloadStore:
    def __init__(self, s3: S3Objects, bucket: str, threshold_bytes: int = DEFAULT_THRESHOLD_BYTES) -> None:
        self._s3 = s3
        self._bucket = bucket
        self.threshold_bytes = threshold_bytes
        self.offloaded = 0

    def wrap(self, user_id: str, campaign_id: str, body: str) -> str:
        """The queue message for `body`: the body itself, or a pointer to it in S3."""
        if len(body) <= self.threshold_bytes // 4 or utf8_size(body) <= self.threshold_bytes:
            return body  # a character is at most four bytes: most bodies need no count at all
        data = body.encode("utf-8")
        key = f"{QUEUED_PREFIX}{quote(user_id, safe='')}/{quote(campaign_id, safe='')}/{uuid.uuid4().hex}.json"
        self._s3.put_object(
            Bucket=self._bucket, Key=key, Body=data, ServerSideEncryption="AES256", ContentType="application/json"
        )
        self.offloaded += 1
        return json.dumps({POINTER_KEY: {"bucket": self._bucket, "key": key, "bytes": len(data)}})

    @staticmethod
    def pointer(message: str) -> dict[str, Any] | None:
        if not message.startswith('{"' + POINTER_KEY + '"'):
            return None
        try:
            p = json.loads(message)[POINTER_KEY]
            return {"bucket": str(p["bucket"]), "key": str(p["key"])}
        except (ValueError, KeyError, TypeError):
            return None

    def unwrap(self, message: str) -> str:
        """The queued email of a queue message, fetched from S3 when the message is a pointer."""
        p = self.pointer(message)
        if p is None:
            return message
        return self._s3.get_object(Bucket=p["bucket"], Key=p["key"])["Body"].read().decode("utf-8")

    def discard(self, message: str) -> None:
        """Delete the S3 object behind a pointer once its email has an outcome (best effort)."""
        p = self.pointer(message)
        if p is not None:
            self._s3.delete_object(Bucket=p["bucket"], Key=p["key"])
