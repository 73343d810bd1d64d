"""upload_jobs: the background work of sending without code, one function for both kinds of job, invoked
asynchronously by the API: an upload read (`read`), and a campaign published from its recipients
(`publish`, which continues itself when its time runs short). An event for work that is done, or for no
work, does nothing: Lambda may deliver an asynchronous event twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.core import log
from chalicelib.core.fields import is_id
from chalicelib.produce.fanout import Publication
from chalicelib.produce.reading import UploadReader
from chalicelib.stores.uploads import READING, Uploads


class UploadJobs:
    def __init__(self, uploads: Uploads, reader: UploadReader, publication: Publication) -> None:
        self._uploads = uploads
        self._reader = reader
        self._publication = publication

    def handle(self, event: object, function_name: str, remaining_ms: Callable[[], int]) -> dict[str, Any]:
        if not isinstance(event, dict) or not is_id(event.get("userId")):
            log.error("upload job input refused", reason="userId must be an id")
            return {"ran": False}
        user, job = event["userId"], event.get("job")
        if job == "read" and is_id(event.get("uploadId")):
            upload = self._uploads.upload(user, event["uploadId"])
            if upload is None or upload.state != READING:
                return {"ran": False}
            report = self._reader.read(upload, remaining_ms)
            return {"ran": True, "read": report is not None}
        if job == "publish" and is_id(event.get("campaignId")):
            return self._publication.run(user, event["campaignId"], function_name, remaining_ms)
        log.error("upload job input refused", reason="job must be read (uploadId) or publish (campaignId)")
        return {"ran": False}
