"""The digest store: definitions, items per recipient, retractions, and what each recipient was mailed.

One DynamoDB table, rows told apart by their partition key's prefix:

- `def#<user>` / `<digest>`: the digest's definition (templates, schedule, window, maxItems) and its last run.
- `i#<user>#<digest>#<shard>` / `<address>#<item id>`: one item for one recipient, with the recipient's
  metadata as of that item, expiring (TTL) when it leaves the digest's window. An item id is its row's key,
  so an item sent twice is stored once, and storing it is one write: a burst of 100,000 items is 4,000
  BatchWriteItem requests, spread over `SHARDS` partitions per digest (a partition takes 1,000 writes a
  second), so one tenant's burst never takes another's capacity.
- `i#...#<shard>` / `<address>#`: the recipient's state, which sorts before its items: the last period
  mailed and the assembly under way (`open_period`, `open_ids`), so that a crash between queueing and
  marking repeats the same email, never another.
- `m#<user>#<digest>#<shard>` / `<address>#<until>#<period>`: the ids mailed in that period (the seed's
  "flushed" markers), one row per email, at most maxItems ids (500 of at most 128 characters: 64 KB, under
  DynamoDB's 400 KB item). `<until>` (epoch seconds, ten digits, so the rows sort by it) is when the last
  item it names leaves the digest's window; the row expires (TTL) then. A run reads a recipient's markers
  as one range, `until` from its `since` on (the previous run's time): the rows of items that left the
  window before then are never read, however many periods there were, lingering (TTL deletes within days)
  or not. In their own partition, so the items' Query does not read them.
- `i#...#<shard>` / `<address>#!<period>`: markers as runs before this layout wrote them (expiring within
  35 days of their newest item): still read, with the items, never written.
- `x#<user>#<digest>` / `<item id>`: a retracted item, for as long as the window.

Storage grows with recipients and their items in the window, not with recipients times content, and old
items leave by TTL (the seed's daily tables, without the table per day). The window is also checked when a
digest is assembled: TTL deletes within days, not on the second.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.models import Model

from chalicelib.core.contract import Recipient
from chalicelib.core.digest_contract import DigestDefinition, Item
from chalicelib.stores.tables import bound, update_if

SHARDS = 16
_STATE = ""  # the state row's item id: `<address>#` sorts before `<address>#<any item id>`
_MARKERS = "!"  # a legacy marker row's item id starts so: after the state row, before every item


class DigestModel(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    expires_at = NumberAttribute(null=True)  # TTL, epoch seconds
    # definition rows
    subject = UnicodeAttribute(null=True)
    body = UnicodeAttribute(null=True)
    schedule = UnicodeAttribute(null=True)
    window_s = NumberAttribute(null=True)
    max_items = NumberAttribute(null=True)
    scheduled = UnicodeAttribute(null=True)  # the expression the digest's schedule was last put with
    last_period = UnicodeAttribute(null=True)  # also on state rows: the last period mailed
    last_run_at = NumberAttribute(null=True)
    last_run = UnicodeAttribute(null=True)  # JSON: what the last run did
    running_until = NumberAttribute(null=True)  # a run's hold on the digest (epoch seconds), renewed as it goes
    running_token = UnicodeAttribute(null=True)
    waiting_at = NumberAttribute(null=True)  # a run that found the digest busy: its scheduled time, run next
    asked_at = NumberAttribute(null=True)  # the last run asked for through the API (its rate limit)
    # item rows
    email = UnicodeAttribute(null=True)  # as given (the key is lower-cased)
    item = UnicodeAttribute(null=True)  # Item JSON
    at = NumberAttribute(null=True)
    metadata = UnicodeAttribute(null=True)  # JSON, as of this item
    # marker rows (and, before issue 38, state rows: read, pruned, never added to)
    mailed = UnicodeSetAttribute(null=True)
    # state rows
    open_period = UnicodeAttribute(null=True)
    open_ids = UnicodeSetAttribute(null=True)


@dataclass(frozen=True)
class StoredItem:
    item: Item
    email: str
    metadata: dict[str, Any]
    expires_at: float | None = None  # the row's TTL: past it, the item is gone whether TTL deleted it yet or not

    def end(self, window_s: float) -> float:
        """When the item stops mattering: it leaves the window, or its row expires, whichever is later."""
        return max(self.item.at + window_s, self.expires_at or 0.0)


@dataclass
class RecipientDigest:
    """One recipient's rows of one digest: its items in the window and what was mailed."""

    key: str  # lower-cased address
    items: list[StoredItem] = field(default_factory=list)
    mailed: frozenset[str] = frozenset()  # every marker: the marker rows' and the state row's own
    last_period: str | None = None
    open_period: str | None = None
    open_ids: frozenset[str] = frozenset()
    state_mailed: frozenset[str] = frozenset()  # markers kept on the state row itself (before issue 38)
    bytes_read: int = 0  # what its rows (state, markers, items) came to: what reading it cost
    marker_rows: int = 0  # marker rows read

    @property
    def recipient(self) -> Recipient:
        """The address as last given, with the metadata of its newest item."""
        newest = max(self.items, key=lambda s: s.item.at)
        return Recipient(newest.email, newest.metadata)


