"""A tenant's people and sign-in links in memory, with the DynamoDB stores' rules (a role changed keeps the
first invitation; a link is used once, before its expiry)."""

from __future__ import annotations

import dataclasses

from chalicelib.stores.people import MAX_PEOPLE, MAX_TENANTS_PER_ADDRESS
from chalicelib.stores.ports.console import Person, StoredLink


class FakePeople:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str], Person] = {}

    def get(self, tenant_id: str, address: str) -> Person | None:
        return self.items.get((tenant_id, address))

    def of_tenant(self, tenant_id: str) -> list[Person]:
        return sorted((p for (t, _), p in self.items.items() if t == tenant_id), key=lambda p: p.address)[:MAX_PEOPLE]

    def tenants_of(self, address: str) -> list[str]:
        return sorted(t for (t, a) in self.items if a == address)[:MAX_TENANTS_PER_ADDRESS]

    def put(self, p: Person) -> None:
        was = self.items.get((p.tenant_id, p.address))
        if was is not None:
            p = dataclasses.replace(was, role=p.role)
        self.items[(p.tenant_id, p.address)] = p

    def signed_out(self, tenant_id: str, address: str, at: float) -> bool:
        was = self.items.get((tenant_id, address))
        if was is None:
            return False
        self.items[(tenant_id, address)] = dataclasses.replace(was, signed_out_at=at)
        return True

    def remove(self, tenant_id: str, address: str) -> None:
        self.items.pop((tenant_id, address), None)


class FakeSignInLinks:
    def __init__(self) -> None:
        self.items: dict[str, StoredLink] = {}

    def put(self, link: StoredLink) -> None:
        if link.token in self.items:
            raise ValueError(f"link {link.token} exists")
        self.items[link.token] = dataclasses.replace(link, expires_at=int(link.expires_at))

    def get(self, token: str) -> StoredLink | None:
        return self.items.get(token)

    def use(self, token: str, now: float) -> bool:
        link = self.items.get(token)
        if link is None or link.used_at is not None or not link.expires_at > int(now):
            return False
        self.items[token] = dataclasses.replace(link, used_at=now)
        return True


class FakeKeyDigests:
    """Each tenant's live API key digests, as chalicelib.control.api_keys answers for them (KeyDigests)."""

    def __init__(self) -> None:
        self.digests: dict[str, set[str]] = {}

    def add(self, user_id: str, digest: str) -> None:
        self.digests.setdefault(user_id, set()).add(digest)

    def revoke(self, user_id: str, digest: str) -> None:
        self.digests.get(user_id, set()).discard(digest)

    def live(self, user_id: str, digest: str) -> bool:
        return digest in self.digests.get(user_id, set())
