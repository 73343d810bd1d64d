"""The console's own email: sign-in links and invitations, from the platform's From address
(MOONSEND_CONSOLE_FROM, which `moonsend deploy` checks is verified in the platform's SES account).

Composed with the standard library's `email` (a text part and an HTML one, from Jinja templates with
autoescaping on: an admin's address or a tenant's id shows as text) and sent through the platform's SES
account without the stage's configuration set: these emails are no campaign's, so none of SES's events
about them reaches a ledger. They carry `_console` where a campaign's email carries its tenant's id (no
tenant id starts with an underscore), so whatever files sent email by tenant keeps them apart.
"""

from __future__ import annotations

from email.message import EmailMessage
from email.policy import SMTP
from email.utils import make_msgid
from typing import Any, Protocol

from chalicelib.console import pages
from chalicelib.core.contract import CAMPAIGN_HEADER, TENANT_HEADER

OUTBOX_TENANT = "_console"


class Mailer(Protocol):
    def send(self, message: EmailMessage) -> None: ...


class SesMailer:
    """Sends through SES (v2 SendEmail, raw content) in the platform's account."""

    def __init__(self, sesv2: Any) -> None:
        self._ses = sesv2

    def send(self, message: EmailMessage) -> None:
        self._ses.send_email(
            FromEmailAddress=str(message["From"]),
            Destination={"ToAddresses": [str(message["To"])]},
            Content={"Raw": {"Data": message.as_bytes()}},
        )


def _message(sender: str, to: str, subject: str, kind: str, template: str, **ctx: Any) -> EmailMessage:
    msg = EmailMessage(policy=SMTP)
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2].rstrip(">") or None)
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies to a sign-in link
    msg[TENANT_HEADER] = OUTBOX_TENANT
    msg[CAMPAIGN_HEADER] = kind
    msg.set_content(pages.render(f"mail/{template}.txt", to=to, **ctx))
    msg.add_alternative(pages.render(f"mail/{template}.html", to=to, **ctx), subtype="html")
    return msg


def sign_in_mail(sender: str, to: str, url: str, minutes: int) -> EmailMessage:
    return _message(sender, to, "Your moonsend sign-in link", "sign-in", "sign_in", url=url, minutes=minutes)


def invitation_mail(
    sender: str, to: str, tenant_id: str, role: str, by: str, url: str, sign_in_url: str, minutes: int
) -> EmailMessage:
    subject = f"You are invited to {tenant_id}'s moonsend console"
    ctx = {"tenant": tenant_id, "role": role, "by": by, "url": url, "sign_in_url": sign_in_url, "minutes": minutes}
    return _message(sender, to, subject, "invitation", "invitation", **ctx)
