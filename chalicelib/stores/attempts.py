"""Attempts counted per key and window, in one table every container shares (chalicelib.console.guard reads
and adds to them): a client that spreads its guesses over many Lambda containers meets one count.

An item is one key's window (`wrong-key#203.0.113.7#1795899600`): its count is added to atomically and read
consistently; TTL removes it after its window, and a read ignores a window that has ended (TTL deletes late).
"""

from __future__ import annotations

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.models import Model

from chalicelib.stores.tables import bound, update_if


class AttemptModel(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)  # what is counted, for whom, and its window's start
    n = NumberAttribute(default=0)
    expires_at = NumberAttribute()  # the window's end, epoch seconds; DynamoDB TTL


class AttemptStore:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(AttemptModel, table_name, region)

    def count(self, key: str) -> int:
        try:
            return int(self._model.get(key, consistent_read=True).n)
        except DoesNotExist:
            return 0

    def add(self, key: str, expires_at: int) -> int:
        """One more attempt of `key`'s window; the count with it."""
        m = self._model
        row = m(key)
        row.update(actions=[m.n.add(1), m.expires_at.set(expires_at)])
        return int(row.n)

    def release(self, key: str) -> None:
        """One attempt of `key`'s window taken back (never below nothing: a window that ended is gone)."""
        m = self._model
        update_if(m(key), [m.n.add(-1)], m.n > 0)
