"""A read kept for about a second, read by one thread at a time: what the drainer asks before each send.

The send threads of a drainer ask the same few states (a campaign's control, a tenant's pauses) many times
a second. Each answer is kept `ttl_s`; when it expires, one thread reads it again and the others wait for
that read (dozens of threads each reading at once would cost a read per email in five). A `fresh` ask is
answered by a read that started after it was asked: a decision that must see a change made just before
(a resume, a pause) never takes an older answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# How long a thread waits for another's read before reading itself (a read stuck past the SDK's timeouts).
_WAIT_S = 5.0


class ShortCache(Generic[K, V]):
    def __init__(self, read: Callable[[K], V], ttl_s: float) -> None:
        self._read = read
        self._ttl = ttl_s
        self._kept: dict[K, tuple[float, V]] = {}
        self._reading: dict[K, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, key: K, *, fresh: bool = False) -> V:
        while True:
            asked = time.monotonic()
            with self._lock:
                hit = self._kept.get(key)
                if hit and asked - hit[0] < self._ttl and not fresh:
                    return hit[1]
                reading = self._reading.get(key)
                if reading is None:
                    self._reading[key] = threading.Event()
                    break
            reading.wait(_WAIT_S)  # another thread is reading it: its answer is as fresh as ours would be
            if fresh:
                with self._lock:
                    hit = self._kept.get(key)
                if hit and hit[0] >= asked:
                    return hit[1]
        try:
            return self._read_now(key)
        finally:
            with self._lock:
                self._reading.pop(key).set()

    def forget(self, key: K) -> None:
        """This container changed it: the next ask reads it."""
        with self._lock:
            self._kept.pop(key, None)

    def _read_now(self, key: K) -> V:
        started = time.monotonic()
        value = self._read(key)
        with self._lock:
            self._kept[key] = (started, value)
        return value
