"""An upload's reading (chalicelib.produce.reading) on files in memory: its report, and the bounds that stop it
whatever the file holds (its time, counted in lines, so that a file of blank lines stops too); a reading
refused records why, and leaves no upload `reading`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from chalicelib.produce.reading import UploadReader
from chalicelib.stores.upload_files import Stored
from chalicelib.stores.uploads import READING, Upload


class MemoryFiles:
    def __init__(self, data: bytes) -> None:
        self.data, self.kept = data, {}

    def key(self, user_id: str, upload_id: str, name: str) -> str:
        return name

    def stored(self, key: str) -> Stored | None:
        return Stored(len(self.data), "e") if key == "file" else None

    def chunks(self, key: str, stored: Stored, start: int = 0, chunk: int = 1 << 20) -> Iterator[bytes]:
        for at in range(start, len(self.data), chunk):
            yield self.data[at : at + chunk]

    def keep_file(self, key: str, path: str, content_type: str) -> None:
        with open(path, "rb") as f:
            self.kept[key] = f.read()


class Finished:
    def __init__(self) -> None:
        self.said: list[tuple[Any, Any]] = []

    def finish_reading(self, upload: Upload, report: Any, problem: Any, now: float) -> None:
        self.said.append((report, problem))


def _read(data: bytes, remaining_ms: Any = lambda: 900_000, suppressed: tuple[str, ...] = ()) -> Finished:
    finished = Finished()
    reader = UploadReader(finished, MemoryFiles(data), lambda _user: suppressed)  # type: ignore[arg-type]
    reader.read(Upload("t", "up_1", READING, "csv", "f.csv", None, 0.0, 0.0), remaining_ms)
    return finished


def test_the_report_counts_each_row_once_and_the_suppressed_among_the_recipients():
    data = b"email,name\r\nann@example.org,A\r\nANN@example.org,A2\r\nbob@example.org,B\r\nnope,x\r\n"
    ((report, problem),) = _read(data, suppressed=("bob@example.org", "zed@example.org")).said
    assert problem is None
    assert {k: report[k] for k in ("rows", "recipients", "duplicates", "refused", "suppressed")} == {
        "rows": 4,
        "recipients": 2,
        "duplicates": 1,
        "refused": 1,
        "suppressed": 1,
    }


def test_a_file_of_blank_lines_stops_in_the_time_a_reading_has_and_says_so():
    time_left = iter([900_000] * 3 + [1_000] * 100)
    ((report, problem),) = _read(b"email\n" + b",\n" * 50_000, remaining_ms=lambda: next(time_left)).said
    assert report is None and problem.startswith("not read in the time a reading has (40,000 lines read)")


def test_a_file_with_nothing_uploaded_is_refused_with_why():
    finished = Finished()
    files = MemoryFiles(b"")
    files.stored = lambda key: None  # type: ignore[method-assign]
    UploadReader(finished, files, lambda _u: ()).read(  # type: ignore[arg-type]
        Upload("t", "up_1", READING, "csv", "f.csv", None, 0.0, 0.0), lambda: 900_000
    )
    assert finished.said == [(None, "nothing was uploaded: POST the file to the upload's url first")]
