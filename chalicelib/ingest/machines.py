"""People's opens and clicks, not machines': what marks a hit on the open pixel or a tracked link as a machine's.

Many opens and clicks are not a person's: a privacy proxy fetches every image of an email when it arrives
(Apple Mail Privacy Protection), and a security scanner follows every link of it within seconds of delivery.
Counted as people's, they make every open rate high and an A/B test's winner a coin toss. moonsend counts them
apart (`machine_opened`, `machine_clicked`) and marks them in webhooks and on GET /events; a hit nothing
below marks is counted as a person's.

The evidence moonsend has, asked in this order (the first that speaks is the hit's `evidence`):

1. The request itself: a HEAD (a link checker: a person's browser asks with GET); a prefetch (`Purpose` or
   `Sec-Purpose: prefetch`); no User-Agent at all; the bare `Mozilla/5.0` of Apple's privacy proxy; Gmail's
   prefetch; or a User-Agent naming a scanner, a crawler or an HTTP library (`MACHINE_AGENTS`).
2. Its time: within `OPEN_SOON_S` (an open) or `CLICK_SOON_S` (a click) of the send being recorded, or of the
   delivery as SES timed it (its Delivery event's own timestamp, not when moonsend handled the event: events
   can be handled minutes late). A scanner acts as the email arrives; a person has yet to see it.
3. For a click: another link of the same email clicked within `ANOTHER_LINK_S` of the first click (a
   scanner follows every link at once; a person follows one, and reads).

What cannot be told, and is counted as a person's: a scanner with a browser's User-Agent that waits longer
than the windows and follows one link (headless browsers in a cloud's addresses); Apple's proxy by its
network addresses (Apple publishes them online; none is kept here, so a bare `Mozilla/5.0` from elsewhere is
taken for Apple's too); a scanner recognised only by its network (no address list is kept); a person behind
a security vendor's browser isolation, who is a person. A machine's fetch that Apple's or Gmail's cache then
serves hides the person's own open from every ESP. Gmail's and Yahoo's image proxies fetch when the
reader opens the email, so their fetches are people's opens. docs/operations.md says this to tenants
("People's opens and clicks, not machines'").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from chalicelib.stores.ports.ledger import HitContext

# A person sees an email some time after it is sent; a scanner acts on its arrival. A click is timed against a
# wider window than an open: a scanner's visit can come tens of seconds after the send is recorded (queued and
# carried first), and a person who opens at once still reads before following a link. Peers use 2 s (Mautic's
# BotRatioHelper) to 60 s (Warmbly: 10 s "routinely expired before the scan").
OPEN_SOON_S = 10.0
CLICK_SOON_S = 30.0
# A person follows one link and reads; a scanner follows every link of the email within seconds (Warmbly: two
# links within 5 s; Mautic's users report every link within 10 s).
ANOTHER_LINK_S = 5.0
# How much of the first click's link the ledger keeps (chalicelib.stores.ledger.record_feedback).
FIRST_CLICK_KEPT = 1000
# Apple Mail Privacy Protection's proxy fetches images with this User-Agent and nothing after it.
APPLE_PRIVACY_PROXY = "mozilla/5.0"
# Gmail's prefetch of images while its web client is open (SparkPost measured it at 1 to 6% of Gmail's opens).
GMAIL_PREFETCH = "chrome/42.0.2311.135 safari/537.36 edge/12.246"
# A bot names itself as a word ending in "bot" followed by its version or a separator (Googlebot/2.1,
# Slackbot-LinkExpanding, bingbot; ...): "bot" inside a word is not one (a CUBOT phone's User-Agent).
_BOT = re.compile(r"bot(?:[/;)\-]|$)")
# Words in a User-Agent that no person's browser or mail client sends (lower case). Gmail's and Yahoo's image
# proxies (GoogleImageProxy, YahooMailProxy) are not among them: they fetch when the reader opens. Android's
# stock HTTP library (okhttp) is not either: a mail app may fetch a person's images with it.
MACHINE_AGENTS = (
    "crawler",
    "spider",
    "scanner",
    "preview",
    "headless",
    "python-",
    "python/",
    "curl/",
    "wget/",
    "go-http-client",
    "java/",
    "libwww",
    "httpclient",
    "axios/",
    "node-fetch",
    "barracuda",
    "mimecast",
    "proofpoint",
    "safelinks",
    "urldefense",
    "trendmicro",
    "symantec",
    "fortiguard",
    "sophos",
)


@dataclass(frozen=True)
class Hit:
    """One request of the open pixel or of a tracked link."""

    method: str
    headers: Mapping[str, str]  # names lower-cased
    at_ms: int  # epoch ms
    link: str | None = None  # a click's target


def machine_evidence(hit: Hit, context: HitContext | None) -> str | None:
    """Why this hit is a machine's, in words a tenant reads; None: a person's, as far as moonsend can tell.
    `context`: the recipient's send, delivery and first click (None: not known, the request alone decides)."""
    return _by_request(hit) or (_by_time(hit, context) if context is not None else None)


def _by_request(hit: Hit) -> str | None:
    if hit.method.upper() == "HEAD":
        return "a HEAD request: a link checker's, not a browser's"
    for name in ("purpose", "sec-purpose", "x-purpose", "x-moz"):
        if "prefetch" in hit.headers.get(name, "").lower():
            return f"a prefetch ({name}: {_shown(hit.headers[name], 60)})"
    agent = hit.headers.get("user-agent", "").strip()
    if not agent:
        return "no User-Agent"
    lowered = agent.lower()
    if lowered == APPLE_PRIVACY_PROXY:
        return "Apple Mail Privacy Protection's proxy (User-Agent: Mozilla/5.0 alone)"
    if GMAIL_PREFETCH in lowered:
        return "Gmail's prefetch of images (its User-Agent), not an open"
    if _BOT.search(lowered) or any(word in lowered for word in MACHINE_AGENTS):
        return f"a machine's User-Agent ({_shown(agent, 80)})"
    return None


def _shown(text: str, most: int) -> str:
    """Up to `most` characters of a request's text, in ASCII (a character outside it escaped): an event's
    evidence stays small whatever the request sent (chalicelib.stores.event_log's MAX_EVENT_BYTES)."""
    return text[:most].encode("ascii", "backslashreplace").decode("ascii")[:most]


def _by_time(hit: Hit, context: HitContext) -> str | None:
    soon_s = OPEN_SOON_S if hit.link is None else CLICK_SOON_S
    for what, at in (("sent", context.sent_at), ("delivered", context.delivered_at)):
        if at is not None and 0 <= hit.at_ms - at < soon_s * 1000:
            return f"{(hit.at_ms - at) / 1000:.1f} s after it was {what}: sooner than a person reads"
    if (
        hit.link is not None
        and context.first_click_at is not None
        and context.first_click is not None
        and context.first_click != hit.link[:FIRST_CLICK_KEPT]  # the ledger keeps that much of it
        and 0 <= hit.at_ms - context.first_click_at < ANOTHER_LINK_S * 1000
    ):
        return f"another link {(hit.at_ms - context.first_click_at) / 1000:.1f} s after the first: every link at once"
    return None
