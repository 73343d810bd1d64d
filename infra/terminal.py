"""Tenant text on an operator's terminal: shown as it is, never obeyed.

Reasons, campaign ids, addresses and error messages come from tenants' messages and recipients' data.
Rich would read `[/]` in them as markup (and fail the whole command), and a terminal would obey the
escape sequences in them (move the cursor, rewrite earlier lines, set the window title), and bidirectional
overrides would reorder what the operator reads. `plain` shows each of those characters as an escape
(`\\x1b`, `\\u202e`) and a backslash as `\\\\`, so that text the tenant typed as `\\x1b` never looks like an
escaped control; `cell` makes a Rich cell that is never parsed. `spreadsheet_safe` keeps a CSV cell from
being read as a formula.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls but tab, DEL, C1 controls (some terminals obey 0x9b as ESC [), the backslash (so escapes are
# unambiguous), and the bidirectional marks, embeddings, overrides and isolates.
_SHOWN_ESCAPED = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\\\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# What a spreadsheet reads as the start of a formula (OWASP's CSV injection list).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escape(m: re.Match[str]) -> str:
    c = m[0]
    if c == "\\":
        return "\\\\"
    return f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}"


def plain(text: object) -> str:
    """`text` with each control character written as its escape (tab kept: it separates columns)."""
    return _SHOWN_ESCAPED.sub(_escape, str(text))


def spreadsheet_safe(text: object) -> str:
    """A CSV cell a spreadsheet shows as text: one starting like a formula gets a leading apostrophe."""
    value = str(text)
    return "'" + value if value.startswith(_FORMULA_START) else value


def cell(text: object) -> Text:
    """A Rich cell showing `text` literally: no markup, no control characters."""
    return Text(plain(text))
