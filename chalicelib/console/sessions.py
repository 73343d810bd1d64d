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

from chalicelib.stores.ports.console import KeyDigests, PeopleRecords, Person, SessionRecords, StoredSession

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


def listed_id_of(sid: str) -> str:
    """What a session's listing names it by: the start of its id (its item's key, itself a digest of the
    secret), enough to tell a tenant's sessions apart and worth nothing to sign in with."""
    return sid[:16]


@dataclass(frozen=True)
class ListedSession:
    listed_id: str
    person: str | None
    key_digest: str | None
    role: int
    started_at: float
    seen_at: float
    agent: str | None
    client: str | None

    @classmethod
    def of(cls, s: StoredSession, role: int) -> ListedSession:
        return cls(listed_id_of(s.sid), s.person, s.key_digest, role, s.created_at, s.seen_at, s.agent, s.client)


class Sessions:
    def __init__(
        self,
        store: SessionRecords,
        people: PeopleRecords,
        keys: KeyDigests,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._people = people
        self._keys = keys
        self._clock = clock

    def start(
        self,
        tenant_id: str,
        person: str | None,
        role: int,
        key_digest: str | None = None,
        seen_from: tuple[str, str] = ("", ""),
    ) -> tuple[str, Session]:
        """A new session: the cookie's secret (shown to the browser only) and the session. A person's, or (no
        person) one signed in with the key whose digest is `key_digest`; `seen_from` is the browser's
        User-Agent and the client's address, which the tenant's admins see beside it."""
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
            seen_from[0] or None,
            seen_from[1] or None,
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
            return _role(stored, None, bool(held) and self._keys.live(stored.tenant_id, str(held)))
        return _role(stored, self._people.get(stored.tenant_id, stored.person), False)

    def of_tenant(self, tenant_id: str) -> list[ListedSession]:
        """The tenant's live sessions, newest first, as its admins see them (never a secret or a CSRF token).
        Each person and key is read once, however many sessions it has."""
        now, live = self._clock(), []
        people: dict[str, Person | None] = {}
        keys: dict[str, bool] = {}
        for stored in self._store.of_tenant(tenant_id):
            if now >= stored.expires_at or now - stored.seen_at >= IDLE_S:
                continue
            if stored.person is not None and stored.person not in people:
                people[stored.person] = self._people.get(tenant_id, stored.person)
            if stored.key_digest and stored.key_digest not in keys:
                keys[stored.key_digest] = self._keys.live(tenant_id, stored.key_digest)
            role = _role(stored, people.get(stored.person or ""), keys.get(stored.key_digest or "", False))
            if role is not None:
                live.append(ListedSession.of(stored, role))
        return live

    def end_listed(self, tenant_id: str, listed_id: str) -> StoredSession | None:
        """End one of the tenant's sessions by the id its listing shows: the session ended, or None when there
        is none (ended already)."""
        found = next((s for s in self._store.of_tenant(tenant_id) if listed_id_of(s.sid) == listed_id), None)
        if found is not None:
            self._store.delete(found.sid)
        return found

    def end(self, secret: str | None) -> None:
        if secret and len(secret) == SECRET_CHARS and secret.isascii():
            self._store.delete(sid_of(secret))


def _role(stored: StoredSession, person: Person | None, key_live: bool) -> int | None:
    """A session's role, given its person's membership as it stands (a person's session) or whether its key
    is still the tenant's (a key's); None: the session is over."""
    if stored.person is None:
        return stored.role if stored.key_digest and key_live else None
    if person is None or stored.created_at < max(person.signed_out_at or 0.0, person.invited_at):
        return None
    return person.role


def _session(s: StoredSession) -> Session:
    return Session(s.tenant_id, s.person, s.role, s.csrf)
