"""Webhook signatures per the Standard Webhooks specification (its own Python library signs).

Each request carries `webhook-id` (the same on every retry of it, so a receiver can drop a repeat),
`webhook-timestamp` (Unix seconds) and `webhook-signature` (`v1,<base64 HMAC-SHA256 of
"<id>.<timestamp>.<body>">` with the endpoint's secret). The secret is `whsec_` and 32 random bytes in
base64, shown to the tenant once, when the endpoint is registered.
"""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def signed_headers(secret: str, message_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The three headers of a request whose body is `body`."""
    signature = Webhook(secret).sign(message_id, datetime.fromtimestamp(timestamp, UTC), body)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
        "content-type": "application/json",
    }
