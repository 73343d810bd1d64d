"""The console's sessions (chalicelib.console.sessions) on the fake store and on DynamoDB: a new secret at
every sign-in, the idle timeout and the absolute expiry, sign-out, and cookies that are not ours."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from chalicelib.console.sessions import ABSOLUTE_S, IDLE_S, SEEN_EVERY_S, Sessions, sid_of
from chalicelib.stores.people import PeopleStore
from chalicelib.stores.ports.console import Person
from chalicelib.stores.sessions import SessionStore
from tests.contract.conftest import real_container
from tests.fakes.people import FakeKeyDigests, FakePeople
from tests.fakes.sessions import FakeSessions


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(side: str, request: pytest.FixtureRequest) -> Any:
    if side == "fake":
        return FakeSessions()
    c = real_container(request)
    return SessionStore(c.settings.resources.sessions_table.name, c.settings.region)


@pytest.fixture
def people(side: str, request: pytest.FixtureRequest) -> Any:
    if side == "fake":
        return FakePeople()
    c = real_container(request)
    return PeopleStore(c.settings.resources.people_table.name, c.settings.region)


class RegisteredKeys:
    """The API keys table's digests, as chalicelib.control.api_keys reads them."""

    def __init__(self, container: Any) -> None:
        self.c = container

    def add(self, user_id: str, digest: str) -> None:
        from chalicelib.stores.ports.tenants import StoredKey

        if self.c.api_key_store.get(user_id, digest) is None:  # a second session of the same key
            self.c.api_key_store.put(StoredKey(user_id, digest, f"key_{digest[-6:]}", "msk_…", None, 0.0, "operator"))

    def revoke(self, user_id: str, digest: str) -> None:
        self.c.api_key_store.delete(user_id, digest)

    def live(self, user_id: str, digest: str) -> bool:
        return bool(self.c.api_keys.live(user_id, digest))


@pytest.fixture
def keys(side: str, request: pytest.FixtureRequest) -> Any:
    return FakeKeyDigests() if side == "fake" else RegisteredKeys(real_container(request))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sessions(store: Any, people: Any, keys: Any, clock: Clock) -> Sessions:
    return Sessions(store, people, keys, clock)


class KeySessions:
    """Sessions signed in with a tenant's API key: the key's digest kept as the API keys table would hold it."""

    def __init__(self, sessions: Sessions, keys: Any) -> None:
        self.sessions, self.keys = sessions, keys

    def start(self, who: str, role: int) -> tuple[str, Any]:
        digest = f"digest-of-{who}"
        self.keys.add(who, digest)
        return self.sessions.start(who, None, role, digest)


@pytest.fixture
def by_key(sessions: Sessions, keys: Any) -> KeySessions:
    return KeySessions(sessions, keys)


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def test_a_sign_in_gives_a_new_secret_and_its_session_is_found_by_it_alone(
    sessions: Sessions, by_key: KeySessions, store: Any
):
    who = tenant()
    first, session = by_key.start(who, 3)
    second, _ = by_key.start(who, 3)
    assert first != second and sessions.find(first) == session and session.tenant_id == who
    assert store.get(first) is None and store.get(sid_of(first)) is not None  # stored by digest, never the secret


def test_a_session_idle_for_eight_hours_ends_and_one_in_use_is_kept_alive(
    sessions: Sessions, by_key: KeySessions, clock: Clock
):
    secret, _ = by_key.start(tenant(), 1)
    clock.now += IDLE_S - 1
    assert sessions.find(secret) is not None  # used: kept alive from now
    clock.now += IDLE_S - 1
    assert sessions.find(secret) is not None
    clock.now += IDLE_S
    assert sessions.find(secret) is None


def test_a_session_ends_seven_days_after_sign_in_however_busy(sessions: Sessions, by_key: KeySessions, clock: Clock):
    secret, _ = by_key.start(tenant(), 1)
    while clock.now + SEEN_EVERY_S < 1_800_000_000.0 + ABSOLUTE_S:
        assert sessions.find(secret) is not None
        clock.now += IDLE_S / 2
    clock.now = 1_800_000_000.0 + ABSOLUTE_S
    assert sessions.find(secret) is None


