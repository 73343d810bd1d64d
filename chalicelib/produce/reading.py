"""An upload read: its rows checked as recipients, duplicates removed, and its report (rows, recipients,
duplicates, refused rows with their line and why, how many the tenant's list suppresses), with the
recipients kept as one JSON object a line for the campaigns sent from it (chalicelib.stores.upload_files).

One pass, in bounded memory: the file is read a ranged GET at a time and parsed as a stream; the two files
written are written to local disk (Lambda's /tmp) and then to S3; duplicates are found by an 8-byte digest
of each address kept in a set (about 60 bytes an address: 1,000,000 recipients hold some 60 MB, and
MAX_ROWS bounds it). Two addresses whose digests collide (one chance in about 10^7 at 2,000,000
addresses) would be counted once; the second is then reported as a duplicate, never sent twice.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from chalicelib.core import log
from chalicelib.core.csv_cells import cell
from chalicelib.produce.rows import FileRefused, Line, Row, lines, rows
from chalicelib.stores.upload_files import RECIPIENTS, REFUSED_ROWS, SOURCE, UploadFiles
from chalicelib.stores.uploads import Upload, Uploads

MAX_ROWS = 2_000_000
REFUSED_SHOWN = 20
# A read with less than this much of its Lambda's time left stops and refuses the file: read again, it
# starts over (a reading is one pass, so that its duplicates are found in one set).
STOP_WITH_S = 20.0
_CHECK_EVERY = 10_000


def address_digest(email: str) -> int:
    return int.from_bytes(hashlib.blake2b(email.lower().encode("utf-8"), digest_size=8).digest(), "big")


@dataclass
class Tally:
    rows: int = 0
    recipients: int = 0
    duplicates: int = 0
    refused: int = 0
    shown: list[dict[str, Any]] = field(default_factory=list)

    def refuse(self, row: Row) -> None:
        self.refused += 1
        if len(self.shown) < REFUSED_SHOWN:
            self.shown.append({"line": row.line, "reason": row.problem})


class UploadReader:
    def __init__(
        self,
        uploads: Uploads,
        files: UploadFiles,
        suppressed: Callable[[str], Iterable[str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._uploads = uploads
        self._files = files
        self._suppressed = suppressed
        self._clock = clock

    def read(self, upload: Upload, remaining_ms: Callable[[], int]) -> dict[str, Any] | None:
        """Read the upload (marked `reading` by whoever started it) and record its report, or why it is
        refused as a whole; the report (None when refused)."""
        try:
            report = self._read(upload, remaining_ms)
        except FileRefused as exc:
            self._uploads.finish_reading(upload, None, str(exc), self._clock())
            log.info("upload refused", user=upload.user_id, upload=upload.upload_id, reason=str(exc))
            return None
        self._uploads.finish_reading(upload, report, None, self._clock())
        log.info("upload read", user=upload.user_id, upload=upload.upload_id, **{k: report[k] for k in _COUNTS})
        return report

    def _read(self, upload: Upload, remaining_ms: Callable[[], int]) -> dict[str, Any]:
        files, user, uid = self._files, upload.user_id, upload.upload_id
        stored = files.stored(files.key(user, uid, SOURCE))
        if stored is None:
            raise FileRefused("nothing was uploaded: POST the file to the upload's url first")
        started = time.monotonic()
        source = _timed(lines(files.chunks(files.key(user, uid, SOURCE), stored)), remaining_ms)
        found, reader = rows(upload.format, source, upload.address_column)
        seen: set[int] = set()
        tally = Tally()
        with tempfile.TemporaryDirectory() as tmp:
            good_path, refused_path = os.path.join(tmp, "good"), os.path.join(tmp, "refused")
            with open(good_path, "w", encoding="utf-8") as good, open(refused_path, "w", encoding="utf-8") as bad:
                refused = csv.writer(bad, lineterminator="\r\n")
                refused.writerow(["line", "address", "reason"])
                for row in found:
                    tally.rows += 1
                    if tally.rows % _CHECK_EVERY == 0:
                        self._within_bounds(tally.rows, remaining_ms)
                    if row.recipient is None:
                        tally.refuse(row)
                        refused.writerow([row.line, cell(row.address), cell(row.problem)])
                        continue
                    digest = address_digest(row.recipient.email)
                    if digest in seen:
                        tally.duplicates += 1
                        continue
                    seen.add(digest)
                    tally.recipients += 1
                    good.write(_line(row.recipient.email, row.recipient.metadata))
            if tally.rows > MAX_ROWS:
                raise FileRefused(f"more than {MAX_ROWS:,} rows; split the file")
            files.keep_file(files.key(user, uid, RECIPIENTS), good_path, "application/jsonl")
            if tally.refused:
                files.keep_file(files.key(user, uid, REFUSED_ROWS), refused_path, "text/csv; charset=utf-8")
        suppressed = sum(1 for a in self._suppressed(user) if address_digest(a) in seen)
        report: dict[str, Any] = {
            "rows": tally.rows,
            "recipients": tally.recipients,
            "duplicates": tally.duplicates,
            "refused": tally.refused,
            "suppressed": suppressed,
            "refusedRows": tally.shown,
            "bytes": stored.size,
            "readSeconds": round(time.monotonic() - started, 3),
        }
        if reader is not None:
            report["columns"] = reader.columns
            report["addressColumn"] = reader.address
        return report

    @staticmethod
    def _within_bounds(count: int, remaining_ms: Callable[[], int]) -> None:
        if count > MAX_ROWS:
            raise FileRefused(f"more than {MAX_ROWS:,} rows; split the file")
        if remaining_ms() / 1000 < STOP_WITH_S:
            raise FileRefused(f"not read in the time a reading has ({count:,} rows read); split the file")


def _timed(source: Iterator[Line], remaining_ms: Callable[[], int]) -> Iterator[Line]:
    """The file's lines, its time checked every _CHECK_EVERY of them: blank lines make no rows, and a file
    of nothing else must stop in time too."""
    for n, line in enumerate(source, 1):
        if n % _CHECK_EVERY == 0 and remaining_ms() / 1000 < STOP_WITH_S:
            raise FileRefused(f"not read in the time a reading has ({n:,} lines read); split the file")
        yield line


_COUNTS = ("rows", "recipients", "duplicates", "refused", "suppressed")
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def _line(email: str, metadata: dict[str, Any]) -> str:
    return _ENCODE({"email": email, "metadata": metadata} if metadata else {"email": email}) + "\n"


def recipient_lines(data: bytes) -> list[dict[str, Any]]:
    """The recipients of a whole number of lines of `recipients.jsonl`."""
    # Split at "\n" only: a recipient's text may hold U+2028, which str.splitlines() would split at too.
    return [json.loads(t) for t in data.decode("utf-8").split("\n") if t]
