"""A queued email as precompile_email puts it on a tenant's queue, for the benches that fill one directly."""

from __future__ import annotations

from typing import Any

from chalicelib.core.contract import QueuedEmail
from chalicelib.core.links import LinkSigner

LINKS = LinkSigner(b"bench-link-secret-0123456789", "https://bench.example")


def queued_email(queued_sender: dict[str, Any], to: str, html: str, *, composed: bool = True) -> str:
    """Tenant `bench`, campaign `c1`: composed (as precompile queues email), or its HTML only (as queued
    before precompile composed it, which the drainer then composes)."""
    if not composed:
        return QueuedEmail("bench", "paid", queued_sender, "c1", "Hello", html, to).to_json()
    # Imported here: with `composed=False` this runs against code from before precompile composed email.
    from chalicelib.core.mime import OutgoingEmail, compose

    email = OutgoingEmail(
        queued_sender["emailAddress"],
        queued_sender["fromName"],
        to,
        "Hello",
        html,
        "bench",
        "c1",
        LINKS.unsubscribe_url("bench", "c1", to),
    )
    return QueuedEmail("bench", "paid", queued_sender, "c1", "Hello", None, to, mime=compose(email)).to_json()
