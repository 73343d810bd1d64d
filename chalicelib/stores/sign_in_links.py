"""Emailed sign-in links (chalicelib.console.links keeps the rules: who gets one, how long it lasts).

An item is keyed by the SHA-256 of its link's token, never the token itself: whoever reads the table
cannot sign in with what it finds. Using a link is one conditional write (not used yet, not expired), so
of two requests with the same link, at the same moment in two containers, one signs in. TTL removes an
item after its expiry; a read checks the time itself, as TTL deletes late.
"""

from __future__ import annotations

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.models import Model

from chalicelib.stores.ports.console import StoredLink
from chalicelib.stores.tables import bound, condition_failed


class SignInLinkModel(Model):
    class Meta:
        table_name = "unbound"

    token = UnicodeAttribute(hash_key=True)  # hex SHA-256 of the link's token
    address = UnicodeAttribute()  # whom it signs in
    created_at = NumberAttribute()  # epoch seconds
    expires_at = NumberAttribute()  # epoch seconds; DynamoDB TTL
    used_at = NumberAttribute(null=True)


class SignInLinkStore:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(SignInLinkModel, table_name, region)

    def put(self, link: StoredLink) -> None:
        m = self._model
        m(link.token, address=link.address, created_at=link.created_at, expires_at=int(link.expires_at)).save(
            condition=m.token.does_not_exist()
        )

    def get(self, token: str) -> StoredLink | None:
        try:
            row = self._model.get(token, consistent_read=True)  # a link used a moment ago reads as used
        except DoesNotExist:
            return None
        used = row.used_at
        return StoredLink(
            row.token, row.address, float(row.created_at), float(row.expires_at), float(used) if used else None
        )

    def use(self, token: str, now: float) -> bool:
        """Mark the link used, if it exists, was never used and has not expired; whether it was."""
        m = self._model
        try:
            m(token).update(
                actions=[m.used_at.set(now)],
                condition=m.token.exists() & m.used_at.does_not_exist() & (m.expires_at > int(now)),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True
