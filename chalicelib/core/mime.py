"""Building the raw MIME message of one campaign email with the stdlib `email` package.

multipart/alternative with a plain-text part derived from the HTML (spam filters and text-only
clients want one), From with the display name, RFC 2047 encoding of non-ASCII headers, a Message-ID
on the Sender's domain, and headers naming tenant and campaign.
"""

from __future__ import annotations

import html
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from email.charset import QP, Charset
from email.header import Header
from email.message import Message
from email.mime.multipart import MIMEMultipart
from email.policy import Compat32
from email.utils import format_datetime, formataddr, make_msgid
from typing import Any

from chalicelib.core import html_scan
from chalicelib.core.contract import CAMPAIGN_HEADER, TENANT_HEADER

_QP_UTF8 = Charset("utf-8")
_QP_UTF8.body_encoding = QP


MAX_HEADER_LINE = 998
# What may not be in a List-Id's dot-atom (RFC 5322 atext, less the dot that separates labels).
# `=?utf-8?b?` + base64 of 45 bytes (60 characters) + `?=`: 72, within RFC 2047's 75.
_ENCODED_WORD_BYTES = 45
_UTF8_HEADER = Charset("utf-8")
_LIST_ID_UNSAFE = re.compile(r"[^A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+")


class _Smtp(Compat32):
    """compat32 with CRLF line ends, and one-line ASCII headers written as they are.

    compat32 runs every header through `email.header.Header` to fold it at 78 characters; for an ASCII
    header that is pure cost (half of building a message), and for a long URL (List-Unsubscribe) it only
    puts the whole value on a continuation line. RFC 5322 asks lines to be at most 998 characters and
    only recommends 78; non-ASCII values (RFC 2047 encoded words) are folded as before.
    """

    def _fold(self, name: str, value: Any, sanitize: bool) -> str:
        if (
            isinstance(value, str)
            and value.isascii()
            and "\n" not in value
            and "\r" not in value
            and len(name) + 2 + len(value) <= MAX_HEADER_LINE
        ):
            return f"{name}: {value}{self.linesep}"
        return str(super()._fold(name, value, sanitize))  # type: ignore[misc]  # SMTP policy's own hook


# Folded lines of at most 76 characters: a continuation line is a space and one encoded word, which
# RFC 2047 §2 limits to 75 (compat32's 78 made words of 77).
SMTP_COMPAT = _Smtp(linesep="\r\n", max_line_length=76)


@dataclass(frozen=True)
class OutgoingEmail:
    from_address: str
    from_name: str
    to: str
    subject: str
    html: str
    user_id: str
    campaign_id: str
    unsubscribe_url: str | None = None


# The text part is derived in one forward pass over the tags (chalicelib.core.html_scan), linear in the HTML's
# length whatever its markup, rather than html.parser (about 8 us per tag, and as quadratic as the regular
# expressions it would replace on hostile markup); a text alternative needs paragraphs, link targets and
# no CSS, not a faithful DOM.
_INVISIBLE = frozenset({"style", "script", "head", "title"})
_BLOCK = frozenset(
    {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "blockquote", "hr"}
)
_SPACES = re.compile(r"[ \t\r\f\v]+")
_AROUND_BREAKS = re.compile(r" ?\n ?")
_BLANK_LINES = re.compile(r"\n{3,}")


def _link_target(source: str, tag: html_scan.Tag) -> str | None:
    found = html_scan.href(source, tag)
    target = html.unescape(found.value) if found is not None else ""
    return target if target and not target.startswith(("#", "mailto:")) else None


def html_to_text(source: str) -> str:
    """A plain-text rendering of an email's HTML: block elements as line breaks, links as `text (url)`."""
    out: list[str] = []
    lowered: str | None = None  # made once, when the end of a style or script is looked for
    link: str | None = None  # the open `<a>`'s target
    pos = 0
    while True:
        for tag in html_scan.tags(source, pos):
            out.append(source[pos : tag.start])
            pos = tag.end
            if tag.name in _INVISIBLE and not tag.closing:
                lowered = lowered if lowered is not None else source.lower()
                end = lowered.find(f"</{tag.name}", tag.end)
                pos = end if end >= 0 else len(source)  # never closed: the rest is not shown
                break  # the scan goes on from its closing tag: a forward jump, so still linear
            link = _text_of_tag(out, source, tag, link)
        else:
            out.append(source[pos:])
            return _normalised("".join(out))


def _text_of_tag(out: list[str], source: str, tag: html_scan.Tag, link: str | None) -> str | None:
    """What one tag adds to the text (a line break, a link's target); returns the open link's target."""
    if tag.name == "a":
        if not tag.closing:
            return _link_target(source, tag)
        if link:
            out.append(f" ({link})")
        return None
    if tag.name in _BLOCK:
        out.append("\n")
    return link


def _normalised(text: str) -> str:
    text = html.unescape(text)
    text = _AROUND_BREAKS.sub("\n", _SPACES.sub(" ", text))
    return _BLANK_LINES.sub("\n\n", text).strip() + "\n"


def _header(value: str, name: str) -> str | Header:
    """A header value as is when it is ASCII and fits a line, else RFC 2047 encoded words (UTF-8).

    Encoded words are at most 75 characters each and folded between them (RFC 2047 §2), so a value of
    any length and language keeps every line within RFC 5322's 998 (a subject without white space
    cannot be folded any other way)."""
    if value.isascii() and len(name) + 2 + len(value) <= MAX_HEADER_LINE:
        return value
    return Header(value, "utf-8", header_name=name)


