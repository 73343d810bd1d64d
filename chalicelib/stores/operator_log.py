"""What operators did to the stage, and who: every action of the operator's page and of the CLI's operator
commands that changes something (a pause, a resume, a cancel, a replay, a From assigned) is recorded here.

One item per action in one partition (`log` = `actions`): operators act a few times an hour, far below what
one partition takes (1,000 writes a second), and the newest actions come back with one Query, newest first.
The sort key is the time in epoch milliseconds, zero-padded, then a random suffix, so that two actions in one
millisecond are both kept. Each item says who (the operator's AWS identity as STS names it: the credentials
the action was signed with, not a name anyone typed), what, on what, with what detail (a pause's reason, an
address), whether it did what was asked and what it answered. Items are kept a year (TTL); no function of
the stage reads or writes this table: only operators' credentials reach it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from pynamodb.attributes import BooleanAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.models import Model

from chalicelib.stores.tables import bound

PARTITION = "actions"
KEPT_S = 366 * 24 * 3600
# The most entries one read returns (the page shows the newest).
MAX_READ = 200
# Each text field is cut to this many characters: a reason or an answer is a line, not a document.
MAX_TEXT = 500


class OperatorActionModel(Model):
    class Meta:
        table_name = "unbound"

    log = UnicodeAttribute(hash_key=True)
    at = UnicodeAttribute(range_key=True)  # `<epoch ms, 15 digits>#<random>`
    at_ms = NumberAttribute()
    who = UnicodeAttribute()  # the operator's AWS identity (an ARN)
    action = UnicodeAttribute()  # pause, resume, cancel, replay, assign-from
    target = UnicodeAttribute()  # a tenant, `tenant/campaign`, a function, `all failed invocations`
    detail = UnicodeAttribute(null=True)  # a reason, an owner, an address
    ok = BooleanAttribute()
    outcome = UnicodeAttribute()  # what the action answered
    via = UnicodeAttribute()  # `page` or `cli`
    expires_at = NumberAttribute()


@dataclass(frozen=True)
class OperatorAction:
    at_ms: int
    who: str
    action: str
    target: str
    detail: str | None
    ok: bool
    outcome: str
    via: str
    key: str = ""  # the item's sort key: names this entry (the page links to it after acting)


def _cut(text: str | None) -> str | None:
    return None if text is None else text[:MAX_TEXT]


class OperatorLog:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(OperatorActionModel, table_name, region)

    def record(self, entry: OperatorAction) -> OperatorAction:
        """Keep the entry; returns it with its key."""
        key = f"{entry.at_ms:015d}#{secrets.token_hex(4)}"
        self._model(
            PARTITION,
            key,
            at_ms=entry.at_ms,
            who=_cut(entry.who) or "?",
            action=entry.action,
            target=_cut(entry.target) or "?",
            detail=_cut(entry.detail),
            ok=entry.ok,
            outcome=_cut(entry.outcome) or "",
            via=entry.via,
            expires_at=entry.at_ms // 1000 + KEPT_S,
        ).save()
        return OperatorAction(**{**entry.__dict__, "key": key})

    def newest(self, limit: int = 50) -> list[OperatorAction]:
        """The newest entries, newest first (at most MAX_READ)."""
        rows = self._model.query(PARTITION, scan_index_forward=False, limit=min(limit, MAX_READ))
        return [_entry(row) for row in rows]

    def get(self, key: str) -> OperatorAction | None:
        try:
            return _entry(self._model.get(PARTITION, key, consistent_read=True))
        except DoesNotExist:
            return None


def _entry(row: OperatorActionModel) -> OperatorAction:
    return OperatorAction(
        at_ms=int(row.at_ms),
        who=row.who,
        action=row.action,
        target=row.target,
        detail=row.detail,
        ok=bool(row.ok),
        outcome=row.outcome,
        via=row.via,
        key=row.at,
    )
