"""Wrong keys at the console's sign-in, slowed down across containers: a client address gets WRONG_KEYS
wrong keys in a window of WINDOW_S; after that, every sign-in from it is refused until the window ends,
a right key too (else the refusal would tell which guess was right). The count is in a table every
container shares (chalicelib.stores.attempts), so that spreading guesses over containers gains nothing.

At 10 guesses per 15 minutes an address tries about a thousand keys a day; a key is 32 random bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chalicelib.stores.ports import AttemptCounts

WRONG_KEYS = 10
WINDOW_S = 15 * 60


class SignInGuard:
    def __init__(
        self,
        attempts: AttemptCounts,
        clock: Callable[[], float] = time.time,
        wrong_keys: int = WRONG_KEYS,
        window_s: int = WINDOW_S,
    ) -> None:
        self._attempts = attempts
        self._clock = clock
        self._wrong_keys = wrong_keys
        self._window_s = window_s

    def _window(self, client: str) -> tuple[str, int]:
        """The key of `client`'s current window, and when it ends."""
        start = int(self._clock()) // self._window_s * self._window_s
        return f"wrong-key#{client}#{start}", start + self._window_s

    def wait_s(self, client: str) -> int:
        """Seconds before `client` may try a key again; 0: now."""
        key, ends = self._window(client)
        if self._attempts.count(key) < self._wrong_keys:
            return 0
        return max(1, ends - int(self._clock()))

    def wrong_key(self, client: str) -> None:
        key, ends = self._window(client)
        self._attempts.add(key, ends)
