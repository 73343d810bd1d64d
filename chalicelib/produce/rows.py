"""An uploaded file's rows, read as a stream: CSV (RFC 4180, UTF-8 with or without a BOM, a header row) or JSON
Lines, each row made a recipient or refused with its line number and why.

Bounded whatever the file holds: a line is at most MAX_LINE_BYTES (a longer one is refused without being
kept), a header at most MAX_COLUMNS columns, and nothing a row holds is ever evaluated (a cell starting
with `=` is text here; files we write escape it: chalicelib.produce.cells).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from chalicelib.core.contract import MAX_METADATA_BYTES, Recipient, RejectedRecipient
from chalicelib.core.fields import lone_surrogate
from chalicelib.core.message_parser import check_recipient

CSV, JSON_LINES = "csv", "jsonl"
FORMATS = (CSV, JSON_LINES)
# A recipient row is its address and at most MAX_METADATA_BYTES of metadata: a line four times that is no
# recipient, and is refused without being held (a 2 GB line costs reading it, never memory).
MAX_LINE_BYTES = 4 * MAX_METADATA_BYTES
MAX_COLUMNS = 200
# A record may span lines (a quoted field holding line breaks), but not this many: a quote never closed
# would otherwise gather the rest of the file into one record, field by field, in memory.
MAX_RECORD_LINES = 1000
# The header names that are taken for the address column when the upload names none (case aside).
ADDRESS_COLUMNS = ("email", "e-mail", "email address", "e-mail address", "emailaddress", "mail", "address")
_BOM = b"\xef\xbb\xbf"


class FileRefused(Exception):
    """The file as a whole cannot be read as recipients (no header, no address column, too many columns)."""


@dataclass(frozen=True)
class Line:
    """One physical line: its number (from 1), its text (with its line end), or why it has none."""

    number: int
    text: str
    problem: str | None = None


@dataclass(frozen=True)
class Row:
    """A data row: the line it starts on, and its recipient or why it is refused."""

    line: int
    recipient: Recipient | None
    problem: str | None = None
    address: str | None = None  # as given, for the refused rows' report


def lines(chunks: Iterable[bytes], max_line: int = MAX_LINE_BYTES) -> Iterator[Line]:
    """The file's lines from its bytes in any chunking; a UTF-8 BOM at its start dropped."""
    number, held, skipping, first = 0, bytearray(), False, True
    for chunk in chunks:
        if first and chunk:
            held += chunk
            if len(held) < len(_BOM) and _BOM.startswith(bytes(held)):
                continue  # the BOM itself split across chunks
            if held.startswith(_BOM):
                del held[: len(_BOM)]
            chunk, first = bytes(held), False
            held = bytearray()
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                if not skipping:
                    held += chunk[start:]
                    if len(held) > max_line:
                        held, skipping = bytearray(), True
                break
            number += 1
            if skipping:
                yield Line(number, "\n", f"longer than {max_line:,} bytes")
                skipping = False
            else:
                held += chunk[start : end + 1]
                yield _line(number, bytes(held), max_line)
                held = bytearray()
            start = end + 1
    if skipping:
        yield Line(number + 1, "\n", f"longer than {max_line:,} bytes")
    elif held.strip():
        yield _line(number + 1, bytes(held) + b"\n", max_line)


