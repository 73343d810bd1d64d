"""Signed-in console sessions (chalicelib.console.sessions keeps the rules: idle and absolute expiry).

A session's item is keyed by the SHA-256 of its cookie's secret, never the secret itself: whoever reads the
table (a backup, an operator) cannot sign in with what it finds. TTL removes an item after its absolute
expiry; a read checks the times itself, as TTL deletes late.
"""

from __future__ import annotations

from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.models import Model

from chalicelib.stores.tables import bound, condition_failed


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


@dataclass(frozen=True)
class StoredSession:
    sid: str
    tenant_id: str
    person: str | None
    role: int
    csrf: str
    created_at: float
    seen_at: float
    expires_at: float
    key_digest: str | None = None


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
        ).save(condition=self._model.sid.does_not_exist())

    def get(self, sid: str) -> StoredSession | None:
        try:
            row = self._model.get(sid, consistent_read=True)  # a sign-out a moment ago holds at once
        except DoesNotExist:
            return None
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
        )

    def seen(self, sid: str, at: float) -> None:
        """Kept alive at `at`, if it still exists (a session ended meanwhile stays ended)."""
        try:
            self._model(sid).update(actions=[self._model.seen_at.set(at)], condition=self._model.sid.exists())
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    def delete(self, sid: str) -> None:
        self._model(sid).delete()
