"""Building the raw MIME message of one campaign email with the stdlib `email` package.

multipart/alternative with a plain-text part derived from the HTML (spam filters and text-only
clients want one), From with the display name, RFC 2047 encoding of non-ASCII headers (done by the
SMTP policy), a Message-ID on the sender's domain, and headers naming tenant and campaign.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime, make_msgid
from html.parser import HTMLParser

TENANT_HEADER = "X-Moonsend-Tenant"
CAMPAIGN_HEADER = "X-Moonsend-Campaign"


@dataclass(frozen=True)
class OutgoingEmail:
    from_address: str
    from_name: str
    to: str
    subject: str
    html: str
    user_id: str
    campaign_id: str


class _TextExtractor(HTMLParser):
    _BLOCK: frozenset[str] = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol"}
    )
    _SKIP: frozenset[str] = frozenset({"style", "script", "head", "title"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._href: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skip += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")
        if tag == "a":
            self._href.append(dict(attrs).get("href"))

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in self._BLOCK:
            self.parts.append("\n")
        if tag == "a" and self._href:
            href = self._href.pop()
            if href and not href.startswith(("#", "mailto:")):
                self.parts.append(f" ({href})")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    lines = [re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def build_mime(email: OutgoingEmail) -> bytes:
    msg = EmailMessage(policy=SMTP)
    local, _, domain = email.from_address.rpartition("@")
    msg["From"] = Address(display_name=email.from_name or "", username=local, domain=domain)
    msg["To"] = email.to
    msg["Subject"] = email.subject
    msg["Date"] = format_datetime(datetime.now(UTC))
    msg["Message-ID"] = make_msgid(domain=domain)
    msg[TENANT_HEADER] = email.user_id
    msg[CAMPAIGN_HEADER] = email.campaign_id
    msg.set_content(html_to_text(email.html), subtype="plain", charset="utf-8")
    msg.add_alternative(email.html, subtype="html", charset="utf-8")
    return msg.as_bytes()
