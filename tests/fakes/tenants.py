"""The tenant registry in memory (chalicelib.stores.ports: the tenant ports), with the registry's rules: a
message's keys are a new version only when they are new, and only in the account of the current ones; each
owner pauses once and lifts only its own pause.

No KMS here: a key version's `sealed` secret is the secret itself."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import replace

from chalicelib.core.contract import Sender
from chalicelib.core.errors import SenderRefused
from chalicelib.stores.pauses import MAX_REASON, OWNERS, Pause
from chalicelib.stores.ports.tenants import AccountOf, KeyVersion, Tenant


class FakeTenants:
    def __init__(self, *tenants: Tenant) -> None:
        self.by_id: dict[str, Tenant] = {t.user_id: t for t in tenants}
        self.remembered: list[tuple[str, str, Sender]] = []  # (user, plan, sender) of each accept
        self.paused_now: list[tuple[str, str]] = []  # (user, reason) of each pause taken
        self.pause_owners: list[str] = []  # and who took it

    def get(self, user_id: str, fresh: bool = False) -> Tenant | None:
        return self.by_id.get(user_id)

    def pause_of(self, user_id: str, *, fresh: bool = False) -> str | None:
        held = self.by_id.get(user_id)
        return held.paused_reason if held is not None else None

    def accept(self, user_id: str, plan: str, sender: Sender, account_of: AccountOf) -> KeyVersion | None:
        self.remembered.append((user_id, plan, sender))
        held = self.by_id.get(user_id)
        keys = held.keys if held is not None else ()
        version = self._key_version(sender, keys, account_of)
        if version is not None and version not in keys:
            keys = (*keys, version)
        current = keys[-1].api_key if keys else None
        registered = replace(sender, api_key=current, api_secret=None)  # as the registry: no secret handed out
        self.by_id[user_id] = Tenant(user_id, plan, registered, keys, held.pauses if held is not None else ())
        return version

    @staticmethod
    def _key_version(sender: Sender, keys: tuple[KeyVersion, ...], account_of: AccountOf) -> KeyVersion | None:
        if not sender.has_own_account:
            return None
        current = keys[-1] if keys else None
        known = next((k for k in reversed(keys) if (k.api_key, k.sealed) == (sender.api_key, sender.api_secret)), None)
        if known is not None and (current is None or known.account == current.account):
            return known
        account = known.account if known is not None and known.account else account_of(sender)
        if current is not None and account != current.account:
            raise SenderRefused(f"sender.apiKey: these keys belong to AWS account {account}, not {current.account}")
        return KeyVersion((current.version if current else 0) + 1, sender.api_key or "", sender.api_secret, account)

    def secret_of(self, user_id: str, keys: KeyVersion) -> str:
        return keys.sealed if keys.sealed is not None else keys.plain or ""

    def pause(self, user_id: str, owner: str, reason: str) -> bool:
        held = self.by_id.get(user_id)
        if held is None or any(p.owner == owner for p in held.pauses):
            return False
        self.paused_now.append((user_id, reason))
        self.pause_owners.append(owner)
        self._hold(held, (*held.pauses, Pause(owner, reason[:MAX_REASON], int(time.time() * 1000))))
        return True

    def resume(self, user_id: str, owners: Collection[str] = OWNERS) -> tuple[Pause, ...]:
        held = self.by_id.get(user_id)
        lifted = tuple(p for p in held.pauses if p.owner in owners) if held is not None else ()
        if held is not None and lifted:
            self._hold(held, tuple(p for p in held.pauses if p not in lifted))
        return lifted

    def _hold(self, tenant: Tenant, pauses: tuple[Pause, ...]) -> None:
        order = {owner: i for i, owner in enumerate(OWNERS)}  # the registry answers them in the order of OWNERS
        self.by_id[tenant.user_id] = replace(tenant, pauses=tuple(sorted(pauses, key=lambda p: order[p.owner])))
