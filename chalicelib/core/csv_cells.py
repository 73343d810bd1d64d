"""A cell of a CSV file moonsend writes, made safe to open in a spreadsheet.

A cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage return is written with a `'` before it
(OWASP's advice against CSV injection): a recipient's address, a row a tenant uploaded, an SES reason or a
bounce's words never run as a formula when the file is opened in a spreadsheet.
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> str:
    text = "" if value is None else str(value)
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text
