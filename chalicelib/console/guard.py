"""Sign-in attempts slowed down across containers: a `who` (a client's address, or the mailbox a link is
asked for) gets `limit` attempts of a kind in a window of WINDOW_S; after that, every attempt of that kind
is refused until the window ends, a right key too (else the refusal would tell which guess was right). The
counts are in a table every container shares (chalicelib.stores.attempts), so that spreading attempts over
containers gains nothing.

An attempt is counted before it is tried (`take`: one atomic ADD whose answer is the new count), so that a
burst of attempts at once cannot all pass a count read before any of them was added; one that turns out
right is given back (`give_back`), so a person's own sign-ins do not close the door on them.

Three kinds, each its own guard (chalicelib.wiring): wrong keys and unusable sign-in links per client
address (at 10 per 15 minutes an address tries about a thousand keys a day; a key is 32 random bytes),
link requests per client address (each may send an email), links and invitations mailed per address (a
stranger cannot fill someone's inbox with them), and invitation emails per tenant (an admin cannot turn
the platform's From address into a mailer by inviting and removing).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chalicelib.stores.ports.console import AttemptCounts

WRONG_KEYS = 10
LINK_REQUESTS = 10
LINKS_PER_MAILBOX = 3
INVITATIONS = 20  # invitation emails a tenant's admins send per window: the platform's From is everyone's
WINDOW_S = 15 * 60


class SignInGuard:
    def __init__(
        self,
        attempts: AttemptCounts,
        clock: Callable[[], float] = time.time,
        limit: int = WRONG_KEYS,
        window_s: int = WINDOW_S,
        kind: str = "wrong-key",
    ) -> None:
        self._attempts = attempts
        self._clock = clock
        self._limit = limit
        self._window_s = window_s
        self._kind = kind

    def _window(self, who: str) -> tuple[str, int]:
        """The key of `who`'s current window, and when it ends."""
        start = int(self._clock()) // self._window_s * self._window_s
        return f"{self._kind}#{who}#{start}", start + self._window_s

    def wait_s(self, who: str) -> int:
        """Seconds before `who` may try again; 0: now (nothing counted)."""
        key, ends = self._window(who)
        if self._attempts.count(key) < self._limit:
            return 0
        return max(1, ends - int(self._clock()))

    def take(self, who: str) -> int:
        """Count one attempt of `who`'s now; the seconds to wait if it is past the limit (0: go on)."""
        key, ends = self._window(who)
        if self._attempts.add(key, ends) <= self._limit:
            return 0
        return max(1, ends - int(self._clock()))

    def give_back(self, who: str) -> None:
        """An attempt `take` counted that was right (a right key): not held against `who`."""
        key, _ends = self._window(who)
        self._attempts.release(key)
