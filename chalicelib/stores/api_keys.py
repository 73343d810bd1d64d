"""A tenant's API keys, by the SHA-256 of each (chalicelib.control.api_keys keeps the rules): never the key
itself, only what names it to a person (its first characters, a label, when and by whom it was made).

One item per tenant and key digest: a request's key is checked with one consistent GetItem by its digest,
so a key revoked a moment ago is refused at its next request.
"""

from __future__ import annotations

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, DoesNotExist
from pynamodb.models import Model

from chalicelib.stores.ports.tenants import StoredKey
from chalicelib.stores.tables import bound, condition_failed

# The most keys a tenant lists (all of them: more are refused when made).
MAX_KEYS_LISTED = 100


class ApiKeyModel(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)  # the tenant
    digest = UnicodeAttribute(range_key=True)  # SHA-256 of the whole key, hex
    key_id = UnicodeAttribute()  # what a person names it by (`key_...`): not secret
    shown = UnicodeAttribute()  # the key's first characters, to tell it apart where it is kept
    label = UnicodeAttribute(null=True)  # what it is for, in the tenant's words
    created_at = NumberAttribute()  # epoch seconds
    created_by = UnicodeAttribute()  # a person's address, `api-key`, or `operator`


class ApiKeyStore:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(ApiKeyModel, table_name, region)

    def get(self, user_id: str, digest: str) -> StoredKey | None:
        try:
            # Consistent: a key revoked a moment ago is refused now, not after the replica catches up.
            return _key(self._model.get(user_id, digest, consistent_read=True))
        except DoesNotExist:
            return None

    def of_tenant(self, user_id: str) -> list[StoredKey]:
        """The tenant's keys (at most MAX_KEYS_LISTED), oldest first."""
        rows = self._model.query(user_id, limit=MAX_KEYS_LISTED, consistent_read=True)
        return sorted((_key(row) for row in rows), key=lambda k: (k.created_at, k.key_id))

    def put(self, key: StoredKey) -> None:
        self._model(
            key.user_id,
            key.digest,
            key_id=key.key_id,
            shown=key.shown,
            label=key.label,
            created_at=key.created_at,
            created_by=key.created_by,
        ).save(condition=ApiKeyModel.digest.does_not_exist())

    def delete(self, user_id: str, digest: str) -> bool:
        """False when it was gone already (revoked by another request)."""
        try:
            self._model(user_id, digest).delete(condition=ApiKeyModel.digest.exists())
        except DeleteError as exc:
            if condition_failed(exc):
                return False
            raise
        return True


def _key(row: ApiKeyModel) -> StoredKey:
    return StoredKey(
        str(row.user_id),
        str(row.digest),
        str(row.key_id),
        str(row.shown),
        row.label,
        float(row.created_at),
        str(row.created_by),
    )
