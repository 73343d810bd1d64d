"""One link of a queue's drain chain (chalicelib.send.drain_chain): a drain that fails hands on, it never
holds its queue for the lease's whole hold."""

from __future__ import annotations

import time

import pytest

from chalicelib.send import drain_chain
from chalicelib.send.drain_chain import FIRST_FAILURE_WAIT_MS, MAX_FAILURE_WAIT_MS, DrainChain
from chalicelib.send.drain_report import DrainResult
from chalicelib.send.triggers import DrainRequest, continuation_event, parse_trigger
from tests.fakes.leases import MemoryLeases


class Context:
    function_name = "moonsend-test-send_emails"

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


class Throttled(Exception):
    """A DeleteMessageBatch refused past the SDK's retries."""


class FailingDrainer:
    def __init__(self) -> None:
        self.drains = 0

    def drain(self, queue_name, remaining_ms, slot=0):
        self.drains += 1
        raise Throttled("Rate exceeded")


class HandOn(list):
    def __init__(self, fails: bool = False) -> None:
        super().__init__()
        self.fails = fails

    def __call__(self, function_name, queue_name, generation, lease, slot=0, start_at_ms=None, failures=0):
        if self.fails:
            raise ConnectionError("Lambda throttled the invoke")
        self.append((queue_name, generation, lease, slot, start_at_ms, failures))


def _chain(leases, hand_on, drainer=None):
    return DrainChain(leases, drainer or FailingDrainer(), hand_on, deadline_margin_ms=20_000)


def test_a_failed_drain_hands_its_lease_on_to_a_continuation_two_seconds_later_and_raises_nothing():
    leases, hand_on = MemoryLeases(), HandOn()
    before = int(time.time() * 1000)
    assert drain_chain.run(_chain(leases, hand_on), DrainRequest("q", "alarm"), "q", Context()) is None
    ((queue, generation, token, slot, start_at, failures),) = hand_on
    assert (queue, generation, slot, failures) == ("q", 1, 0, 1)
    assert before + FIRST_FAILURE_WAIT_MS <= start_at <= time.time() * 1000 + FIRST_FAILURE_WAIT_MS
    # The continuation renews the same lease: nothing else drains meanwhile, and it starts at once then.
    assert leases.acquire("q", 60_000) is None
    assert leases.renew("q", token, 60_000) is not None


def test_failures_in_a_row_wait_twice_as_long_each_time_up_to_a_minute():
    waits = []
    for failures in (1, 2, 5, 20):
        leases, hand_on = MemoryLeases(), HandOn()
        lease = leases.acquire("q", 60_000)
        request = DrainRequest("q", "continue", 7, lease.token, failures=failures)
        now = time.time() * 1000
        drain_chain.run(_chain(leases, hand_on), request, "q", Context())
        ((_q, generation, _t, _s, start_at, counted),) = hand_on
        assert generation == 8 and counted == failures + 1
        waits.append(round((start_at - now) / 1000))
    assert waits == [4, 8, 60, 60] and MAX_FAILURE_WAIT_MS == 60_000


def test_when_even_the_hand_on_fails_the_lease_is_given_back_and_the_error_raised_for_lambdas_retry():
    leases = MemoryLeases()
    with pytest.raises(Throttled):
        drain_chain.run(_chain(leases, HandOn(fails=True)), DrainRequest("q", "sweep"), "q", Context())
    assert leases.holder("q") is None  # the retry, the sweeper or the alarm may start the next drain


def test_a_continuation_says_how_many_drains_failed_before_it():
    event = continuation_event("q", 3, "arn:aws:sns:us-east-1:123456789012:t", "tok", 2, 1_800_000_000_000, 4)
    request = parse_trigger(event["Records"][0]["Sns"]["Message"])
    assert request == DrainRequest("q", "continue", 3, "tok", 1_800_000_000_000, 2, 4)
    plain = continuation_event("q", 3, "arn:aws:sns:us-east-1:123456789012:t", "tok")
    assert "failures" not in plain["Records"][0]["Sns"]["Message"]
    assert parse_trigger(plain["Records"][0]["Sns"]["Message"]).failures == 0


def test_a_drain_that_ends_drops_its_lease_as_before():
    class Empty:
        def drain(self, queue_name, remaining_ms, slot=0):
            return DrainResult(queue_name)

    leases, hand_on = MemoryLeases(), HandOn()
    result = drain_chain.run(_chain(leases, hand_on, Empty()), DrainRequest("q", "alarm"), "q", Context())
    assert result is not None and hand_on == [] and leases.holder("q") is None


def test_a_drain_that_ran_a_while_before_it_failed_starts_the_count_again(monkeypatch):
    # An occasional error (a throttled receive once in minutes) must never grow into minute-long waits.
    class SlowThenFailing:
        def drain(self, queue_name, remaining_ms, slot=0):
            time.sleep(0.05)
            raise Throttled("Rate exceeded")

    monkeypatch.setattr(drain_chain, "PROGRESS_S", 0.01)
    leases, hand_on = MemoryLeases(), HandOn()
    lease = leases.acquire("q", 60_000)
    request = DrainRequest("q", "continue", 7, lease.token, failures=5)
    drain_chain.run(_chain(leases, hand_on, SlowThenFailing()), request, "q", Context())
    ((_q, _g, _t, _s, _at, failures),) = hand_on
    assert failures == 1
