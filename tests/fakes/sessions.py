"""The console's sessions in memory, with the DynamoDB store's conditions (a new id only; kept alive only
while it exists)."""

from __future__ import annotations

import dataclasses

from chalicelib.stores.ports.console import StoredSession


class FakeSessions:
    def __init__(self) -> None:
        self.items: dict[str, StoredSession] = {}

    def put(self, s: StoredSession) -> None:
        if s.sid in self.items:
            raise ValueError(f"session {s.sid} exists")
        self.items[s.sid] = s

    def get(self, sid: str) -> StoredSession | None:
        return self.items.get(sid)

    def seen(self, sid: str, at: float) -> None:
        if sid in self.items:
            self.items[sid] = dataclasses.replace(self.items[sid], seen_at=at)

    def delete(self, sid: str) -> None:
        self.items.pop(sid, None)

    def of_tenant(self, tenant_id: str) -> list[StoredSession]:
        return sorted((s for s in self.items.values() if s.tenant_id == tenant_id), key=lambda s: -s.created_at)
