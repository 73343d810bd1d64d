"""Signed-in console sessions (chalicelib.console.sessions keeps the rules: idle and absolute expiry).

A session's item is keyed by the SHA-256 of its cookie's secret, never the secret itself: whoever reads the
table (a backup, an operator) cannot sign in with what it finds. TTL removes an item after its absolute
expiry; a read checks the times itself, as TTL deletes late. The index by tenant (keys only) lists a
tenant's sessions, newest first, for its admins to see and end.
"""

from __future__ import annotations

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from chalicelib.core.resources import SESSIONS_BY_TENANT
from chalicelib.stores.ports.console import StoredSession
from chalicelib.stores.tables import bound, condition_failed

# The most sessions a tenant's admins see (the newest): a sign-in is a session, and each lasts up to 7 days.
MAX_LISTED = 200


class _ByTenant(GlobalSecondaryIndex["SessionModel"]):
    class Meta:
        index_name = SESSIONS_BY_TENANT
        projection = KeysOnlyProjection()

    tenant_id = UnicodeAttribute(hash_key=True)
    created_at = NumberAttribute(range_key=True)


class SessionModel(Model):
    class Meta:
        table_name = "unbound"

    sid = UnicodeAttribute(hash_key=True)  # hex SHA-256 of the cookie's secret
    tenant_id = UnicodeAttribute()
    person = UnicodeAttribute(null=True)  # the signed-in person's address; None: signed in with the API key
    key_digest = UnicodeAttribute(null=True)  # signed in with the API key: its SHA-256, held while it is current
    role = NumberAttribute()  # chalicelib.api.principal.Role's value
    csrf = UnicodeAttribute()  # every form that changes something carries it
    created_at = NumberAttribute()  # epoch seconds
    seen_at = NumberAttribute()  # the last request that kept it alive
    expires_at = NumberAttribute()  # absolute expiry, epoch seconds; DynamoDB TTL
    agent = UnicodeAttribute(null=True)  # the browser's User-Agent at sign-in (its first AGENT_CHARS)
    client = UnicodeAttribute(null=True)  # the address it signed in from, as API Gateway saw it
    by_tenant = _ByTenant()


AGENT_CHARS = 200


class SessionStore:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(SessionModel, table_name, region)

    def put(self, s: StoredSession) -> None:
        """A new session (its id is new: never written over one)."""
        self._model(
            s.sid,
            tenant_id=s.tenant_id,
            person=s.person,
            key_digest=s.key_digest,
            role=s.role,
            csrf=s.csrf,
            created_at=s.created_at,
            seen_at=s.seen_at,
            expires_at=int(s.expires_at),
            agent=(s.agent or "")[:AGENT_CHARS] or None,
            client=s.client,
        ).save(condition=self._model.sid.does_not_exist())

    def get(self, sid: str) -> StoredSession | None:
        try:
            row = self._model.get(sid, consistent_read=True)  # a sign-out a moment ago holds at once
        except DoesNotExist:
            return None
        return _stored(row)

    def of_tenant(self, tenant_id: str) -> list[StoredSession]:
        """The tenant's newest sessions, at most MAX_LISTED (ended ones too, until TTL removes them: the caller
        judges). The index lags a sign-in by a moment."""
        keys = [str(r.sid) for r in self._model.by_tenant.query(tenant_id, scan_index_forward=False, limit=MAX_LISTED)]
        rows = [_stored(row) for row in self._model.batch_get(keys)] if keys else []
        return sorted((r for r in rows if r.tenant_id == tenant_id), key=lambda r: -r.created_at)

    def seen(self, sid: str, at: float) -> None:
        """Kept alive at `at`, if it still exists (a session ended meanwhile stays ended)."""
        try:
            self._model(sid).update(actions=[self._model.seen_at.set(at)], condition=self._model.sid.exists())
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    def delete(self, sid: str) -> None:
        self._model(sid).delete()


def _stored(row: SessionModel) -> StoredSession:
    return StoredSession(
        row.sid,
        row.tenant_id,
        row.person,
        int(row.role),
        row.csrf,
        float(row.created_at),
        float(row.seen_at),
        float(row.expires_at),
        row.key_digest,
        row.agent,
        row.client,
    )