@dataclass(frozen=True)
class DigestState:
    """A digest's definition row: the definition, its schedule as put, its last run, a run's hold."""

    definition: DigestDefinition
    scheduled: str | None = None
    last_run_at: float | None = None
    last_run: dict[str, Any] | None = None
    running_until: float | None = None
    asked_at: float | None = None
    waiting_at: float | None = None


# Rows a status's Query page asks for at most (DynamoDB's own page is 1 MB whatever this says).
QUERY_PAGE = 2000


class ReadBudget:
    """How many rows a reading may still take; `spent` once it took them all (what it counted is then a
    lower bound)."""

    def __init__(self, rows: int) -> None:
        self.rows_left = rows
        self.read = 0

    @property
    def spent(self) -> bool:
        return self.rows_left <= 0

    def take(self) -> None:
        self.rows_left -= 1
        self.read += 1


def _row_bytes(row: DigestModel) -> int:
    """About what DynamoDB returns for the row (its keys, item, metadata and ids): what reading it cost."""
    texts = (row.pk, row.sk, row.item, row.metadata, row.email, row.last_period, row.open_period)
    return sum(len(t) for t in texts if t) + sum(len(i) for i in (row.mailed or ())) + 32


def _add_row(current: RecipientDigest, item_id: str, row: DigestModel, since: Since | None) -> None:
    """One of a recipient's rows, read in key order: its state, then its legacy markers, then its items."""
    current.bytes_read += _row_bytes(row)
    if item_id == _STATE:
        current.state_mailed = frozenset(row.mailed or ())
        current.mailed = current.mailed | current.state_mailed
        current.last_period = row.last_period
        current.open_period = row.open_period
        current.open_ids = frozenset(row.open_ids or ())
    elif item_id.startswith(_MARKERS):
        current.marker_rows += 1
        current.mailed = current.mailed | frozenset(row.mailed or ())
    else:
        at = float(row.at) if row.at is not None else None
        expires = float(row.expires_at) if row.expires_at is not None else None
        if since is not None and at is not None and max(at + since.window_s, expires or 0.0) <= since.at:
            return  # past the window before the last run: that run dealt with it, TTL deletes it
        item = Item.from_json(row.item or "{}")
        if item.id in current.mailed and item.id not in current.open_ids:
            item = Item(item.id, item.type, item.at, {})  # never shown again: its data not held
        stored = StoredItem(item, row.email or current.key, json.loads(row.metadata or "{}"), expires)
        current.items.append(stored)


@dataclass(frozen=True)
class Since:
    """What a reading may leave out: items whose end (window_s after them, or their row's expiry) came by
    `at` (the previous run's time), and the markers that can only name such items."""

    at: float
    window_s: float


