"""A copy of each email the drainer records `failed` (its queued JSON, in the payload bucket under `failed/`,
30 days), so that retry-failed can queue it again (chalicelib.control.retry) and the dead-letter job can
keep one for a recipient it records failed (chalicelib.jobs.dead_letters)."""

from __future__ import annotations

import hashlib
from urllib.parse import quote

from chalicelib.core.contract import QueuedEmail
from chalicelib.core.ports import S3Objects
from chalicelib.core.resources import FAILED_PREFIX


class FailedCopies:
    """The queued form of each failed email, kept for retry-failed."""

    def __init__(self, s3: S3Objects, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    @staticmethod
    def key(user_id: str, campaign_id: str, email: str) -> str:
        rcpt = hashlib.sha256(email.lower().encode("utf-8")).hexdigest()[:40]
        return f"{FAILED_PREFIX}{quote(user_id, safe='')}/{quote(campaign_id, safe='')}/{rcpt}.json"

    def save(self, email: QueuedEmail) -> None:
        self._s3.put_object(
            Bucket=self._bucket,
            Key=self.key(email.user_id, email.campaign_id, email.recipient_email),
            Body=email.to_json().encode("utf-8"),
            ServerSideEncryption="AES256",
            ContentType="application/json",
        )

    def load(self, user_id: str, campaign_id: str, email: str) -> str | None:
        try:
            obj = self._s3.get_object(Bucket=self._bucket, Key=self.key(user_id, campaign_id, email))
        except self._s3.exceptions.NoSuchKey:
            return None
        return str(obj["Body"].read().decode("utf-8"))
