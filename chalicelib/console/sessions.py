"""Who is signed in to the console: sessions with an idle timeout and an absolute expiry.

A session starts at every sign-in with a new secret (a cookie fixed before sign-in is worth nothing after
it), lasts at most ABSOLUTE_S however busy, and ends after IDLE_S without a request, or at sign-out. Each
has its own CSRF token, which every form that changes something carries.

A person's session reads their membership at every request (one consistent read): a person an admin
removed or signed out everywhere is out at once, and a changed role holds from the next page. A session
older than the person's membership is over too: a person removed and invited again (the real owner, after
their account was taken) does not bring back the sessions of before. A session signed in with the
tenant's API key holds the key's digest, and asks at every request whether that key is still the tenant's:
a key revoked (in the console, or all of them by `moonsend tenant key`) ends every session it started.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from chalicelib.stores.ports import KeyDigests, MembershipRecords, SessionRecords
from chalicelib.stores.sessions import StoredSession

IDLE_S = 8 * 3600
ABSOLUTE_S = 7 * 24 * 3600
# A request writes its session's last-seen time at most this often: the idle timeout is 8 hours, and a
# page that refreshes its progress every few seconds need not write each time.
SEEN_EVERY_S = 300
SECRET_CHARS = 43  # secrets.token_urlsafe(32): a cookie of any other length is not one of ours


@dataclass(frozen=True)
class Session:
    tenant_id: str
    person: str | None  # None: signed in with the tenant's API key
    role: int  # chalicelib.api.principal.Role's value
    csrf: str

    def carries(self, token: str | None) -> bool:
        """Whether a form's token is this session's (compared in constant time)."""
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


def sid_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Sessions:
    def __init__(
        self,
        store: SessionRecords,
        people: MembershipRecords,
        keys: KeyDigests,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._people = people
        self._keys = keys
        self._clock = clock

    def start(
        self, tenant_id: str, person: str | None, role: int, key_digest: str | None = None
    ) -> tuple[str, Session]:
        """A new session: the cookie's secret (shown to the browser only) and the session. A person's, or (no
        person) one signed in with the key whose digest is `key_digest`."""
        if person is None and not key_digest:
            raise ValueError("a session signed in with the key holds the key's digest")
        secret, now = secrets.token_urlsafe(32), self._clock()
        stored = StoredSession(
            sid_of(secret),
            tenant_id,
            person,
            role,
            secrets.token_urlsafe(32),
            now,
            now,
            now + ABSOLUTE_S,
            key_digest if person is None else None,
        )
        self._store.put(stored)
        return secret, _session(stored)

    def find(self, secret: str | None, keep_alive: bool = True) -> Session | None:
        """The live session a cookie names, kept alive (unless `keep_alive` is False: a page's own refresh);
        None for none, a forged one, or one that ended."""
        if not secret or len(secret) != SECRET_CHARS or not secret.isascii():
            return None
        stored = self._store.get(sid_of(secret))
        now = self._clock()
        if stored is None or now >= stored.expires_at or now - stored.seen_at >= IDLE_S:
            return None
        role = self._role_now(stored)
        if role is None:
            self._store.delete(stored.sid)
            return None
        if keep_alive and now - stored.seen_at >= SEEN_EVERY_S:
            self._store.seen(stored.sid, now)
        return Session(stored.tenant_id, stored.person, role, stored.csrf)

    def _role_now(self, stored: StoredSession) -> int | None:
        """The session's role as its person's membership or its key stands now; None: the session is over."""
        if stored.person is None:
            held = stored.key_digest
            return stored.role if held and self._keys.live(stored.tenant_id, held) else None
        person = self._people.get(stored.tenant_id, stored.person)
        if person is None or stored.created_at < max(person.signed_out_at or 0.0, person.invited_at):
            return None
        return person.role

    def end(self, secret: str | None) -> None:
        if secret and len(secret) == SECRET_CHARS and secret.isascii():
            self._store.delete(sid_of(secret))


def _session(s: StoredSession) -> Session:
    return Session(s.tenant_id, s.person, s.role, s.csrf)
