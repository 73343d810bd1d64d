"""Reading the email we queue and send as a mail reader would: stdlib `email` with the strict policy."""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage
from typing import Any

from chalicelib.core.contract import MIME, unpack_mime


def parsed(raw: str | bytes) -> EmailMessage:
    """A message parsed with `email.policy.strict`: a defect in it raises rather than being repaired."""
    if isinstance(raw, bytes):
        return email.message_from_bytes(raw, policy=email.policy.strict)  # type: ignore[return-value]
    return email.message_from_string(raw, policy=email.policy.strict)  # type: ignore[return-value]


def queued_message(queued: dict[str, Any]) -> EmailMessage:
    """The message a queued email carries, composed by precompile."""
    return parsed(unpack_mime(queued["campaign"][MIME]))


def html_of(message: EmailMessage) -> str:
    part = message.get_body(("html",))
    assert part is not None, "no HTML part"
    return str(part.get_content())
