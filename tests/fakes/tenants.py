"""The tenant registry in memory: tenants as given, keys accepted as the producer sends them.

No KMS here: a key version's `sealed` secret is the secret itself."""

from __future__ import annotations

from chalicelib.stores.tenant_model import KeyVersion


class FakeTenants:
    def __init__(self, *tenants):
        self.by_id = {t.user_id: t for t in tenants}
        self.remembered = []
        self.paused_now = []  # (user, reason) of each pause asked for
        self.pause_owners = []  # and who asked

    def get(self, user_id, fresh=False):
        return self.by_id.get(user_id)

    def accept(self, user_id, plan, sender, account_of):
        self.remembered.append((user_id, plan, sender))
        return KeyVersion(1, sender.api_key, sender.api_secret, "111111111111") if sender.has_own_account else None

    def secret_of(self, user_id, keys):
        return keys.sealed if keys.sealed is not None else keys.plain

    def pause(self, user_id, owner, reason):
        self.paused_now.append((user_id, reason))
        self.pause_owners.append(owner)
        return True
