"""One drainer per queue: the lease, and the chain of invocations that carries it."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from chalicelib import drain_chain, wiring
from chalicelib.drainer import DrainResult
from chalicelib.lease import Leases
from chalicelib.triggers import DrainRequest, parse_trigger


def test_only_one_of_many_concurrent_takers_gets_the_lease(stack, uid):
    leases = wiring.container().leases
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda _: leases.acquire(f"q-{uid}", 60_000), range(24)))
    assert sum(g is not None for g in got) == 1


def test_a_lease_is_renewed_by_its_holder_released_or_retaken_after_it_expires(stack, uid):
    leases: Leases = wiring.container().leases
    first = leases.acquire(f"q-{uid}", 60_000)
    assert first and leases.acquire(f"q-{uid}", 60_000) is None
    assert leases.renew(f"q-{uid}", "not-the-token", 60_000) is None
    assert leases.renew(f"q-{uid}", first.token, 60_000)
    leases.release(first)
    short = leases.acquire(f"q-{uid}", 1)
    assert short and leases.holder(f"q-{uid}") in (None, short)
    time.sleep(0.01)
    retaken = leases.acquire(f"q-{uid}", 60_000)  # the holder died: its lease expired
    assert retaken and retaken.token != short.token
    leases.release(short)  # a stale holder cannot release the new lease
    assert leases.holder(f"q-{uid}").token == retaken.token


class FakeContext:
    function_name = "moonsend-local-send_emails"

    def __init__(self, ms=60_000):
        self.ms = ms

    def get_remaining_time_in_millis(self):
        return self.ms


class FakeContainer:
    def __init__(self, leases, unfinished_times=0, hold_s=0.0):
        self.leases = leases
        self.unfinished_times = unfinished_times
        self.hold_s = hold_s
        self.drains = 0
        self.reinvoked = []

        outer = self

        class Drainer:
            def drain(self, queue, remaining_ms):
                outer.drains += 1
                time.sleep(outer.hold_s)
                r = DrainResult(queue)
                r.unfinished = outer.drains <= outer.unfinished_times
                return r

        self.drainer = Drainer()

    def reinvoke(self, function_name, queue, generation, lease):
        self.reinvoked.append((queue, generation, lease))


def test_two_alarms_at_once_start_one_drainer(stack, uid):
    c = FakeContainer(wiring.container().leases, hold_s=0.3)
    req = DrainRequest(f"moonsend-local-t-{uid}", "alarm")
    barrier = threading.Barrier(2)

    def trigger():
        barrier.wait()
        return drain_chain.run(c, req, req.queue_name, FakeContext())

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: trigger(), range(2)))
    assert c.drains == 1 and sum(r is None for r in results) == 1


def test_the_chain_hands_its_lease_on_and_releases_it_at_the_end(stack, uid):
    leases = wiring.container().leases
    queue = f"moonsend-local-t-{uid}"
    c = FakeContainer(leases, unfinished_times=1)
    drain_chain.run(c, DrainRequest(queue, "alarm"), queue, FakeContext())
    ((_queue, generation, token),) = c.reinvoked
    assert generation == 1 and leases.holder(queue).token == token
    # While the chain holds it, another alarm does nothing.
    assert drain_chain.run(c, DrainRequest(queue, "alarm"), queue, FakeContext()) is None
    # The continuation renews with the token, drains to the end and releases.
    assert drain_chain.run(c, DrainRequest(queue, "continue", 1, token), queue, FakeContext()) is not None
    assert leases.holder(queue) is None and c.drains == 2


def test_a_continuation_with_a_stale_token_does_not_drain(stack, uid):
    leases = wiring.container().leases
    queue = f"moonsend-local-t-{uid}"
    leases.acquire(queue, 60_000)
    c = FakeContainer(leases)
    assert drain_chain.run(c, DrainRequest(queue, "continue", 3, "stale"), queue, FakeContext()) is None
    assert c.drains == 0


@pytest.mark.parametrize("lease", ["tok-1", None])
def test_continuation_messages_carry_the_lease(lease):
    from chalicelib.triggers import continuation_event

    event = continuation_event("q", 4, "arn:aws:sns:us-east-1:1:t", lease or "")
    req = parse_trigger(event["Records"][0]["Sns"]["Message"])
    assert (req.queue_name, req.source, req.generation) == ("q", "continue", 4)
    assert req.lease == (lease or "")
    assert json.loads(event["Records"][0]["Sns"]["Message"])["kind"] == "moonsend.drain.continue"
