"""Per-campaign reports over HTTP, for the tenant that owns the campaign, with its own API key.

A key is `msk_<base64url(userId)>_<secret>`: the route reads the tenant from the key, and compares the
SHA-256 of the whole key with the hash stored in the tenant registry (the key itself is never stored; a
new key replaces the old one). chalicelib.api.principal answers a missing key 401, and a wrong key the same
404 as another tenant's campaign or one the tenant does not have: a key reveals nothing about other tenants.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

from chalicelib.core.contract import MAX_ID_LENGTH
from chalicelib.core.errors import NotFound
from chalicelib.core.fields import is_id
from chalicelib.stores.campaign_stats import COUNTERS
from chalicelib.stores.ports import ApiKeyHashes, CountsReader

PREFIX = "msk_"
_ENCODED_ID_MAX = -(-MAX_ID_LENGTH * 4 // 3)  # base64 of the longest id: longer names none, not decoded


def new_key(user_id: str) -> str:
    who = base64.urlsafe_b64encode(user_id.encode("utf-8")).rstrip(b"=").decode("ascii")
    return f"{PREFIX}{who}_{secrets.token_urlsafe(32)}"


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def owner_of(key: str) -> str | None:
    """The user id a key names (not yet checked), if it names one a tenant can have: the id is looked up as
    the tenant registry's key, which an empty or over-long one cannot be (`msk__x` names "")."""
    if not key.startswith(PREFIX) or key.count("_") < 2:
        return None
    who = key[len(PREFIX) :].split("_", 1)[0]
    if len(who) > _ENCODED_ID_MAX:
        return None
    try:
        user_id = base64.urlsafe_b64decode(who + "=" * (-len(who) % 4)).decode("utf-8")
    except (ValueError, UnicodeError):
        return None
    return user_id if is_id(user_id) else None


class Reports:
    def __init__(self, tenants: ApiKeyHashes, stats: CountsReader) -> None:
        self._tenants = tenants
        self._stats = stats

    def issue_key(self, user_id: str) -> str:
        """A new API key for the tenant (shown once; only its hash is kept)."""
        key = new_key(user_id)
        self._tenants.set_api_key_hash(user_id, key_hash(key))
        return key

    def authenticate(self, authorization: str | None) -> str | None:
        """The tenant a `Bearer` key belongs to, or None (the scheme's name in any case, as RFC 9110 11.1 has it)."""
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        key = key.strip()
        user_id = owner_of(key)
        if user_id is None:
            return None
        stored = self._tenants.api_key_hash(user_id)
        if not stored or not hmac.compare_digest(stored, key_hash(key)):
            return None
        return user_id

    def report_for(self, user_id: str, campaign_id: str) -> dict[str, Any]:
        """A campaign's counts; NotFound when the tenant has no such campaign."""
        if not is_id(campaign_id):  # an id no campaign can have is not a key to look up
            raise NotFound()
        counts = self._stats.get(user_id, campaign_id)
        if counts is None:
            raise NotFound()
        rate = counts.achieved_rate
        return {
            "campaign": campaign_id,
            "counts": {name: counts[name] for name in COUNTERS},
            "achievedRatePerSecond": round(rate, 3) if rate else None,
            "lastError": counts.last_error,
        }
