"""The console's stores' ports (chalicelib.stores.sessions, people, sign_in_links, attempts): sessions, people,
sign-in links and wrong keys' attempts, and whether a session's API key is still live; and the values they
speak of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class StoredSession:
    sid: str
    tenant_id: str
    person: str | None
    role: int
    csrf: str
    created_at: float
    seen_at: float
    expires_at: float
    key_digest: str | None = None
    agent: str | None = None
    client: str | None = None


@dataclass(frozen=True)
class Person:
    tenant_id: str
    address: str
    role: int
    invited_by: str
    invited_at: float
    signed_out_at: float | None = None


@dataclass(frozen=True)
class StoredLink:
    token: str
    address: str
    created_at: float
    expires_at: float
    used_at: float | None = None


class SessionRecords(Protocol):
    """The console's sessions by the digest of their secret (chalicelib.stores.sessions)."""

    def put(self, s: StoredSession) -> None: ...

    def get(self, sid: str) -> StoredSession | None: ...

    def seen(self, sid: str, at: float) -> None: ...

    def delete(self, sid: str) -> None: ...

    def of_tenant(self, tenant_id: str) -> list[StoredSession]: ...


class PeopleRecords(Protocol):
    """A tenant's people and their roles (chalicelib.stores.people)."""

    def get(self, tenant_id: str, address: str) -> Person | None: ...

    def of_tenant(self, tenant_id: str) -> list[Person]: ...

    def tenants_of(self, address: str) -> list[str]: ...

    def put(self, p: Person) -> None: ...

    def signed_out(self, tenant_id: str, address: str, at: float) -> bool: ...

    def remove(self, tenant_id: str, address: str) -> None: ...


class SignInLinkRecords(Protocol):
    """Emailed sign-in links by the digest of their token (chalicelib.stores.sign_in_links)."""

    def put(self, link: StoredLink) -> None: ...

    def get(self, token: str) -> StoredLink | None: ...

    def use(self, token: str, now: float) -> bool: ...


class KeyDigests(Protocol):
    """What a session signed in with an API key asks at each request (chalicelib.console.sessions): whether the
    key whose digest it holds is still the tenant's (chalicelib.control.api_keys)."""

    def live(self, user_id: str, digest: str) -> bool: ...


class AttemptCounts(Protocol):
    """The sign-in guard's (chalicelib.console.guard): attempts of a key's window, read and added to."""

    def count(self, key: str) -> int: ...

    def add(self, key: str, expires_at: int) -> int: ...

    def release(self, key: str) -> None: ...
