"""Signed links in emails: the unsubscribe link (and, later, tracking links).

A token carries the tenant, the campaign, the recipient and an expiry, signed with HMAC-SHA256 under the
stage's secret (Secrets Manager on AWS, `MOONSEND_LINK_SECRET` locally). Anyone can read a token (it is
base64 JSON: nothing in it is secret to the recipient it was sent to), nobody can make or alter one
without the secret. A token that does not verify, for whatever reason, is one error with no detail, so
that a prober learns nothing from the answer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import time
from dataclasses import dataclass

from chalicelib.core.errors import LinkInvalid

UNSUBSCRIBE_TTL_S = 400 * 24 * 3600  # an old newsletter's link should still work for a year and more
TRACKING_TTL_S = 180 * 24 * 3600
_SIG_BYTES = 16
DAY_S = 86400


@dataclass(frozen=True)
class LinkClaims:
    purpose: str
    user_id: str
    campaign_id: str
    email: str
    expires: int
    url: str | None = None  # a click link's target


# A token is signed per recipient (and per link) by precompile: its JSON is put together from strings
# escaped by the json module's C escaper (what json.dumps(..., separators=(",", ":")) gives, at a sixth of
# the cost), and the HMAC is keyed once and copied per signature.
_q = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class LinkSigner:
    def __init__(self, secret: bytes, base_url: str) -> None:
        if len(secret) < 16:
            raise ValueError("the link secret must be at least 16 bytes")
        self._keyed = hmac.new(secret, digestmod=hashlib.sha256)
        self.base_url = base_url.rstrip("/")

    def _sign(self, purpose: str, payload: str) -> str:
        mac = self._keyed.copy()
        mac.update(f"{purpose}.{payload}".encode("ascii"))
        return _b64(mac.digest()[:_SIG_BYTES])

    def token(
        self,
        purpose: str,
        user_id: str,
        campaign_id: str,
        email: str,
        ttl_s: int,
        now: float | None = None,
        url: str | None = None,
    ) -> str:
        expires = (time.time() if now is None else now) + ttl_s
        if ttl_s >= DAY_S:
            # Rounded up to a whole day: the link rendered into the body and the one in the header, signed
            # minutes apart by precompile and the sender, then come out the same.
            expires = math.ceil(expires / DAY_S) * DAY_S
        expires = int(expires)
        link = "" if url is None else f',"l":{_q(url)}'
        body = f'{{"u":{_q(user_id)},"c":{_q(campaign_id)},"e":{_q(email)},"x":{expires}{link}}}'
        payload = _b64(body.encode("utf-8"))
        return f"{payload}.{self._sign(purpose, payload)}"

    def verify(self, purpose: str, token: str, now: float | None = None) -> LinkClaims:
        try:
            payload, sig = token.split(".")
            if not hmac.compare_digest(sig, self._sign(purpose, payload)):
                raise LinkInvalid("bad signature")
            d = json.loads(_unb64(payload))
            url = str(d["l"]) if "l" in d else None
            claims = LinkClaims(purpose, str(d["u"]), str(d["c"]), str(d["e"]), int(d["x"]), url)
        except LinkInvalid:
            raise
        except (ValueError, KeyError, TypeError, UnicodeError) as exc:
            raise LinkInvalid("malformed") from exc
        if claims.expires < (time.time() if now is None else now):
            raise LinkInvalid("expired")
        return claims

    def click_url(self, user_id: str, campaign_id: str, email: str, url: str) -> str:
        """A redirect to `url` that records the click; only a URL signed here can be the target."""
        return f"{self.base_url}/c/{self.token('click', user_id, campaign_id, email, TRACKING_TTL_S, url=url)}"

    def open_url(self, user_id: str, campaign_id: str, email: str) -> str:
        return f"{self.base_url}/o/{self.token('open', user_id, campaign_id, email, TRACKING_TTL_S)}"

    def unsubscribe_url(self, user_id: str, campaign_id: str, email: str) -> str:
        return (
            f"{self.base_url}/unsubscribe/{self.token('unsubscribe', user_id, campaign_id, email, UNSUBSCRIBE_TTL_S)}"
        )
