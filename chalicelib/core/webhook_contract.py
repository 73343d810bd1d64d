"""A tenant's webhook endpoint, as it registers one (the tenant API's body, `moonsend webhook add`).

    {"url": "https://hooks.example.com/moonsend", "eventTypes": ["bounced", "complained"],
     "maxEventsPerRequest": 1}

`eventTypes` may be left out (every type); `maxEventsPerRequest` (1 to 100, 1 if not given) is how many
events one request may carry, for a receiver that takes them in batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Every outcome moonsend records for a recipient, by the name a tenant subscribes to.
EVENT_TYPES = (
    "sent",
    "delivered",
    "bounced",
    "complained",
    "opened",
    "clicked",
    "unsubscribed",
    "failed",
    "rejected",
    "suppressed",
    "expired",
)
MAX_EVENTS_PER_REQUEST = 100
MAX_URL_LENGTH = 2048
MAX_ENDPOINTS_PER_TENANT = 10
# A failed delivery is tried again after each of these waits (seconds; the retry waits Standard Webhooks'
# reference service documents): eight attempts over 27 h 35 min. A delivery failed at every one disables its
# endpoint, and is held for replay with everything that comes for the endpoint after.
RETRY_WAITS_S = (5, 300, 1800, 7200, 18000, 36000, 36000)
# How long held requests wait for `moonsend webhook replay`.
HELD_DAYS = 14


@dataclass(frozen=True)
class EndpointRequest:
    url: str
    event_types: tuple[str, ...]
    max_events: int


def parse_endpoint(body: object) -> EndpointRequest:
    """The registration's fields, or ValueError naming the field and what is wrong."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object with url (and eventTypes, maxEventsPerRequest)")
    url = body.get("url")
    if not isinstance(url, str) or not url.strip() or len(url) > MAX_URL_LENGTH:
        raise ValueError(f"url: must be a URL of at most {MAX_URL_LENGTH} characters")
    types = _event_types(body.get("eventTypes"))
    n = body.get("maxEventsPerRequest", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_EVENTS_PER_REQUEST:
        raise ValueError(f"maxEventsPerRequest: a whole number from 1 to {MAX_EVENTS_PER_REQUEST}")
    return EndpointRequest(url.strip(), types, n)


def _event_types(given: Any) -> tuple[str, ...]:
    if given is None:
        return EVENT_TYPES
    if not isinstance(given, list) or not given or not all(isinstance(t, str) for t in given):
        raise ValueError(f"eventTypes: a non-empty list of {', '.join(EVENT_TYPES)}")
    unknown = sorted({t for t in given if t not in EVENT_TYPES})
    if unknown:
        raise ValueError(f"eventTypes: unknown {', '.join(unknown)[:200]} (known: {', '.join(EVENT_TYPES)})")
    return tuple(t for t in EVENT_TYPES if t in given)  # each once, in one order
