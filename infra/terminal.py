"""Tenant text on an operator's terminal: shown as it is, never obeyed.

Reasons, campaign ids, addresses and error messages come from tenants' messages and recipients' data.
Rich would read `[/]` in them as markup (and fail the whole command), and a terminal would obey the
escape sequences in them (move the cursor, rewrite earlier lines, set the window title). `plain` shows
every control character as an escape (`\\x1b`), and `cell` makes a Rich cell that is never parsed.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls but tab, DEL, and C1 controls (some terminals obey 0x9b as ESC [).
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def plain(text: object) -> str:
    """`text` with each control character written as its escape (tab kept: it separates columns)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m[0]):02x}", str(text))


def cell(text: object) -> Text:
    """A Rich cell showing `text` literally: no markup, no control characters."""
    return Text(plain(text))
