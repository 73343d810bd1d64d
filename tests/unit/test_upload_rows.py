"""An uploaded file read as recipients: CSV files as other tools write them (Excel's UTF-8 CSV, Google Sheets,
LibreOffice; made here from their documented formats) parse to the same recipients; hostile files are
refused or bounded with a reason, row by row where the rest of the file is still good."""

from __future__ import annotations

import json

import pytest

from chalicelib.produce.rows import CSV, JSON_LINES, MAX_COLUMNS, MAX_RECORD_LINES, FileRefused, lines, rows

PEOPLE = [("ann@example.org", "Ann", "Lee, Jr."), ("bob@example.org", "Bob", 'Said "hi"'), ("cy@example.org", "Cy", "")]


def _read(data: bytes, kind: str = CSV, chunk: int = 7, named: str | None = None, max_line: int | None = None):
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)] or [b""]
    source = lines(chunks) if max_line is None else lines(chunks, max_line)
    found, reader = rows(kind, source, named)
    return list(found), reader


def _recipients(found) -> list[tuple[str, dict[str, str]]]:
    return [(r.recipient.email, dict(r.recipient.metadata)) for r in found if r.recipient is not None]


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


# Excel's "CSV UTF-8 (Comma delimited)": a byte-order mark, CRLF line ends, a field quoted only when it holds
# a comma, a quote or a line break (RFC 4180's rules), quotes doubled.
def _excel() -> bytes:
    out = ["Email,First name,Note"]
    for e, n, note in PEOPLE:
        out.append(",".join(_quoted(v) if any(c in v for c in ',"\r\n') else v for v in (e, n, note)))
    return ("\ufeff" + "\r\n".join(out) + "\r\n").encode("utf-8")


# Google Sheets' "Comma-separated values (.csv)": no byte-order mark, CRLF between rows and none after the last.
def _sheets() -> bytes:
    out = ["Email,First name,Note"]
    for e, n, note in PEOPLE:
        out.append(",".join(_quoted(v) if any(c in v for c in ',"\r\n') else v for v in (e, n, note)))
    return "\r\n".join(out).encode("utf-8")


# LibreOffice Calc's Text CSV export with "Quote all text cells": LF line ends, every text field quoted.
def _libreoffice() -> bytes:
    out = ['"Email","First name","Note"']
    out += [",".join(_quoted(v) for v in (e, n, note)) for e, n, note in PEOPLE]
    return ("\n".join(out) + "\n").encode("utf-8")


@pytest.mark.parametrize("made", [_excel, _sheets, _libreoffice], ids=["excel", "google-sheets", "libreoffice"])
def test_csv_files_of_other_tools_read_to_the_same_recipients(made):
    found, reader = _read(made())
    assert reader is not None and reader.columns == ["Email", "First name", "Note"] and reader.address == "Email"
    assert _recipients(found) == [(e, {"First name": n, "Note": note}) for e, n, note in PEOPLE]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 64, 10_000])
def test_any_chunking_of_the_bytes_reads_the_same_rows(chunk):
    data = _excel() + 'zoe@example.org,Zoë,"two\r\nlines"\r\n'.encode()
    found, _ = _read(data, chunk=chunk)
    assert _recipients(found)[-1] == ("zoe@example.org", {"First name": "Zoë", "Note": "two\r\nlines"})
    assert [r.line for r in found] == [2, 3, 4, 5]


def test_a_row_spanning_lines_is_numbered_by_the_line_it_starts_on():
    data = b'email,note\r\nann@example.org,"a\r\nb\r\nc"\r\nbad,x\r\n'
    found, _ = _read(data)
    assert [(r.line, r.problem) for r in found] == [(2, None), (5, "email: not an email address")]


def test_the_address_column_is_found_by_name_or_named_and_a_missing_one_refuses_the_file():
    data = b"Name,E-Mail\nAnn,ann@example.org\n"
    assert _recipients(_read(data)[0]) == [("ann@example.org", {"Name": "Ann"})]
    data = b"name,work\nAnn,ann@example.org\n"
    with pytest.raises(FileRefused, match="no address column"):
        _read(data)
    assert _recipients(_read(data, named="work")[0]) == [("ann@example.org", {"name": "Ann"})]
    with pytest.raises(FileRefused, match="no column 'home'"):
        _read(data, named="home")


