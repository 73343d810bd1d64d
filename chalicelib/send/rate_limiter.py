"""Pacing sends so that no one-second window, as SES counts it, holds more than the promised rate.

SES counts a send when the request reaches it, somewhere between our call's start and its answer.
So the limiter spaces starts `1/rate` apart and, for the guarantee, never starts send k until one
second after send k-N *finished* (N = the whole number of sends allowed per second, at least one):
SES then saw send k-N before that finish and sees send k after this start, more than a second
later, however the network delays either. The price is one SES latency per N sends (at 50 ms and
N = rate, 95% of the rate), paid for a promise that holds under any jitter.

Slots are reserved under a lock and waited for outside it, so a thread pool can share one limiter.
Fractional rates work the same way (0.5/s: one send every two seconds).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 1.0
# Clock readings and SES's timestamps round to the millisecond: keep a little more than a second.
EPSILON_S = 0.001
# Two Lambda containers' clocks (both NTP-synced) differ by a few ms at most; a hand-on allows this much.
CLOCK_SKEW_MS = 20
# How far behind its schedule the limiter may catch up, in back-to-back sends (still within the window).
CATCH_UP_S = 0.25


class RateLimiter:
    def __init__(
        self,
        rate_per_second: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._set_rate(rate_per_second)
        # Finish times of the last sends, oldest first (None while a send is still running), as many as
        # the highest rate asked for allows in a window, so a lower rate's sends still count for a higher.
        self._finished: deque[list[float | None]] = deque()
        self._kept = self.per_window
        self._next = 0.0
        self._last_due = 0.0
        self._clock = clock
        self._cv = threading.Condition()
        self._turnstile = threading.Lock()
        self._slow_until = 0.0
        self._slow_factor = 1.0

    def _set_rate(self, rate_per_second: float) -> None:
        if not rate_per_second > 0:
            raise ValueError("rate must be positive")
        self.rate = rate_per_second
        self._interval = 1.0 / rate_per_second
        self.per_window = max(1, math.floor(rate_per_second + 1e-9))
        self._window = WINDOW_S if rate_per_second >= 1 else 1.0 / rate_per_second

    def acquire(self, rate: float | None = None) -> list[float | None]:
        """Wait until this caller may start a send; pass the returned token to `done()`.

        `rate` is this send's rate (the limiter's own when None): sends of several rates share one
        limiter, and no one-second window holds more of them than the highest of their rates allows.

        Callers queue on a turnstile and only the one at its head waits for the slot, so a pool of
        threads does not wake up all at once at every finished send (in Python, such thundering herds
        cost more than the sends)."""
        with self._turnstile, self._cv:
            if rate is not None and rate != self.rate:
                self._set_rate(rate)
                self._kept = max(self._kept, self.per_window)
                # The next slot follows the last one at the new spacing: a slow send's wide spacing must not
                # hold back a faster send that comes after it (the window's anchor still bounds both).
                self._next = min(self._next, self._last_due + self._interval)
            while True:
                now = self._clock()
                if len(self._finished) >= self.per_window:
                    oldest = self._finished[-self.per_window][0]
                    if oldest is None:  # send k-N still running: its finish is the anchor
                        self._cv.wait()
                        continue
                    earliest = oldest + self._window + EPSILON_S
                else:
                    earliest = 0.0
                due = max(self._next, earliest)
                if due <= now:
                    break
                self._cv.wait(timeout=due - now)
            interval = self._interval * (self._slow_factor if now < self._slow_until else 1.0)
            # The next slot follows this one's due time, not the moment this thread got to run: a thread
            # that woke late (the GIL, a busy machine) would otherwise push every later slot back, and the
            # rate would sag by each delay. Catching up is bounded (CATCH_UP_S), and the anchor above, not
            # the spacing, is what keeps every one-second window within the rate.
            self._next = max(due, now - CATCH_UP_S) + interval
            self._last_due = max(due, now - CATCH_UP_S)
            token: list[float | None] = [None]
            self._finished.append(token)
            while len(self._finished) > self._kept:
                self._finished.popleft()
            return token

    def done(self, token: list[float | None], at: float | None = None) -> None:
        """The send that took `token` has its answer (sent, refused or failed), now or `at` (this clock)."""
        with self._cv:
            token[0] = self._clock() if at is None else at
            self._cv.notify_all()

    def last_finished(self) -> float | None:
        """When the latest send that has its answer finished (this limiter's clock), or None."""
        with self._cv:
            return max((t[0] for t in self._finished if t[0] is not None), default=None)

    def slow_down(self, factor: float, for_seconds: float) -> None:
        """Space sends `factor` times wider for a while (after SES said Throttling)."""
        with self._cv:
            now = self._clock()
            self._slow_factor = max(1.0, factor)
            self._slow_until = now + for_seconds
            self._next = max(self._next, now + self._interval * self._slow_factor)


class QueuePacing:
    """One queue's pacing, when campaigns of different rates share it (a tenant's queue holds all its paid
    campaigns, each with the rate its first message fixed).

    Each send takes a slot at its own campaign's rate first (a limiter per rate, so a 1/s campaign's
    waiting sends never hold a 100/s campaign's back), then a slot on the queue's limiter at the highest
    rate among them, so that all of them together never put more than that rate into any one-second window.
    With one rate (the usual case) both slots are at that rate and the second costs only its bookkeeping.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._own: dict[float, RateLimiter] = {}
        self._queue: RateLimiter | None = None
        self._lock = threading.Lock()

    @property
    def rate(self) -> float:
        """The highest rate among the queue's campaigns so far (what the queue as a whole may reach)."""
        with self._lock:
            return max(self._own, default=0.0)

    def acquire(self, rate: float) -> list[tuple[RateLimiter, list[float | None]]]:
        """Wait for this send's slots; pass the result to `done()`."""
        with self._lock:
            own = self._own.get(rate)
            if own is None:
                own = self._own[rate] = RateLimiter(rate, self._clock)
        slots = [(own, own.acquire())]
        with self._lock:  # the highest rate as it is now, after the wait for the campaign's own slot
            top = max(self._own)
            if self._queue is None:
                self._queue = RateLimiter(top, self._clock)
            queue = self._queue
        slots.append((queue, queue.acquire(top)))
        return slots

    def done(self, slots: list[tuple[RateLimiter, list[float | None]]]) -> None:
        # One reading for both slots: stamped a moment apart, the queue's anchor fell microseconds after the
        # campaign's, and the send that had just waited for one went back to wait for the other: a second
        # wake-up per window, each a scheduler's delay on a busy machine, and each added to the window.
        finished = self._clock()
        for limiter, token in slots:
            limiter.done(token, at=finished)

    def quiet_from_ms(self) -> int | None:
        """The wall-clock time (epoch ms) after which this pacing's sends fill no one-second window any more:
        its last send's finish plus a window. A drainer that goes on in another process (a continuation in
        another Lambda container, with a fresh pacing) begins then, so one window never holds both's sends."""
        with self._lock:
            limiters = [*self._own.values(), *([self._queue] if self._queue else [])]
        finishes = [f for f in (limiter.last_finished() for limiter in limiters) if f is not None]
        if not finishes:
            return None
        ago_s = self._clock() - max(finishes)
        return math.ceil((time.time() - ago_s + WINDOW_S + EPSILON_S) * 1000) + CLOCK_SKEW_MS

    def slow_down(self, factor: float, for_seconds: float) -> None:
        """SES said Throttling: every campaign of the queue slows down (the account is what is throttled)."""
        with self._lock:
            limiters = [*self._own.values(), *([self._queue] if self._queue else [])]
        for limiter in limiters:
            limiter.slow_down(factor, for_seconds)


class Pacings:
    """Each queue's pacing in this container, one per drainer slot of the queue (each paces its own share:
    chalicelib.core.drainer_shares). Kept per container, so that a re-invocation landing in the same
    container goes on from the last slot instead of starting with a fresh window."""

    def __init__(self) -> None:
        self._by_drainer: dict[tuple[str, int], QueuePacing] = {}
        self._lock = threading.Lock()

    def of(self, queue_name: str, slot: int) -> QueuePacing:
        with self._lock:
            key = (queue_name, slot)
            if key not in self._by_drainer:
                self._by_drainer[key] = QueuePacing()
            return self._by_drainer[key]

    def rate(self, queue_name: str, slot: int) -> float:
        """The highest rate this drainer of the queue has paced so far (0.0 before its first send here)."""
        with self._lock:
            pacing = self._by_drainer.get((queue_name, slot))
        return pacing.rate if pacing else 0.0
