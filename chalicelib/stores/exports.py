"""Files a tenant downloads from the console (a campaign's recipients as CSV), in the payload bucket under
`exports/` for a day (its lifecycle rule), each handed out as a presigned link that works for LINK_S: a
100,000-row file is past API Gateway's 10 MB and Lambda's 6 MB answers, and S3 serves it at any size.
Each export has a random path of its own: one tenant's link names nothing another could guess.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote

from chalicelib.core.ports import S3Links
from chalicelib.core.resources import EXPORTS_PREFIX

LINK_S = 300


class Exports:
    def __init__(self, s3: S3Links, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def keep(self, user_id: str, filename: str, body: bytes) -> str:
        """Keep the file; a link to download it under `filename` (ASCII), for LINK_S."""
        key = f"{EXPORTS_PREFIX}{quote(user_id, safe='')}/{secrets.token_urlsafe(16)}/{quote(filename, safe='')}"
        disposition = f'attachment; filename="{filename}"'
        self._s3.put_object(
            Bucket=self._bucket,
            Key=key,
            Body=body,
            ServerSideEncryption="AES256",
            ContentType="text/csv; charset=utf-8",
            ContentDisposition=disposition,
        )
        return self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": self._bucket, "Key": key}, ExpiresIn=LINK_S
        )
