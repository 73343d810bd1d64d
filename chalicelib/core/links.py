"""Signed links in emails: the unsubscribe link, and the open and click tracking links.

A token carries the tenant, the campaign, the recipient and an expiry, signed with HMAC-SHA256 under one
of the stage's keys (the Secrets Manager secret on AWS, `MOONSEND_LINK_SECRET` locally). Anyone can read
a token (it is base64 JSON: nothing in it is secret to the recipient it was sent to), nobody can make or
alter one without the key. A token that does not verify, for whatever reason, is one error with no
detail, so that a prober learns nothing from the answer.

Links outlive keys. The secret holds a key document, `{"current": "k1", "keys": {"k0": {...}, "k1":
{...}}}`: new tokens are signed with the current key and name it (`k1.<payload>.<signature>`), and a
token verifies with the key it names for as long as that key is listed. A secret of the old kind, one
plain string, is the document of one key, `k0`; a token without a key id (every token sent before key
ids) names `k0`, and tokens signed with `k0` are still written without one, so a stage never rotated
sends what older code reads. `moonsend link-key rotate` adds a key and makes it current; a key that has
stopped signing may be dropped (`link-key retire`) only once the longest-lived link it signed has expired.

A signer given the secret to read re-reads the keys every REFRESH_S (a rotation reaches every container
within that), and at once, at most every UNKNOWN_KID_REREAD_S, when a token names a key it does not know.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from chalicelib.core import log
from chalicelib.core.errors import LinkInvalid, LinksNotConfigured

UNSUBSCRIBE_TTL_S = 400 * 24 * 3600  # an old newsletter's link should still work for a year and more
TRACKING_TTL_S = 180 * 24 * 3600
_SIG_BYTES = 16
DAY_S = 86400

# How long a message moonsend publishes may take to reach precompile and still name the tenant's keys: past
# SNS's and Lambda's retries, and a replay of the on-failure queue (which keeps events 14 days).
SENDER_PROOF_TTL_S = 15 * DAY_S

# The key of a secret that is one plain string, and of every token that names no key.
LEGACY_KID = "k0"
# A key that stopped signing may go once every link it signed has expired: the longest lifetime, and the
# day a link's expiry is rounded up to.
RETIRE_AFTER_S = UNSUBSCRIBE_TTL_S + DAY_S
REFRESH_S = 300.0
UNKNOWN_KID_REREAD_S = 5.0
MIN_KEY_BYTES = 16
_KID = re.compile(r"[A-Za-z0-9_-]{1,16}\Z")


@dataclass(frozen=True)
class LinkClaims:
    purpose: str
    user_id: str
    campaign_id: str
    email: str
    expires: int
    url: str | None = None  # a click link's target


# --- the keys: the secret's document ---------------------------------------------------------------------


@dataclass(frozen=True)
class LinkKey:
    kid: str
    secret: str = field(repr=False)  # its UTF-8 bytes are the HMAC key; never logged, never printed
    created: int | None = None  # epoch seconds; None for a key that came from a plain-string secret
    retired: int | None = None  # when it stopped signing (another key became current); None while current


@dataclass(frozen=True)
class LinkKeys:
    """What the secret holds: the keys by id, and which one signs."""

    current: str
    keys: tuple[LinkKey, ...]

    def __post_init__(self) -> None:
        kids = [k.kid for k in self.keys]
        if len(set(kids)) != len(kids) or self.current not in kids:
            raise ValueError("the link keys must have distinct ids, the current one among them")
        for k in self.keys:
            if not _KID.match(k.kid):
                raise ValueError(f"a link key id is 1 to 16 of A-Z a-z 0-9 _ - (got {k.kid!r})")
            if len(k.secret.encode("utf-8")) < MIN_KEY_BYTES:
                raise ValueError(f"link key {k.kid} is shorter than {MIN_KEY_BYTES} bytes")

    @classmethod
    def parse(cls, value: str) -> LinkKeys:
        """The secret's value: a key document (JSON), or one plain string (the old kind: key `k0`).

        Errors name what is wrong, never a key's value."""
        if not value.lstrip().startswith("{"):
            return cls(LEGACY_KID, (LinkKey(LEGACY_KID, value),))  # as it is: its bytes have always been the key
        try:
            d = json.loads(value)
            current, given = d["current"], d["keys"]
            if not isinstance(current, str) or not isinstance(given, dict) or not given:
                raise TypeError
            keys = []
            for kid, k in given.items():
                if isinstance(k, str):  # `{"k1": "<key>"}`, as one might write it by hand
                    keys.append(LinkKey(kid, k))
                else:
                    keys.append(LinkKey(kid, str(k["key"]), _epoch(k.get("created")), _epoch(k.get("retired"))))
        except (ValueError, KeyError, TypeError, AttributeError):
            # No detail from the parser: its message could quote the document, and the document is secret.
            raise ValueError('the link secret is neither a plain key nor {"current": ..., "keys": {...}}') from None
        return cls(current, tuple(keys))

    def dumps(self) -> str:
        keys = {}
        for k in self.keys:
            entry: dict[str, object] = {"key": k.secret}
            if k.created is not None:
                entry["created"] = k.created
            if k.retired is not None:
                entry["retired"] = k.retired
            keys[k.kid] = entry
        return json.dumps({"current": self.current, "keys": keys}, separators=(",", ":"))

    def get(self, kid: str) -> LinkKey | None:
        return next((k for k in self.keys if k.kid == kid), None)

    def rotated(self, now: float) -> LinkKeys:
        """A new random key, made current; the others kept (they verify the links they signed)."""
        n = max((int(k.kid[1:]) for k in self.keys if re.fullmatch(r"k\d{1,9}", k.kid)), default=0) + 1
        at = int(now)
        kept = tuple(replace(k, retired=at) if k.kid == self.current else k for k in self.keys)
        new = LinkKey(f"k{n}", secrets.token_hex(32), created=at)
        return LinkKeys(new.kid, (*kept, new))

    def retire_refusal(self, kid: str, now: float) -> str | None:
        """Why `kid` may not be dropped yet (None: it may). Never the current key; another only once
        every link it signed has expired (RETIRE_AFTER_S after it stopped signing)."""
        key = self.get(kid)
        if key is None:
            return f"there is no key {kid}"
        if kid == self.current:
            return f"{kid} is the current key: rotate first"
        if key.retired is None:
            return f"when {kid} stopped signing is not recorded: links it signed may still be live"
        left = key.retired + RETIRE_AFTER_S - now
        if left > 0:
            until = time.strftime("%Y-%m-%d", time.gmtime(key.retired + RETIRE_AFTER_S))
            return (
                f"{kid} stopped signing {_days(now - key.retired)} ago; links it signed live until {until} "
                f"({_days(RETIRE_AFTER_S)} after)"
            )
        return None

    def without(self, kid: str) -> LinkKeys:
        if kid == self.current:
            raise ValueError(f"{kid} is the current key")
        return LinkKeys(self.current, tuple(k for k in self.keys if k.kid != kid))