def test_a_header_of_too_many_or_repeated_columns_refuses_the_file():
    wide = ",".join(["email", *(f"c{i}" for i in range(MAX_COLUMNS))]).encode() + b"\n"
    with pytest.raises(FileRefused, match=f"at most {MAX_COLUMNS}"):
        _read(wide + b"ann@example.org\n")
    with pytest.raises(FileRefused, match="names 'name' twice"):
        _read(b"email,name,name\n")
    with pytest.raises(FileRefused, match="no header row"):
        _read(b"\r\n\r\n")


def test_a_line_past_the_limit_is_refused_without_being_held_and_the_rows_after_it_are_read():
    huge = b"ann@example.org," + b"x" * 5000 + b"\n"
    found, _ = _read(b"email,note\n" + huge + b"bob@example.org,ok\n", chunk=100, max_line=1024)
    assert [(r.line, r.problem) for r in found] == [(2, "longer than 1,024 bytes"), (3, None)]


def test_a_row_of_another_encoding_is_refused_alone_with_why():
    latin1 = "zoë@example.org,Zoë\n".encode("latin-1")
    found, _ = _read(b"email,name\nann@example.org,Ann\n" + latin1 + b"bob@example.org,Bob\n")
    assert [r.line for r in found] == [2, 3, 4]
    assert found[1].recipient is None and "not UTF-8" in (found[1].problem or "")
    assert _recipients(found) == [("ann@example.org", {"name": "Ann"}), ("bob@example.org", {"name": "Bob"})]


def test_formula_cells_are_text_never_evaluated():
    data = b'email,name\nann@example.org,"=HYPERLINK(""http://evil.example"",""x"")"\n=1+1,Bob\n'
    found, _ = _read(data)
    assert _recipients(found) == [("ann@example.org", {"name": '=HYPERLINK("http://evil.example","x")'})]
    assert found[1].problem == "email: not an email address" and found[1].address == "=1+1"


def test_a_row_with_more_fields_than_the_header_is_refused_and_a_shorter_one_is_padded():
    found, _ = _read(b"email,a,b\nann@example.org,1\nbob@example.org,1,2,3\n")
    assert _recipients(found) == [("ann@example.org", {"a": "1", "b": ""})]
    assert found[1].problem == "4 fields, the header has 3"


def test_json_lines_take_metadata_or_the_other_keys_and_refuse_what_is_not_an_object():
    data = "\n".join(
        [
            json.dumps({"email": "ann@example.org", "metadata": {"name": "Ann"}}),
            json.dumps({"email": "bob@example.org", "name": "Bob", "tier": 2}),
            "",
            "[1, 2]",
            "{not json",
            json.dumps({"email": "cy@example.org", "metadata": "x"}),
        ]
    ).encode()
    found, reader = _read(data, JSON_LINES)
    assert reader is None
    assert _recipients(found) == [("ann@example.org", {"name": "Ann"}), ("bob@example.org", {"name": "Bob", "tier": 2})]
    assert [(r.line, (r.problem or "")[:16]) for r in found[2:]] == [
        (4, "not a JSON objec"),
        (5, "not JSON: Expect"),
        (6, "the row: must be"),
    ]


def test_a_bom_split_across_chunks_is_still_dropped():
    found, reader = _read(_excel(), chunk=1)
    assert reader is not None and reader.columns[0] == "Email"
    assert len(_recipients(found)) == 3


def test_a_json_line_with_a_lone_surrogate_is_refused_alone():
    data = b'{"email": "ann@example.org", "metadata": {"n": "\\ud83d"}}\n{"email": "bob@example.org"}\n'
    found, _ = _read(data, JSON_LINES)
    assert [(r.line, r.problem) for r in found] == [(1, "not valid Unicode (a lone UTF-16 surrogate)"), (2, None)]


def test_a_quote_never_closed_refuses_the_file_before_it_gathers_the_rest_of_it():
    data = b'email,note\nann@example.org,"open\n' + b'","x\n' * (MAX_RECORD_LINES + 5)
    with pytest.raises(FileRefused, match="line 2: a quoted field is never closed"):
        _read(data, chunk=4096)
    closed = b'email,note\nann@example.org,"' + b"x\n" * (MAX_RECORD_LINES - 5) + b'"\nbob@example.org,y\n'
    assert [r.line for r in _read(closed, chunk=4096)[0]] == [2, MAX_RECORD_LINES - 2]  # 995 lines in one record
