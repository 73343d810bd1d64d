"""Text SQS takes: JSON with the code points SQS refuses in a message written as escapes.

SQS refuses a message holding anything outside #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
#x10000-#x10FFFF (its SendMessage reference; InvalidMessageContents). A tenant's text can hold them (a
template's literal U+FFFF, a rejection reason quoting it): written raw, the whole message is refused. JSON
can say each of them as a \\uXXXX escape, which decodes to the same text, so every JSON message moonsend
puts on a queue goes through `sqs_safe` first.
"""

from __future__ import annotations

import re

# What SQS refuses in a message: anything outside #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
# #x10000-#x10FFFF (lone surrogates among it). All of it is in the BMP, so one \uXXXX escape each.
_SQS_REFUSED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def sqs_safe(text: str) -> str:
    """JSON text with each code point SQS refuses written as its \\uXXXX escape: the same JSON value, and
    a message SQS takes. For JSON text only, where such code points can only be inside strings; and JSON
    holds no raw control character, so ASCII JSON (which CPython knows at no cost) is safe as it is."""
    if text.isascii():
        return text
    return _SQS_REFUSED.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"