def _from(name: str, address: str) -> str:
    """`"Name" <address>`; a non-ASCII name as RFC 2047 encoded words of at most 75 characters, cut
    between its words (formataddr makes one word of any length, and Header cuts inside words, which some
    decoders show as a stray space)."""
    if not name or (name.isascii() and "=?" not in name):
        return formataddr((name, address))
    # Non-ASCII, or text that a reader would decode as encoded words of its own (`=?utf-8?q?=1B...?=`
    # would smuggle in the control characters the contract refuses): encoded, so it reads as written.
    return f"{' '.join(_UTF8_HEADER.header_encode(p) for p in _word_pieces(name))} <{address}>"


def _word_pieces(text: str) -> list[str]:
    """`text` as few pieces as fit encoded words, cut at spaces (a word longer than one, between characters).

    The space between two pieces goes at the end of the first: the white space between encoded words is
    not part of the text (RFC 2047 §6.2)."""
    words = text.split()
    pieces: list[str] = []
    current = ""
    for i, word in enumerate(words):
        piece = word if i == len(words) - 1 else f"{word} "
        if len((current + piece).encode("utf-8")) <= _ENCODED_WORD_BYTES:
            current += piece
            continue
        if current:
            pieces.append(current)
        *whole, current = _utf8_pieces(piece, _ENCODED_WORD_BYTES)
        pieces.extend(whole)
    pieces.append(current)
    return [p for p in pieces if p]


def _utf8_pieces(text: str, max_bytes: int) -> list[str]:
    """`text` cut between characters into pieces of at most `max_bytes` of UTF-8."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for ch in text:
        n = len(ch.encode("utf-8"))
        if size + n > max_bytes and current:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(ch)
        size += n
    pieces.append("".join(current))
    return pieces


def list_id(campaign_id: str, user_id: str, from_address: str) -> str:
    """RFC 2919's List-Id: the campaign, the tenant and the Sender's domain, as a dot-atom.

    Filters weigh a List-Id on bulk mail; one per campaign lets a reader filter or report one campaign."""
    domain = from_address.rpartition("@")[2]
    # Each label at most 63 characters (a DNS label), and the ids, not the domain, give way to the
    # 255-character limit of the whole: the domain is what says whose list it is.
    labels = [
        (_LIST_ID_UNSAFE.sub("-", part).strip("-") or "x")[:63].strip("-") or "x" for part in (campaign_id, user_id)
    ]
    room = max(1, 253 - len(domain) - 1)
    head = ".".join(labels)[:room].strip(".-") or "x"
    return f"<{head}.{domain}>"


def _part(text: str, subtype: str) -> Message:
    """A UTF-8 text part, quoted-printable (readable, and what filters expect of mostly-ASCII text).

    The headers are given as they are written and the payload encoded once: `MIMEText` would parse its
    own Content-Type back into parameters to set the charset, for every part of every email."""
    part = Message()
    part["Content-Type"] = f'text/{subtype}; charset="utf-8"'
    part["Content-Transfer-Encoding"] = "quoted-printable"
    part.set_payload(_QP_UTF8.body_encode(text))
    return part


def compose(email: OutgoingEmail) -> str:
    """The message without its Date: every header and part, CRLF line ends, 7-bit.

    precompile_email composes each email as it renders it, and the queued email carries the result: the
    drainer, which one tenant's whole rate goes through, then only dates it (`dated`). Composing costs
    about as much CPU as the rest of a send; precompile runs as many at once as there are messages.

    Built with the `email.mime` classes and the compat32 policy: `EmailMessage` with a modern policy
    parses every header it is given back into objects, which cost about 1 ms per email.
    """
    domain = email.from_address.rpartition("@")[2]
    # Our own boundary: "=_" never occurs in quoted-printable text (it writes "=" as "=3D"), so it needs
    # no check; left to the generator, it checks with a regular expression compiled for every message.
    # 96 random bits, short enough that Content-Type stays on one line (no folding, see _Smtp).
    msg = MIMEMultipart("alternative", boundary=f"=_ms_{uuid.uuid4().hex[:24]}")
    msg["From"] = _from(email.from_name, email.from_address)
    msg["To"] = email.to
    msg["Subject"] = _header(email.subject, "Subject")  # type: ignore[assignment]  # compat32 takes a Header
    # Made once, when the email is composed: a copy sent again (which the ledger prevents) would carry the
    # same Message-ID, and mailbox providers show one.
    msg["Message-ID"] = make_msgid(domain=domain)
    msg[TENANT_HEADER] = email.user_id
    msg[CAMPAIGN_HEADER] = email.campaign_id
    msg["List-Id"] = list_id(email.campaign_id, email.user_id, email.from_address)
    if email.unsubscribe_url:
        # RFC 2369 and RFC 8058: mailbox providers show an unsubscribe button and POST to the link.
        msg["List-Unsubscribe"] = f"<{email.unsubscribe_url}>"
        msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    msg.attach(_part(html_to_text(email.html), "plain"))
    msg.attach(_part(email.html, "html"))
    return msg.as_bytes(policy=SMTP_COMPAT).decode("ascii")


def dated(composed: str, at: datetime | None = None) -> bytes:
    """The composed message as sent: its Date (RFC 5322 §3.6.1: when it was handed on) put first."""
    return f"Date: {format_datetime(at or datetime.now(UTC))}\r\n{composed}".encode("ascii")


def build_mime(email: OutgoingEmail) -> bytes:
    """The raw message, composed and dated now."""
    return dated(compose(email))
