"""Which identity of the platform's SES account covers a From address: its own, its domain's, or none.

An address with an identity of its own was verified by whoever reads its mailbox (SES mailed it a link):
proof enough that the first free tenant sending from it may have it. A domain identity covers every
address of the domain (`billing@`, `security@`): it proves nothing about which tenant an address is, so
such an address is a free tenant's only when an operator assigns it (chalicelib.stores.free_senders).

A look-up is one GetEmailIdentity for the address, and one more for its domain when the address has no
verified identity of its own. Answers are kept per container for a minute: a burst of messages from an
address that is refused reads SES once, not once per message (SES's management calls are rate limited
per account), and a verification done meanwhile counts from the next minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.stores.ports.sending import Coverage

CACHE_S = 60.0


def verified(found: dict[str, Any]) -> bool:
    """Whether a GetEmailIdentity answer is verified for sending. SES v2 says it in two fields,
    VerifiedForSendingStatus and VerificationStatus (SUCCESS): an answer may set one and not the other."""
    return bool(found.get("VerifiedForSendingStatus")) or found.get("VerificationStatus") == "SUCCESS"


class PlatformIdentities:
    def __init__(
        self,
        client: Callable[[], Any],
        clock: Callable[[], float] = time.monotonic,
        cache_s: float = CACHE_S,
    ) -> None:
        self._client = client  # the platform's SES v2 client in the stage's region
        self._clock = clock
        self._cache_s = cache_s
        self._known: dict[str, tuple[float, Coverage]] = {}
        self._lock = threading.Lock()

    def covering(self, address: str) -> Coverage:
        key = address.lower()
        with self._lock:
            hit = self._known.get(key)
        if hit is not None and self._clock() - hit[0] < self._cache_s:
            return hit[1]
        own = self._verified(key)
        coverage = Coverage(address, own, domain=not own and self._verified(key.rpartition("@")[2]))
        with self._lock:
            self._known[key] = (self._clock(), coverage)
        return coverage

    def _verified(self, identity: str) -> bool:
        try:
            return verified(self._client().get_email_identity(EmailIdentity=identity))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NotFoundException":
                return False
            raise