def _epoch(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _days(seconds: float) -> str:
    return f"{int(seconds // DAY_S)} day(s)"


# --- tokens ------------------------------------------------------------------------------------------------

# A token is signed per recipient (and per link) by precompile: its JSON is put together from strings
# escaped by the json module's C escaper (what json.dumps(..., separators=(",", ":")) gives, at a sixth of
# the cost), and the HMAC is keyed once per key and copied per signature.
_q = json.encoder.encode_basestring_ascii


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class _Ring:
    """The keys as a signer uses them: each keyed once."""

    def __init__(self, current: str, keys: Mapping[str, bytes]) -> None:
        if any(len(secret) < MIN_KEY_BYTES for secret in keys.values()):
            raise ValueError(f"the link secret must be at least {MIN_KEY_BYTES} bytes")
        self.current = current
        self.keyed = {kid: hmac.new(secret, digestmod=hashlib.sha256) for kid, secret in keys.items()}

    @classmethod
    def of(cls, keys: LinkKeys) -> _Ring:
        return cls(keys.current, {k.kid: k.secret.encode("utf-8") for k in keys.keys})


class LinkSigner:
    """Signs with the current key, verifies with the key a token names.

    `secret`: one key (bytes: `k0`) or the parsed document. `reread`, when given, reads the document again
    (the secret): every REFRESH_S, and for a token naming a key not known here, at most every
    UNKNOWN_KID_REREAD_S. A failed re-read keeps the keys held (logged, without detail)."""

    def __init__(
        self,
        secret: bytes | LinkKeys,
        base_url: str | None,
        *,
        reread: Callable[[], LinkKeys] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ring = _Ring(LEGACY_KID, {LEGACY_KID: secret}) if isinstance(secret, bytes) else _Ring.of(secret)
        self._base_url = base_url.rstrip("/") if base_url else None
        self._reread = reread
        self._clock = clock
        self._read_at = clock()
        self._unknown_read_at = -math.inf
        self._reading = threading.Lock()

    @property
    def base_url(self) -> str:
        """Where the links point. A function that only verifies links (the API's) is not told; one that makes
        them and was not told is a deployment error, never a link to a default host that answers nobody."""
        if self._base_url is None:
            raise LinksNotConfigured("MOONSEND_API_URL is not set in this function's environment: it cannot make links")
        return self._base_url

    @property
    def current_kid(self) -> str:
        return self._fresh().current

    def _fresh(self) -> _Ring:
        if self._reread is not None and self._clock() - self._read_at >= REFRESH_S:
            self._read()
        return self._ring

    def _read(self) -> None:
        if not self._reading.acquire(blocking=False):
            return  # another thread is reading: this one goes on with the keys held
        try:
            self._read_at = self._clock()
            assert self._reread is not None
            self._ring = _Ring.of(self._reread())
        except Exception as exc:
            log.warning("link keys not read again; the keys held are kept", error=type(exc).__name__)
        finally:
            self._reading.release()

    def _keyed(self, kid: str) -> hmac.HMAC | None:
        keyed = self._fresh().keyed.get(kid)
        if keyed is None and self._reread is not None and _KID.match(kid):
            now = self._clock()
            if now - self._unknown_read_at >= UNKNOWN_KID_REREAD_S:  # a freshly rotated key, perhaps
                self._unknown_read_at = now
                self._read()
                keyed = self._ring.keyed.get(kid)
        return keyed

    @staticmethod
    def _sign(keyed: hmac.HMAC, purpose: str, payload: str) -> str:
        mac = keyed.copy()
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
            # minutes apart by precompile and the drainer, then come out the same (unless a rotation came
            # between: both verify).
            expires = math.ceil(expires / DAY_S) * DAY_S
        expires = int(expires)
        link = "" if url is None else f',"l":{_q(url)}'
        body = f'{{"u":{_q(user_id)},"c":{_q(campaign_id)},"e":{_q(email)},"x":{expires}{link}}}'
        payload = _b64(body.encode("utf-8"))
        ring = self._fresh()
        sig = self._sign(ring.keyed[ring.current], purpose, payload)
        # k0's tokens as they always were (no key id): a stage never rotated sends what older code reads.
        return f"{payload}.{sig}" if ring.current == LEGACY_KID else f"{ring.current}.{payload}.{sig}"

    def verify(self, purpose: str, token: str, now: float | None = None) -> LinkClaims:
        try:
            parts = token.split(".")
            if len(parts) == 2:
                kid, (payload, sig) = LEGACY_KID, parts
            else:
                kid, payload, sig = parts
            keyed = self._keyed(kid)
            if keyed is None:
                raise LinkInvalid("unknown key")
            if not hmac.compare_digest(sig, self._sign(keyed, purpose, payload)):
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

    def sender_proof(self, user_id: str, campaign_id: str, key_version: int) -> str:
        """What a message moonsend publishes itself carries beside `sender.keyVersion` (chalicelib.produce):
        proof that moonsend, not any producer, named the tenant's registered keys for this campaign."""
        return self.token("sender", user_id, campaign_id, _key_claim(key_version), SENDER_PROOF_TTL_S)

    def sender_proven(self, proof: str, user_id: str, campaign_id: str, key_version: int) -> bool:
        try:
            claims = self.verify("sender", proof)
        except LinkInvalid:
            return False
        return (claims.user_id, claims.campaign_id, claims.email) == (user_id, campaign_id, _key_claim(key_version))

    def click_url(self, user_id: str, campaign_id: str, email: str, url: str) -> str:
        """A redirect to `url` that records the click; only a URL signed here can be the target."""
        return f"{self.base_url}/c/{self.token('click', user_id, campaign_id, email, TRACKING_TTL_S, url=url)}"

    def open_url(self, user_id: str, campaign_id: str, email: str) -> str:
        return f"{self.base_url}/o/{self.token('open', user_id, campaign_id, email, TRACKING_TTL_S)}"

    def unsubscribe_url(self, user_id: str, campaign_id: str, email: str) -> str:
        return (
            f"{self.base_url}/unsubscribe/{self.token('unsubscribe', user_id, campaign_id, email, UNSUBSCRIBE_TTL_S)}"
        )


def _key_claim(key_version: int) -> str:
    return f"keyVersion={key_version}"
