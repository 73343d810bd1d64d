"""A tenant's API keys: made (the key shown once), listed by their first characters and when they were made,
revoked one by one; and the tenant a request's key belongs to.

A key is `msk_<base64url(userId)>_<secret>`: the tenant is read from the key, and the SHA-256 of the whole
key is looked up among that tenant's (the key itself is never stored). A wrong key names no tenant: it is
refused as another tenant's campaign is (chalicelib.api.principal), revealing nothing.

A tenant holds up to MAX_KEYS keys at once (a deployment's, a CI job's, a colleague's script), so that one
is replaced without stopping the others. `moonsend tenant key` (the operator, after a leak) replaces them
all with one. A key made before keys had their own table is the tenant row's `api_key_hash`: it works and is
listed (its making time unknown) until it is revoked or replaced.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core.contract import MAX_ID_LENGTH, iso_ms
from chalicelib.core.errors import Invalid, NotFound
from chalicelib.core.fields import is_id
from chalicelib.stores.ports.tenants import ApiKeyRecords, LegacyKeyHash, StoredKey

PREFIX = "msk_"
MAX_KEYS = 10
MAX_LABEL = 60
SHOWN_SECRET_CHARS = 6  # of the secret, after the tenant's part: enough to tell a tenant's keys apart
LEGACY_ID = "key_first"  # the key a tenant row holds from before this table
_ENCODED_ID_MAX = -(-MAX_ID_LENGTH * 4 // 3)  # base64 of the longest id: longer names none, not decoded


def new_key(user_id: str) -> str:
    who = base64.urlsafe_b64encode(user_id.encode("utf-8")).rstrip(b"=").decode("ascii")
    return f"{PREFIX}{who}_{secrets.token_urlsafe(32)}"


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def owner_of(key: str) -> str | None:
    """The user id a key names (not yet checked), if it names one a tenant can have: the id is looked up as
    the tenant's partition, which an empty or over-long one cannot be (`msk__x` names "")."""
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


def _shown(key: str) -> str:
    tenant_part, _, secret = key[len(PREFIX) :].partition("_")
    return f"{PREFIX}{tenant_part}_{secret[:SHOWN_SECRET_CHARS]}…"


@dataclass(frozen=True)
class Made:
    key: str  # shown this once
    listed: dict[str, Any]


class ApiKeys:
    def __init__(self, store: ApiKeyRecords, legacy: LegacyKeyHash, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._legacy = legacy
        self._clock = clock

    def make(self, user_id: str, by: str, label: str | None = None) -> Made:
        """A new key beside the tenant's others; Invalid for a label past MAX_LABEL or a tenant at MAX_KEYS."""
        label = (label or "").strip() or None
        if label is not None and (len(label) > MAX_LABEL or not label.isprintable()):
            raise Invalid(f"label: printable text of at most {MAX_LABEL} characters")
        if len(self.listed(user_id)) >= MAX_KEYS:
            raise Invalid(f"a tenant holds at most {MAX_KEYS} keys: revoke one it no longer uses first")
        return self._make(user_id, by, label)

    def replace_all(self, user_id: str, by: str = "operator") -> str:
        """One new key, and every other revoked (the operator's, after a leak): the key, shown once."""
        made = self._make(user_id, by, "made by the operator")
        for old in self._store.of_tenant(user_id):
            if old.digest != key_hash(made.key):
                self._store.delete(user_id, old.digest)
        self._legacy.clear_api_key_hash(user_id)
        return made.key

    def _make(self, user_id: str, by: str, label: str | None) -> Made:
        key = new_key(user_id)
        digest = key_hash(key)
        stored = StoredKey(user_id, digest, f"key_{secrets.token_urlsafe(6)}", _shown(key), label, self._clock(), by)
        self._store.put(stored)
        return Made(key, _listed(stored))

    def listed(self, user_id: str) -> list[dict[str, Any]]:
        """The tenant's keys, oldest first: its id, first characters, label, when and by whom it was made."""
        keys = [_listed(k) for k in self._store.of_tenant(user_id)]
        if self._legacy.api_key_hash(user_id):
            first = {"id": LEGACY_ID, "shown": f"{PREFIX}…", "label": "made before keys were listed"}
            keys.insert(0, {**first, "createdAt": None, "createdBy": "operator"})
        return keys

    def shown_by_digest(self, user_id: str) -> dict[str, dict[str, Any]]:
        """Each live key's listing by its digest: what a console session signed in with a key shows of it."""
        return {k.digest: _listed(k) for k in self._store.of_tenant(user_id)}

    def revoke(self, user_id: str, key_id: str) -> dict[str, Any]:
        """Revoke one key now: its next request is refused, and the console sessions it began are over."""
        if key_id == LEGACY_ID and self._legacy.api_key_hash(user_id):
            self._legacy.clear_api_key_hash(user_id)
            return {"revoked": key_id, "shown": f"{PREFIX}…"}
        found = next((k for k in self._store.of_tenant(user_id) if k.key_id == key_id), None)
        if found is None or not self._store.delete(user_id, found.digest):
            raise NotFound("no such key: it may have been revoked already")
        return {"revoked": key_id, "shown": found.shown}

    def authenticate(self, authorization: str | None) -> str | None:
        """The tenant a `Bearer` key belongs to, or None (the scheme's name in any case, as RFC 9110 11.1 has it)."""
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        key = key.strip()
        user_id = owner_of(key)
        if user_id is None:
            return None
        return user_id if self.live(user_id, key_hash(key)) else None

    def live(self, user_id: str, digest: str) -> bool:
        """Whether the key whose digest this is still belongs to the tenant (a console session asks each time)."""
        if self._store.get(user_id, digest) is not None:
            return True
        stored = self._legacy.api_key_hash(user_id)
        return bool(stored) and hmac.compare_digest(str(stored), digest)


def _listed(k: StoredKey) -> dict[str, Any]:
    return {
        "id": k.key_id,
        "shown": k.shown,
        "label": k.label,
        "createdAt": iso_ms(int(k.created_at * 1000)),
        "createdBy": k.created_by,
    }
