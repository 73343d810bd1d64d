import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from chalicelib.send.rate_limiter import QueuePacing, RateLimiter
from infra.status import max_in_window


def _run(rate: float, sends: int, send_time_s: float, workers: int = 16):
    clock = time.monotonic  # the limiter's clock, given to it: starts and finishes read on the same one
    limiter = RateLimiter(rate, clock=clock)
    starts: list[float] = []
    finishes: list[float] = []
    lock = threading.Lock()

    def one(_):
        token = limiter.acquire()
        t0 = clock()
        threading.Event().wait(send_time_s)
        t1 = clock()
        limiter.done(token)
        with lock:
            starts.append(t0)
            finishes.append(t1)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(sends)))
    return limiter, sorted(starts), sorted(finishes)


@pytest.mark.parametrize(("rate", "sends"), [(20, 50), (7, 20), (2.5, 6)])
def test_no_one_second_window_holds_more_than_the_rate_whatever_the_latency(rate, sends):
    limiter, starts, finishes = _run(rate, sends, send_time_s=0.03)
    n = limiter.per_window
    # SES sees send k after it started and send k-n before it finished: those must be > 1 s apart.
    for k in range(n, sends):
        assert starts[k] - finishes[k - n] > 1.0
    assert max_in_window([int(t * 1000) for t in starts], 1000) <= n


def test_fractional_rate_spaces_sends_by_its_inverse():
    limiter, starts, _ = _run(0.5, 3, send_time_s=0.0, workers=3)
    assert limiter.per_window == 1
    assert starts[1] - starts[0] >= 2.0 and starts[2] - starts[1] >= 2.0


def test_slow_down_widens_the_spacing_for_a_while():
    clock = time.monotonic
    limiter = RateLimiter(100, clock=clock)
    limiter.done(limiter.acquire())
    limiter.slow_down(10.0, 5.0)
    a = limiter.acquire()
    limiter.done(a)
    t0 = clock()
    limiter.done(limiter.acquire())
    assert clock() - t0 >= 0.09  # 10x the 10 ms spacing


def test_rate_must_be_positive():
    with pytest.raises(ValueError):
        RateLimiter(0)


def test_a_late_caller_does_not_push_every_later_slot_back():
    # Slots follow the schedule, not the moment a thread got to run: after a stall, the sends that were
    # due go at once (the window anchor still bounds them), instead of the whole schedule sliding back.
    clock = time.monotonic
    limiter = RateLimiter(10, clock=clock)  # a slot every 100 ms
    limiter.done(limiter.acquire())
    threading.Event().wait(0.35)  # this caller stalls for three and a half slots
    t0 = clock()
    for _ in range(3):
        limiter.done(limiter.acquire())
    assert clock() - t0 < 0.09  # the three overdue slots, back to back
    t1 = clock()
    limiter.done(limiter.acquire())
    limiter.done(limiter.acquire())
    assert clock() - t1 >= 0.09  # then the spacing again


def test_campaigns_of_several_rates_on_one_queue_never_exceed_the_highest_rate_and_a_slow_one_holds_none_back():
    # Two campaigns of one tenant, fixed at 10/s and 0.5/s, drain from the same queue concurrently.
    pacing = QueuePacing()
    clock = time.monotonic
    starts: list[tuple[float, float]] = []
    lock = threading.Lock()

    def one(rate):
        slots = pacing.acquire(rate)
        t0 = clock()
        threading.Event().wait(0.02)
        pacing.done(slots)
        with lock:
            starts.append((t0, rate))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, [0.5, 0.5] + [10.0] * 15))  # the fast ones take 1.5 s at 10/s, the slow 2 s
    starts.sort()
    assert max_in_window([int(t * 1000) for t, _r in starts], 1000) <= 10
    slow = [t for t, r in starts if r == 0.5]
    assert slow[1] - slow[0] > 2.0  # the slow campaign keeps its own rate
    # ... and its waiting send (two seconds) holds none of the fast campaign's back: all of those went first.
    assert all(t < slow[1] for t, r in starts if r == 10.0)


def test_a_send_that_waited_for_its_campaigns_slot_finds_the_queues_slot_free_at_the_same_moment():
    """Both slots of a send are anchored on one reading of its finish, so the next window's send, woken for
    the campaign's slot, is not sent back to wait a few microseconds more for the queue's."""
    readings = iter(float(i) * 1e-6 for i in range(1, 1_000_000))  # every reading a microsecond later
    pacing = QueuePacing(clock=lambda: next(readings))
    slots = pacing.acquire(1.0)
    pacing.done(slots)
    (own, own_token), (queue, queue_token) = slots
    assert own_token[0] is not None and own_token[0] == queue_token[0]
    assert own.last_finished() == queue.last_finished()
