"""The demo's webhooks: a paid tenant's endpoint on a loopback receiver hears of every email of its campaign.

Registered before the campaign is published (as a tenant would, with `moonsend webhook add`), up to 25
events per request. Every request the receiver accepts is verified with the Standard Webhooks library and
the secret shown at registration; the demo waits for each recipient's `sent` and `delivered` events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from chalicelib import wiring
from chalicelib.core.errors import Refused
from infra.webhook_receiver import WebhookReceiver


@dataclass
class DemoWebhooks:
    user_id: str
    receiver: WebhookReceiver

    def wait(self, recipients: int, timeout_s: float = 60.0) -> dict[str, Any]:
        """Until every recipient's sent and delivered events arrived (or the timeout): what arrived."""
        want = 2 * recipients
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(self._events()) < want:
            time.sleep(0.25)
        events = self._events()
        types = {t: sum(1 for k, _ in events if k == t) for t in ("sent", "delivered")}
        return {
            "events": len(events),
            "requests": len(self.receiver.requests),
            "repeats": len(self.receiver.repeats),
            "ok": types == {"sent": recipients, "delivered": recipients} and not self.receiver.repeats,
            **types,
        }

    def _events(self) -> list[tuple[str, str]]:
        return [e for e in self.receiver.events() if e[0] in ("sent", "delivered")]


def register(user_id: str) -> DemoWebhooks:
    receiver = WebhookReceiver()
    body = {"url": receiver.url, "eventTypes": ["sent", "delivered", "bounced", "failed"], "maxEventsPerRequest": 25}
    try:
        added = wiring.container().webhook_registration.add(user_id, body)
    except Refused as refused:
        raise RuntimeError(f"webhook endpoint not registered: {refused.detail}") from None
    receiver.secret = str(added["secret"])
    return DemoWebhooks(user_id, receiver)
