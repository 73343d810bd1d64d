"""Wrong keys at the console's sign-in (chalicelib.console.guard) on the fake store and on DynamoDB: an
address's tenth wrong key closes the sign-in to it until its window ends, a right key too; two containers
(two guards over one table) count together; another address is not held up."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from chalicelib.console.guard import WINDOW_S, WRONG_KEYS, SignInGuard
from chalicelib.stores.attempts import AttemptStore
from tests.contract.conftest import real_container
from tests.fakes.attempts import FakeAttempts


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # a window's start (a multiple of 900)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(side: str, request: pytest.FixtureRequest) -> Any:
    if side == "fake":
        return FakeAttempts()
    c = real_container(request)
    return AttemptStore(c.settings.resources.attempts_table.name, c.settings.region)


def test_the_tenth_wrong_key_closes_the_sign_in_to_that_address_until_its_window_ends(store):
    clock, client = Clock(), f"203.0.113.{uuid.uuid4().int % 250}-{uuid.uuid4().hex[:6]}"
    guard = SignInGuard(store, clock)
    for _ in range(WRONG_KEYS - 1):
        assert guard.take(client) == 0
    assert guard.wait_s(client) == 0  # nine: still open
    assert guard.take(client) == 0  # the tenth is tried
    assert guard.take(client) == WINDOW_S  # the eleventh is not
    clock.now += 60
    assert guard.wait_s(client) == WINDOW_S - 60
    assert guard.wait_s(f"other-{client}") == 0  # another address is not held up
    clock.now += WINDOW_S - 60  # the next window
    assert guard.wait_s(client) == 0


def test_two_containers_count_one_addresss_wrong_keys_together(store):
    clock, client = Clock(), f"198.51.100.7-{uuid.uuid4().hex[:6]}"
    one, other = SignInGuard(store, clock), SignInGuard(store, clock)
    for i in range(WRONG_KEYS):
        assert (one if i % 2 else other).take(client) == 0
    assert one.wait_s(client) > 0 and other.wait_s(client) > 0
    assert one.take(client) > 0 and other.take(client) > 0


def test_a_burst_at_once_is_counted_before_it_is_tried_and_a_right_attempt_given_back(store):
    """Twenty attempts at the same moment, from threads: exactly the limit are let through. A right key's
    attempt, given back, does not count against its address."""
    import threading

    clock, client = Clock(), f"192.0.2.1-{uuid.uuid4().hex[:6]}"
    guard = SignInGuard(store, clock)
    passed: list[bool] = []
    barrier = threading.Barrier(20)

    def attempt() -> None:
        barrier.wait()
        passed.append(guard.take(client) == 0)

    threads = [threading.Thread(target=attempt) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert passed.count(True) == WRONG_KEYS

    person = f"192.0.2.2-{uuid.uuid4().hex[:6]}"
    for _ in range(3 * WRONG_KEYS):  # a person signing in again and again with the right key
        assert guard.take(person) == 0
        guard.give_back(person)
    assert guard.wait_s(person) == 0