def _line(number: int, raw: bytes, max_line: int) -> Line:
    if len(raw) > max_line:
        return Line(number, "\n", f"longer than {max_line:,} bytes")
    try:
        return Line(number, raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return Line(number, "\n", f"not UTF-8 (byte {exc.start + 1} of the line); save the file as UTF-8")


def address_column(header: list[str], named: str | None) -> str:
    """The column the addresses are in: the one named, or the first header that says it is."""
    if named is not None:
        if named not in header:
            raise FileRefused(f"no column {named!r} in the header ({_listed(header)})")
        return named
    for column in header:
        if column.strip().lower() in ADDRESS_COLUMNS:
            return column
    raise FileRefused(f"no address column: name one (addressColumn), or call it email ({_listed(header)})")


def _listed(header: list[str]) -> str:
    shown = ", ".join(repr(h) for h in header[:10])
    return f"its columns are {shown}{', ...' if len(header) > 10 else ''}" if header else "it is empty"


class CsvRows:
    """A CSV file's rows, after its header; `columns` once the header is read."""

    def __init__(self, source: Iterable[Line], named: str | None = None) -> None:
        self._source = iter(source)
        self._named = named
        self._consumed = 0
        self._start = 1
        self._problems: dict[int, str] = {}
        self.columns: list[str] = []
        self.address: str = ""

    def _texts(self) -> Iterator[str]:
        for line in self._source:
            self._consumed = line.number
            if line.number - self._start >= MAX_RECORD_LINES:
                raise FileRefused(
                    f"line {self._start}: a quoted field is never closed (a record of over {MAX_RECORD_LINES:,} lines)"
                )
            if line.problem is not None:
                self._problems[line.number] = line.problem
            yield line.text

    def __iter__(self) -> Iterator[Row]:
        reader = csv.reader(self._texts(), strict=True)
        header = self._header(reader)
        self.columns, self.address = header, address_column(header, self._named)
        at = header.index(self.address)
        while True:
            start = self._start = self._consumed + 1
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield Row(start, None, f"not CSV: {exc}")
                continue
            problem = next((p for n, p in self._problems.items() if n >= start), None)
            self._problems.clear()
            if problem is not None:
                yield Row(start, None, problem)
            elif fields and any(f.strip() for f in fields):
                yield self._row(start, fields, at)

    def _header(self, reader: Iterator[list[str]]) -> list[str]:
        for fields in reader:
            if self._problems:
                raise FileRefused(f"line {self._consumed}: the header is {next(iter(self._problems.values()))}")
            if not any(f.strip() for f in fields):
                continue
            if len(fields) > MAX_COLUMNS:
                raise FileRefused(f"{len(fields):,} columns; at most {MAX_COLUMNS}")
            names = [f.strip() or f"column {n}" for n, f in enumerate(fields, 1)]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise FileRefused(f"the header names {twice[0]!r} twice")
            return names
        raise FileRefused("no header row: the first line names the columns")

    def _row(self, line: int, fields: list[str], at: int) -> Row:
        header = self.columns
        if len(fields) > len(header):
            return Row(line, None, f"{len(fields)} fields, the header has {len(header)}")
        email = fields[at].strip() if at < len(fields) else ""
        metadata = {c: fields[n] if n < len(fields) else "" for n, c in enumerate(header) if n != at}
        return _recipient(line, email, metadata, self.address)


def json_rows(source: Iterable[Line]) -> Iterator[Row]:
    """JSON Lines: each line an object with `email` and either `metadata` or the rest as metadata."""
    for line in source:
        if line.problem is not None:
            yield Row(line.number, None, line.problem)
            continue
        if not line.text.strip():
            continue
        try:
            d = json.loads(line.text)
        except ValueError as exc:
            yield Row(line.number, None, f"not JSON: {exc}")
            continue
        except RecursionError:
            yield Row(line.number, None, "not JSON: nested too deeply")
            continue
        if not isinstance(d, dict):
            yield Row(line.number, None, "not a JSON object")
            continue
        email = d.get("email")
        metadata = d["metadata"] if "metadata" in d else {k: v for k, v in d.items() if k != "email"}
        yield _recipient(line.number, email, metadata, "email")


def _recipient(line: int, email: object, metadata: object, column: str) -> Row:
    if lone_surrogate({"email": email, "metadata": metadata}, "") is not None:
        # JSON's \ud83d alone (a string cut in half): no UTF-8 file, message or table can hold it.
        return Row(line, None, "not valid Unicode (a lone UTF-16 surrogate)")
    checked = check_recipient({"email": email, "metadata": metadata}, "recipient")
    if isinstance(checked, RejectedRecipient):
        reason = checked.reason.replace("recipient.email", column, 1).replace("recipient.metadata", "the row", 1)
        return Row(line, None, reason, email if isinstance(email, str) else None)
    return Row(line, checked)


def rows(kind: str, source: Iterable[Line], named: str | None = None) -> tuple[Iterator[Row], CsvRows | None]:
    """The rows of a file of `kind`; for CSV also the reader, whose `columns` are known once reading began."""
    if kind == CSV:
        reader = CsvRows(source, named)
        return iter(reader), reader
    return json_rows(source), None
