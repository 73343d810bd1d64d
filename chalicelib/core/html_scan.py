"""Tags of an email's HTML found in linear time, whatever the markup.

Tenants' HTML is untrusted, and regular expressions over it (`<a\\b[^>]*?href...`, `<!--.*?-->`) or
html.parser scan to the end of the document from every `<` that is never closed: 47 KiB of `<a ` took
19 s, four times more at each doubling. Here every search goes forward only: the position of the next
`>` and of the next `-->` is found once and reused until the scan passes it, so each character is
looked at a bounded number of times. A tag ends at its first `>` (as the expressions it replaces read
it, a `>` inside a quoted attribute value ends it too); a `<` not followed by a letter or `/letter` is text,
and so is a tag interrupted by another `<` before its `>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

# A tag ends at the first `>`; one that meets another `<` first is no tag (`[^<>]`: each character is
# looked at by one attempt only, so the search is linear; the expressions it replaces used `[^>]`, which
# scans to the document's end from every unclosed `<`). A comment ends at its `-->`, found separately.
# Possessive quantifiers: a name or attribute run never gives back characters, so an unclosed `<aaaa...`
# is not rescanned once per character. A `<!DOCTYPE>`, `<![if mso]>` or `<?xml?>` is a declaration
# (name "!"); a tag cut by another `<` before its `>` ends there (the `<` starts the next one).
_TAG_OR_COMMENT = re.compile(r"<!--|<[!?][^<>]*+>|<(/?)([A-Za-z][A-Za-z0-9-]*+)([^<>]*+)(?:>|(?=<))")
# An attribute's name, `=` and quoted value, within one tag's text (tags do not overlap: linear overall).
_HREF = re.compile(r"""(?:^|[\s"'/])href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""", re.I)


class Tag(NamedTuple):
    start: int  # index of `<`
    end: int  # index after `>`
    name: str  # lower case; "!--" for a comment
    closing: bool  # `</name>`
    attrs: int  # index where the attributes begin


class Href(NamedTuple):
    value: str  # as written (entities not decoded)
    start: int  # the value's span in the source, quotes excluded
    end: int
    quoted: bool


def tags(source: str, pos: int = 0) -> Iterator[Tag]:
    """Every tag and comment of `source` from `pos`, in order."""
    length = len(source)
    next_comment_end = -2  # not looked for yet
    while pos < length:
        for m in _TAG_OR_COMMENT.finditer(source, pos):
            if m[2] is not None:
                yield Tag(m.start(), m.end(), m[2].lower(), m[1] == "/", m.start(3))
                continue
            if m[0] != "<!--":  # a declaration or processing instruction: not text, no element
                yield Tag(m.start(), m.end(), "!", False, m.end())
                continue
            start = m.start()  # a comment: it ends at the next `-->`, wherever that is
            if next_comment_end != -1 and next_comment_end < start + 4:
                next_comment_end = source.find("-->", start + 4)
            if next_comment_end == -1:  # unclosed: the rest is the comment
                yield Tag(start, length, "!--", False, start + 4)
                return
            yield Tag(start, next_comment_end + 3, "!--", False, start + 4)
            pos = next_comment_end + 3
            break  # on after the comment (a forward jump)
        else:
            return


_ANCHOR = re.compile(r"<a\b", re.I)


def anchors(source: str) -> Iterator[Tag]:
    """The `<a ...>` start tags of `source`, in order (found by a C search: tracking runs per recipient)."""
    pos, next_gt = 0, -2
    for m in _ANCHOR.finditer(source):
        lt = m.start()
        if lt < pos:  # inside the previous anchor's tag
            continue
        if next_gt != -1 and next_gt < lt + 1:
            next_gt = source.find(">", lt + 1)
        if next_gt == -1:
            return
        yield Tag(lt, next_gt + 1, "a", False, m.end())
        pos = next_gt + 1


def href(source: str, tag: Tag) -> Href | None:
    """The tag's `href` attribute, if it has one."""
    m = _HREF.search(source, tag.attrs, tag.end - 1)
    if m is None:
        return None
    for group in (1, 2, 3):
        if m[group] is not None:
            return Href(m[group], m.start(group), m.end(group), group != 3)
    return None
