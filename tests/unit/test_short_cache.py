"""The drainer's short reads (chalicelib.stores.short_cache): kept a second, read by one thread at a time."""

from __future__ import annotations

import threading
import time

from chalicelib.stores.short_cache import ShortCache


class SlowRead:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s, self.calls, self.value = delay_s, 0, "a"
        self._lock = threading.Lock()

    def __call__(self, key: str) -> str:
        with self._lock:
            self.calls += 1
        time.sleep(self.delay_s)
        return f"{key}={self.value}"


def test_an_answer_is_kept_for_its_time_then_read_again():
    read = SlowRead()
    cache = ShortCache(read, ttl_s=0.2)
    assert cache.get("k") == "k=a" and cache.get("k") == "k=a" and read.calls == 1
    read.value = "b"
    time.sleep(0.25)
    assert cache.get("k") == "k=b" and read.calls == 2


def test_many_threads_asking_at_once_make_one_read():
    read = SlowRead(delay_s=0.2)
    cache = ShortCache(read, ttl_s=1.0)
    answers: list[str] = []
    threads = [threading.Thread(target=lambda: answers.append(cache.get("k"))) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == ["k=a"] * 20 and read.calls == 1


def test_a_fresh_ask_never_takes_an_answer_read_before_it():
    read = SlowRead()
    cache = ShortCache(read, ttl_s=60.0)
    assert cache.get("k") == "k=a"
    read.value = "b"
    assert cache.get("k") == "k=a"  # kept
    assert cache.get("k", fresh=True) == "k=b" and read.calls == 2


def test_a_forgotten_answer_is_read_at_the_next_ask():
    read = SlowRead()
    cache = ShortCache(read, ttl_s=60.0)
    cache.get("k")
    read.value = "b"
    cache.forget("k")
    assert cache.get("k") == "k=b"


def test_a_failed_read_is_not_kept_and_lets_the_next_ask_read():
    calls = []

    def flaky(key: str) -> str:
        calls.append(key)
        if len(calls) == 1:
            raise ConnectionError("throttled")
        return "ok"

    cache = ShortCache(flaky, ttl_s=60.0)
    try:
        cache.get("k")
        raise AssertionError("the first read's error is the caller's")
    except ConnectionError:
        pass
    assert cache.get("k") == "ok" and len(calls) == 2
