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
        guard.add(client)
    assert guard.wait_s(client) == 0  # nine: still open
    guard.add(client)
    clock.now += 60
    assert guard.wait_s(client) == WINDOW_S - 60
    assert guard.wait_s(f"other-{client}") == 0  # another address is not held up
    clock.now += WINDOW_S - 60  # the next window
    assert guard.wait_s(client) == 0


def test_two_containers_count_one_addresss_wrong_keys_together(store):
    clock, client = Clock(), f"198.51.100.7-{uuid.uuid4().hex[:6]}"
    one, other = SignInGuard(store, clock), SignInGuard(store, clock)
    for i in range(WRONG_KEYS):
        (one if i % 2 else other).add(client)
    assert one.wait_s(client) > 0 and other.wait_s(client) > 0
