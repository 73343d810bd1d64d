"""The console's sessions (chalicelib.console.sessions) on the fake store and on DynamoDB: a new secret at
every sign-in, the idle timeout and the absolute expiry, sign-out, and cookies that are not ours."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from chalicelib.console.sessions import ABSOLUTE_S, IDLE_S, SEEN_EVERY_S, Sessions, sid_of
from chalicelib.stores.people import PeopleStore, Person
from chalicelib.stores.sessions import SessionStore
from tests.contract.conftest import real_container
from tests.fakes.people import FakePeople
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


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sessions(store: Any, people: Any, clock: Clock) -> Sessions:
    return Sessions(store, people, clock)


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def test_a_sign_in_gives_a_new_secret_and_its_session_is_found_by_it_alone(sessions: Sessions, store: Any):
    who = tenant()
    first, session = sessions.start(who, None, 3)
    second, _ = sessions.start(who, None, 3)
    assert first != second and sessions.find(first) == session and session.tenant_id == who
    assert store.get(first) is None and store.get(sid_of(first)) is not None  # stored by digest, never the secret


def test_a_session_idle_for_eight_hours_ends_and_one_in_use_is_kept_alive(sessions: Sessions, clock: Clock):
    secret, _ = sessions.start(tenant(), None, 1)
    clock.now += IDLE_S - 1
    assert sessions.find(secret) is not None  # used: kept alive from now
    clock.now += IDLE_S - 1
    assert sessions.find(secret) is not None
    clock.now += IDLE_S
    assert sessions.find(secret) is None


def test_a_session_ends_seven_days_after_sign_in_however_busy(sessions: Sessions, clock: Clock):
    secret, _ = sessions.start(tenant(), None, 1)
    while clock.now + SEEN_EVERY_S < 1_800_000_000.0 + ABSOLUTE_S:
        assert sessions.find(secret) is not None
        clock.now += IDLE_S / 2
    clock.now = 1_800_000_000.0 + ABSOLUTE_S
    assert sessions.find(secret) is None


def test_a_signed_out_session_is_gone_and_a_forged_or_odd_cookie_finds_nothing(sessions: Sessions):
    secret, _ = sessions.start(tenant(), None, 2)
    sessions.end(secret)
    assert sessions.find(secret) is None
    forged = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for cookie in (None, "", forged, "x" * 43, "é" * 43, secret + "x", "x" * 10_000):
        assert sessions.find(cookie) is None
        sessions.end(cookie)  # nothing to end, nothing raised


def test_a_forms_csrf_token_is_its_sessions_own(sessions: Sessions):
    _secret, session = sessions.start(tenant(), None, 3)
    _other, other = sessions.start(tenant(), None, 3)
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
