"""The drain leases' contract (chalicelib.stores.ports.DrainLeases), on MemoryLeases and on the DynamoDB leases:
one drainer per queue, handed on by its token, retaken once it expires."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from chalicelib.stores.lease import Leases
from chalicelib.stores.ports.queues import DrainLeases
from tests.contract.conftest import real_container
from tests.fakes.leases import MemoryLeases


def fake() -> DrainLeases:
    return MemoryLeases()


def real(leases: Leases) -> DrainLeases:
    return leases


@pytest.fixture
def leases(side: str, request: pytest.FixtureRequest) -> DrainLeases:
    return fake() if side == "fake" else real(real_container(request).leases)


class TestLeaseContract:
    def test_only_one_of_many_concurrent_takers_gets_the_lease(self, leases: DrainLeases, uid: str) -> None:
        with ThreadPoolExecutor(16) as pool:
            got = list(pool.map(lambda _: leases.acquire(f"q-{uid}", 60_000), range(24)))
        assert sum(g is not None for g in got) == 1

    def test_a_lease_is_renewed_by_its_holder_dropped_or_retaken_after_it_expires(
        self, leases: DrainLeases, uid: str
    ) -> None:
        first = leases.acquire(f"q-{uid}", 60_000)
        assert first and leases.acquire(f"q-{uid}", 60_000) is None
        assert leases.renew(f"q-{uid}", "not-the-token", 60_000) is None
        renewed = leases.renew(f"q-{uid}", first.token, 60_000)
        assert renewed
        leases.drop(first)  # the token before the renewal drops nothing
        held = leases.holder(f"q-{uid}")
        assert held is not None and held.token == renewed.token
        leases.drop(renewed)
        short = leases.acquire(f"q-{uid}", 1)
        assert short and leases.holder(f"q-{uid}") in (None, short)
        time.sleep(0.01)  # the holder dies: its 1 ms lease is over
        retaken = leases.acquire(f"q-{uid}", 60_000)
        assert retaken and retaken.token != short.token
        leases.drop(short)  # a stale holder cannot drop the new lease
        held = leases.holder(f"q-{uid}")
        assert held is not None and held.token == retaken.token

    def test_a_renewal_takes_a_new_token_so_a_second_copy_of_the_continuation_renews_nothing(
        self, leases: DrainLeases, uid: str
    ) -> None:
        first = leases.acquire(f"q-{uid}", 60_000)
        assert first is not None
        renewed = leases.renew(f"q-{uid}", first.token, 60_000)
        assert renewed is not None and renewed.token != first.token
        assert leases.renew(f"q-{uid}", first.token, 60_000) is None

    def test_a_lease_dropped_with_a_quiet_time_is_free_and_hands_the_quiet_time_to_the_next_taker(
        self, leases: DrainLeases, uid: str
    ) -> None:
        first = leases.acquire(f"q-{uid}", 60_000)
        assert first is not None and first.quiet_from_ms is None
        quiet = int(time.time() * 1000) + 60_000
        leases.drop(first, quiet)
        assert leases.holder(f"q-{uid}") is None
        assert leases.renew(f"q-{uid}", first.token, 60_000) is None  # the old chain's token renews nothing
        second = leases.acquire(f"q-{uid}", 60_000)
        assert second is not None and second.quiet_from_ms == quiet
        leases.drop(second)  # nothing sent: no quiet time
        third = leases.acquire(f"q-{uid}", 60_000)
        assert third is not None and third.quiet_from_ms is None