def test_a_signed_out_session_is_gone_and_a_forged_or_odd_cookie_finds_nothing(sessions: Sessions, by_key: KeySessions):
    secret, _ = by_key.start(tenant(), 2)
    sessions.end(secret)
    assert sessions.find(secret) is None
    forged = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for cookie in (None, "", forged, "x" * 43, "é" * 43, secret + "x", "x" * 10_000):
        assert sessions.find(cookie) is None
        sessions.end(cookie)  # nothing to end, nothing raised


def test_a_forms_csrf_token_is_its_sessions_own(sessions: Sessions, by_key: KeySessions):
    _secret, session = by_key.start(tenant(), 3)
    _other, other = by_key.start(tenant(), 3)
    assert session.carries(session.csrf)
    assert not session.carries(other.csrf) and not session.carries(None) and not session.carries("")


def test_a_pages_own_refreshes_do_not_keep_a_session_alive(sessions: Sessions, people: Any, clock: Clock):
    """A tab left open on a sending campaign refreshes every few seconds: its session still ends 8 hours after
    the person's last request."""
    who = tenant()
    people.put(Person(who, "ann@example.org", 1, "operator", clock.now))
    secret, _ = sessions.start(who, "ann@example.org", 1)
    while clock.now < 1_800_000_000.0 + IDLE_S - SEEN_EVERY_S:
        clock.now += SEEN_EVERY_S
        assert sessions.find(secret, keep_alive=False) is not None
    clock.now = 1_800_000_000.0 + IDLE_S
    assert sessions.find(secret, keep_alive=False) is None and sessions.find(secret) is None


def test_a_persons_session_ends_at_their_removal_and_follows_their_role(sessions: Sessions, people: Any, clock: Clock):
    who = tenant()
    people.put(Person(who, "ann@example.org", 1, "operator", clock.now))
    secret, session = sessions.start(who, "ann@example.org", 1)
    assert session.role == 1
    people.put(Person(who, "ann@example.org", 3, "boss@example.org", clock.now))
    found = sessions.find(secret)
    assert found is not None and found.role == 3  # promoted: from the next page
    people.remove(who, "ann@example.org")
    assert sessions.find(secret) is None
    people.put(Person(who, "ann@example.org", 1, "boss@example.org", clock.now))  # invited again
    assert sessions.find(secret) is None  # the session the removal ended stays ended


def test_signed_out_everywhere_ends_the_sessions_of_before_not_the_next_sign_in(
    sessions: Sessions, people: Any, clock: Clock
):
    who = tenant()
    people.put(Person(who, "bob@example.org", 2, "operator", clock.now))
    phone, _ = sessions.start(who, "bob@example.org", 2)
    clock.now += 10
    laptop, _ = sessions.start(who, "bob@example.org", 2)
    clock.now += 10
    assert people.signed_out(who, "bob@example.org", clock.now)
    assert sessions.find(phone) is None and sessions.find(laptop) is None
    clock.now += 1
    again, _ = sessions.start(who, "bob@example.org", 2)
    assert sessions.find(again) is not None
    assert not people.signed_out(who, "nobody@example.org", clock.now)  # nobody to sign out: nothing made
    assert people.get(who, "nobody@example.org") is None


def test_a_person_removed_and_invited_again_does_not_bring_back_the_sessions_of_before(
    sessions: Sessions, people: Any, clock: Clock
):
    """An admin removes a person whose cookie was taken, and invites the real owner again: the taken cookie,
    never used in between, stays dead."""
    who = tenant()
    people.put(Person(who, "bob@example.org", 2, "operator", clock.now))
    taken, _ = sessions.start(who, "bob@example.org", 2)
    clock.now += 5
    people.remove(who, "bob@example.org")
    clock.now += 5
    people.put(Person(who, "bob@example.org", 1, "boss@example.org", clock.now))
    assert sessions.find(taken) is None
    clock.now += 1
    fresh, _ = sessions.start(who, "bob@example.org", 1)
    assert sessions.find(fresh) is not None


def test_a_revoked_api_key_ends_the_sessions_it_started_and_no_other(
    sessions: Sessions, keys: Any, by_key: KeySessions
):
    who = tenant()
    secret, _ = by_key.start(who, 3)
    keys.add(who, "digest-of-another-key")
    other, _ = sessions.start(who, None, 3, "digest-of-another-key")
    assert sessions.find(secret) is not None
    keys.revoke(who, f"digest-of-{who}")
    assert sessions.find(secret) is None and sessions.find(other) is not None
    with pytest.raises(ValueError, match="digest"):
        sessions.start(who, None, 3)  # a key's session without its key's digest is never made
