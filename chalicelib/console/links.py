"""Sign-in links: emailed to a person, used once, within LINK_S.

A request for a link answers the same whether or not the address belongs to anyone (the page says "if it
does, a link is on its way"), so it cannot be used to find out who has an account. Opening the link only
reads it: mail scanners and previews fetch links, and must not use up a person's way in. The page it
opens signs in with a POST, which uses the link (one conditional write: of two at once, one wins).

An address that belongs to several tenants (an agency's) picks one on that page; the link signs in to
any of them, once.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from chalicelib.console.people import People, address_of
from chalicelib.stores.ports.console import Person, SignInLinkRecords, StoredLink

LINK_S = 15 * 60
TOKEN_CHARS = 43  # secrets.token_urlsafe(32): a token of any other length is not one of ours


@dataclass(frozen=True)
class OpenLink:
    """A link that may still sign in: whose it is, and the tenants it may sign in to."""

    address: str
    expires_at: float
    memberships: list[Person]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _well_formed(token: str | None) -> bool:
    return bool(token) and len(token or "") == TOKEN_CHARS and (token or "").isascii()


class SignInLinks:
    def __init__(self, links: SignInLinkRecords, people: People, clock: Callable[[], float] = time.time) -> None:
        self._links = links
        self._people = people
        self._clock = clock

    def mint(self, address: str, lifetime_s: float = LINK_S) -> str:
        """A new link's token for `address` (shown in its email only; stored by its digest)."""
        token, now = secrets.token_urlsafe(32), self._clock()
        self._links.put(StoredLink(_digest(token), address_of(address), now, now + lifetime_s))
        return token

    def request(self, address: str) -> str | None:
        """A token for `address` if it belongs to any tenant's people; None (and nothing stored) if not."""
        address = address_of(address)
        if not self._people.memberships(address):
            return None
        return self.mint(address)

    def open(self, token: str | None) -> OpenLink | None:
        """The link, if unused, unexpired and its address still someone's; it stays unused."""
        if not _well_formed(token):
            return None
        stored = self._links.get(_digest(str(token)))
        if stored is None or stored.used_at is not None or self._clock() >= stored.expires_at:
            return None
        # A link made before the person was (again) invited, or before an admin signed them out everywhere,
        # is over for that tenant, as their sessions of then are.
        memberships = [
            p
            for p in self._people.memberships(stored.address)
            if stored.created_at >= max(p.signed_out_at or 0.0, p.invited_at)
        ]
        return OpenLink(stored.address, stored.expires_at, memberships) if memberships else None

    def use(self, token: str | None, tenant_id: str) -> Person | None:
        """Use the link to sign in to `tenant_id`: the person there, or None (used, expired, not theirs)."""
        link = self.open(token)
        chosen = next((p for p in link.memberships if p.tenant_id == tenant_id), None) if link else None
        if chosen is None or not self._links.use(_digest(str(token)), self._clock()):
            return None
        return chosen