def markers_sk(key: str, until: float, period: str) -> str:
    return f"{key}#{max(0, math.ceil(until)):010d}#{period}"


def shard_of(address_key: str) -> int:
    return zlib.crc32(address_key.encode("utf-8")) % SHARDS


def _items_pk(user_id: str, digest_id: str, shard: int) -> str:
    return f"i#{user_id}#{digest_id}#{shard}"


def _def_pk(user_id: str) -> str:
    return f"def#{user_id}"


def _markers_pk(user_id: str, digest_id: str, shard: int) -> str:
    return f"m#{user_id}#{digest_id}#{shard}"


def _retract_pk(user_id: str, digest_id: str) -> str:
    return f"x#{user_id}#{digest_id}"


def _state(row: DigestModel) -> DigestState:
    definition = DigestDefinition(
        row.sk,
        row.subject,
        row.body,
        row.schedule,
        row.window_s,
        int(row.max_items) if row.max_items is not None else None,
    )
    last_run = json.loads(row.last_run) if row.last_run else None
    return DigestState(
        definition, row.scheduled, row.last_run_at, last_run, row.running_until, row.asked_at, row.waiting_at
    )


class DigestStore:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(DigestModel, table_name, region)

    # definitions

    def define(self, user_id: str, given: DigestDefinition) -> DigestState:
        """What this event says written over the stored definition (only the fields it gives, so that two
        events changing different fields at once both stay); the merged definition's row back."""
        if given.says_something:
            row = self._model(_def_pk(user_id), given.id)
            actions = [
                getattr(self._model, name).set(value)
                for name, value in (
                    ("subject", given.subject),
                    ("body", given.body),
                    ("schedule", given.schedule),
                    ("window_s", given.window_s),
                    ("max_items", given.max_items),
                )
                if value is not None
            ]
            row.update(actions=actions)
        stored = self.state(user_id, given.id)
        if stored is None:
            return DigestState(given)
        return DigestState(given.merged_over(stored.definition), stored.scheduled, stored.last_run_at, stored.last_run)

    def definition(self, user_id: str, digest_id: str) -> DigestDefinition | None:
        state = self.state(user_id, digest_id)
        return state.definition if state is not None else None

    def state(self, user_id: str, digest_id: str) -> DigestState | None:
        try:
            row = self._model.get(_def_pk(user_id), digest_id, consistent_read=True)
        except DoesNotExist:
            return None
        return _state(row)

    def states(self, user_id: str, after: str | None, limit: int) -> tuple[list[DigestState], str | None]:
        """The tenant's digests in id order after `after`, at most `limit`; the last one's id when there are more.
        A definition row is at most DynamoDB's 400 KB: a page reads at most `limit` + 1 of them."""
        condition = self._model.sk > after if after is not None else None
        rows = list(self._model.query(_def_pk(user_id), condition, limit=limit + 1))  # one more: is there more
        shown = rows[:limit]
        return [_state(row) for row in shown], shown[-1].sk if len(rows) > limit else None

    def mark_scheduled(self, user_id: str, digest_id: str, expression: str) -> None:
        """The digest's schedule was put with `expression` (an event giving it again puts nothing)."""
        self._model(_def_pk(user_id), digest_id).update(actions=[self._model.scheduled.set(expression)])

    def hold_run(self, user_id: str, digest_id: str, token: str, now: float, hold_s: float) -> bool:
        """One run of a digest at a time: take (or renew, with the same token) the digest's hold; False
        when another run holds it. Two runs at once could each plan from a state the other is changing."""
        m = self._model
        row = m(_def_pk(user_id), digest_id)
        free = m.running_until.does_not_exist() | (m.running_until < now) | (m.running_token == token)
        actions = [m.running_until.set(now + hold_s), m.running_token.set(token)]
        return update_if(row, actions, m.sk.exists() & free)

    def release_run(self, user_id: str, digest_id: str, token: str) -> None:
        m = self._model
        update_if(m(_def_pk(user_id), digest_id), [m.running_until.remove()], m.running_token == token)

    def note_waiting(self, user_id: str, digest_id: str, scheduled_at: float, now: float) -> bool:
        """A run that found the digest held: its scheduled time noted for the holder to start when it ends
        (the latest such time wins: a later period mails whatever an earlier one would have). False when
        the hold is gone meanwhile (the caller takes it itself)."""
        m = self._model
        row = m(_def_pk(user_id), digest_id)
        later = m.waiting_at.does_not_exist() | (m.waiting_at < scheduled_at)
        held = m.running_until.exists() & (m.running_until >= now)
        if update_if(row, [m.waiting_at.set(scheduled_at)], m.sk.exists() & held & later):
            return True
        state = self.state(user_id, digest_id)  # not later than the one noted, or the hold gone
        held_now = state is not None and state.running_until is not None and state.running_until >= now
        return held_now and state is not None and (state.waiting_at or 0) >= scheduled_at

    def take_waiting(self, user_id: str, digest_id: str) -> float | None:
        """The scheduled time a busy run noted (see note_waiting), taken off the digest: its caller runs it.
        Asked after the hold is released, so that a run noting itself meanwhile is never missed."""
        state = self.state(user_id, digest_id)
        if state is None or state.waiting_at is None:
            return None
        m = self._model
        taken = update_if(m(_def_pk(user_id), digest_id), [m.waiting_at.remove()], m.waiting_at == state.waiting_at)
        return float(state.waiting_at) if taken else None

    def claim_asked_run(self, user_id: str, digest_id: str, now: float, interval_s: float) -> float | None:
        """A run asked for through the API, at most one per `interval_s` and none while one runs: None when
        claimed, else the seconds until one may be asked (for Retry-After)."""
        m = self._model
        row = m(_def_pk(user_id), digest_id)
        idle = m.running_until.does_not_exist() | (m.running_until < now)
        rested = m.asked_at.does_not_exist() | (m.asked_at <= now - interval_s)
        ran = m.last_run_at.does_not_exist() | (m.last_run_at <= now - interval_s)
        if update_if(row, [m.asked_at.set(now)], m.sk.exists() & idle & rested & ran):
            return None
        state = self.state(user_id, digest_id)
        if state is None:
            return float(interval_s)
        until = max(
            state.running_until or 0.0,
            (state.asked_at or -interval_s) + interval_s,
            (state.last_run_at or -interval_s) + interval_s,
        )
        return max(1.0, until - now)

    def record_run(self, user_id: str, digest_id: str, at: float, what: dict[str, Any]) -> None:
        self._model(_def_pk(user_id), digest_id).update(
            actions=[self._model.last_run_at.set(at), self._model.last_run.set(json.dumps(what))]
        )

    # items

    def add_items(
        self, user_id: str, digest_id: str, window_s: float, entries: Iterable[tuple[Recipient, Item]]
    ) -> int:
        """Store each item for its recipient (one write each, in batches of 25); how many were written.

        Written again, an item (the same id for the same recipient) is the same row: idempotent. It keeps
        the earliest `at` it was given, its data the latest: a run's marker of a mailed item is found by
        the time the item leaves the window as it was when mailed (`markers_sk`), so an item given again
        with a later `at` (a second producer, an update) would outlive its marker and be mailed again.
        Finding the earlier times costs a BatchGetItem of 100 rows (their `at` only, billed whole) per 100
        items: about half a read unit an item, a fifth of what its write costs."""
        # One row per recipient and item id, the earliest time and the last data given winning: DynamoDB
        # refuses a batch that names a key twice, which would fail the whole event (an item listed twice, an
        # address in two cases).
        given: dict[tuple[str, str], tuple[Recipient, Item]] = {}
        for recipient, item in entries:
            key = recipient.key
            row_key = (_items_pk(user_id, digest_id, shard_of(key)), f"{key}#{item.id}")
            held = given.get(row_key)
            if held is not None and held[1].at < item.at:
                item = Item(item.id, item.type, held[1].at, item.data)
            given[row_key] = (recipient, item)
        earlier = self._stored_times(list(given))
        rows: dict[tuple[str, str], DigestModel] = {}
        for (pk, sk), (recipient, item) in given.items():
            stored = earlier.get((pk, sk))
            if stored is not None and stored < item.at:
                item = Item(item.id, item.type, stored, item.data)
            rows[(pk, sk)] = self._model(
                pk,
                sk,
                email=recipient.email,
                item=item.to_json(),
                at=item.at,
                metadata=json.dumps(recipient.metadata, ensure_ascii=False),
                expires_at=int(item.at + window_s) + 1,
            )
        with self._model.batch_write() as batch:
            for row in rows.values():
                batch.save(row)
        return len(rows)

    def _stored_times(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """The `at` of the rows among `keys` that are stored already."""
        found: dict[tuple[str, str], float] = {}
        for i in range(0, len(keys), 100):
            for row in self._model.batch_get(keys[i : i + 100], attributes_to_get=["pk", "sk", "at"]):
                if row.at is not None:
                    found[(row.pk, row.sk)] = float(row.at)
        return found

    def drop_items(self, user_id: str, digest_id: str, key: str, item_ids: Iterable[str]) -> None:
        """Delete a recipient's items (past the window: TTL would, within days)."""
        pk = _items_pk(user_id, digest_id, shard_of(key))
        with self._model.batch_write() as batch:
            for item_id in dict.fromkeys(item_ids):
                batch.delete(self._model(pk, f"{key}#{item_id}"))

    def retract(self, user_id: str, digest_id: str, item_ids: Iterable[str], until: float) -> None:
        with self._model.batch_write() as batch:
            for item_id in dict.fromkeys(item_ids):  # each once: a batch may not name a key twice
                batch.save(self._model(_retract_pk(user_id, digest_id), item_id, expires_at=int(until) + 1))

    def retracted(self, user_id: str, digest_id: str) -> frozenset[str]:
        return frozenset(r.sk for r in self._model.query(_retract_pk(user_id, digest_id), consistent_read=True))

    def recipients(
        self,
        user_id: str,
        digest_id: str,
        after: str | None = None,
        budget: ReadBudget | None = None,
        since: Since | None = None,
    ) -> Iterator[RecipientDigest]:
        """Every recipient with rows in the digest, shard by shard, its state, markers and items together;
        with `after` (a recipient's address key), those that come after it in this order only; with
        `budget`, no more rows than it allows (the last recipient then perhaps in part); with `since`, without
        the items and markers that stopped mattering by then (a recipient with none left is not given).

        A recipient that was ever mailed has its markers read as one Query of its own (a bounded range:
        those whose `until` is from `since` on), when its state row comes, so an item already marked mailed
        is read without its data: only its id and time matter to what comes next, and a busy reader has
        thousands of them."""
        first = shard_of(after) if after is not None else 0
        for shard in range(first, SHARDS):
            if budget is not None and budget.spent:
                return
            # A recipient's rows are `<address>#...`; every row after the last of `after`'s sorts above this
            # (ids are ASCII, an address holds no character below `#` where another continues it).
            condition = self._model.sk > f"{after}#\U0010ffff" if after is not None and shard == first else None
            current: RecipientDigest | None = None
            rows = self._model.query(
                _items_pk(user_id, digest_id, shard),
                range_key_condition=condition,
                consistent_read=True,
                limit=budget.rows_left if budget is not None else None,
                page_size=min(budget.rows_left, QUERY_PAGE) if budget is not None else None,
            )
            for row in rows:
                if budget is not None:
                    if budget.spent:  # the markers' reads took the rest
                        break
                    budget.take()
                key, _, item_id = row.sk.rpartition("#")
                if current is None or current.key != key:
                    if current is not None and current.items:
                        yield current
                    current = RecipientDigest(key)
                _add_row(current, item_id, row, since)
                if item_id == _STATE and current.last_period is not None:
                    self._read_markers(user_id, digest_id, shard, current, since, budget)
            if current is not None and current.items:
                yield current

    def _read_markers(
        self,
        user_id: str,
        digest_id: str,
        shard: int,
        current: RecipientDigest,
        since: Since | None,
        budget: ReadBudget | None,
    ) -> None:
        """A mailed recipient's markers that can still name a stored item: one range of its marker rows."""
        if budget is not None and budget.spent:
            return
        key = current.key
        low = markers_sk(key, since.at if since is not None else 0, "")
        rows = self._model.query(
            _markers_pk(user_id, digest_id, shard),
            range_key_condition=self._model.sk.between(low, f"{key}#:"),  # `:` sorts after every digit
            consistent_read=True,
            limit=budget.rows_left if budget is not None else None,
        )
        for row in rows:
            if budget is not None:
                budget.take()
            current.marker_rows += 1
            current.bytes_read += _row_bytes(row)
            current.mailed = current.mailed | frozenset(row.mailed or ())

    # a recipient's assembly

    def _state_row(self, user_id: str, digest_id: str, key: str) -> DigestModel:
        return self._model(_items_pk(user_id, digest_id, shard_of(key)), f"{key}#{_STATE}")

    def open_assembly(
        self,
        user_id: str,
        digest_id: str,
        key: str,
        period: str,
        ids: Iterable[str],
        keep_until: float,
        last_period: str | None,
    ) -> bool:
        """Note the items this period's email carries before it is queued; False if another assembly of
        another period is open for the recipient (it is finished first), or if the recipient was mailed
        since its rows were read (`last_period` is what was read: a plan made before is stale). The state
        row expires (TTL) at `keep_until`, when every item it can name has left the window."""
        row = self._state_row(user_id, digest_id, key)
        m = self._model
        unchanged = m.last_period.does_not_exist() if last_period is None else m.last_period == last_period
        condition = (m.open_period.does_not_exist() | (m.open_period == period)) & unchanged
        actions = [m.open_period.set(period), m.open_ids.set(set(ids)), m.expires_at.set(int(keep_until) + 1)]
        return update_if(row, actions, condition)

    def close_assembly(self, user_id: str, digest_id: str, key: str, period: str) -> None:
        """The assembly closed with nothing marked: its email was refused (its items wait for the next run)."""
        row = self._state_row(user_id, digest_id, key)
        m = self._model
        update_if(row, [m.open_period.remove(), m.open_ids.remove()], m.open_period == period)

    def mark_mailed(
        self,
        user_id: str,
        digest_id: str,
        key: str,
        period: str,
        ids: Iterable[str],
        state_keep: Iterable[str],
        keep_until: float,
        markers_until: float,
    ) -> None:
        """The period's items mailed and its assembly closed, in that order (a crash between leaves the
        assembly open: the next run marks the same ids again, the same row).

        The ids go on a marker row of their own (`<address>#<until>#<period>`: at most maxItems ids),
        `markers_until` being when the last item it names stops mattering (leaves the digest's window, or
        its row expires): the row expires (TTL) then, and runs from then on do not read it. The markers a
        state row kept before issue 38 are only pruned (`state_keep`: those whose items are still stored)."""
        marked = set(ids)
        m = self._model
        if marked:
            markers = m(_markers_pk(user_id, digest_id, shard_of(key)), markers_sk(key, markers_until, period))
            markers.update(actions=[m.mailed.set(marked), m.expires_at.set(math.ceil(markers_until) + 1)])
        kept = set(state_keep)
        actions = [
            m.mailed.set(kept) if kept else m.mailed.remove(),
            m.last_period.set(period),
            m.open_period.remove(),
            m.open_ids.remove(),
            m.expires_at.set(int(keep_until) + 1),
        ]
        # Closed meanwhile by another run (which resumed it): that one marked it.
        update_if(
            self._state_row(user_id, digest_id, key),
            actions,
            m.open_period.does_not_exist() | (m.open_period == period),
        )
