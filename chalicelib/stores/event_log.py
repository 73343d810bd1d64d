"""A tenant's recorded events, kept for a while, for tenants that pull them (`GET /events`) rather than receive
them (webhooks).

webhook_events makes every event of the ledger's stream (chalicelib.webhooks.events) for every tenant,
whether or not it has an endpoint, and writes them here in batches before any delivery: one item per event,
`sk` = `<recorded epoch ms, 13 digits>#<event id>`, so a tenant's events are in the order they were
recorded and a redelivered stream record writes the same item again (no duplicate). Each item expires
(DynamoDB's TTL) after the stage's retention.

A tenant's events are spread over SHARDS partitions (`pk` = `<userId>#<shard>`, the shard from the event's
id): one partition takes at most 1,000 writes a second, and a tenant sending 1,000 emails a second makes
two or three events an email. A page reads each shard from the same position and merges them in `sk`
order, answering only what is complete: up to the lowest point every shard has been read to.

An event recorded a moment ago may be stored after a later one (the stream's shards and retries): a
poller that reads from where it stopped should go back a minute and drop the ids it has seen, as with
webhooks (docs/api.md says so).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from chalicelib.stores.ports.events import EventPage, KeptEvent
from chalicelib.stores.tables import bound, warm

CURSOR = re.compile(r"^[0-9]{13}#evt_[0-9a-f]{32}\Z")
INSTANT = re.compile(r"^[0-9]{13}#\Z")  # position_at
# What one page may read, in bytes of items (a filter, DynamoDB's or ours, drops what was read and paid for: a
# rare type gives a short page and a cursor, never a long read). 2 MiB is at most 256 read units (a Query
# reads eventually consistent: 0.5 RCU per 4 KB), whatever the events hold.
MAX_READ_BYTES = 2 * 1024 * 1024
# The largest item the log writes, so that a Query's Limit can keep its read within what is left: an event's
# data holds one text of at most 1,000 characters (a ledger reason, or SES's feedback detail), which JSON's
# ASCII escapes make at most 12,000 bytes (a character outside the BMP is two \uXXXX), besides its id, type,
# time, campaign (128), recipient (254 characters: 3,048 bytes escaped at worst) and message id (about 70), and
# for a machine's open or click its evidence (at most about 130 ASCII characters: chalicelib.ingest.machines);
# the item adds its key, type, campaign and expiry. 16 KiB holds all of it (a contract test writes the
# largest of each and measures them).
MAX_EVENT_BYTES = 16 * 1024
# And at most this many rounds of a Query per partition a page (8 each): small events, whose shares of the
# budget are read many to a round, would otherwise take dozens of rounds to spend it.
MAX_ROUNDS = 4
SHARDS = 8


def shard_key(user_id: str, event_id: str) -> str:
    """The partition an event is kept in: its id's last hex digit (an id is a digest: spread evenly)."""
    return f"{user_id}#{int(event_id[-1], 16) % SHARDS}"


class EventModel(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)  # <userId>#<shard>
    sk = UnicodeAttribute(range_key=True)  # <epoch ms 13 digits>#<event id>
    type = UnicodeAttribute()
    campaign = UnicodeAttribute()
    data = UnicodeAttribute()  # the event as webhooks carry it, JSON
    expires_at = NumberAttribute()  # epoch seconds (DynamoDB's TTL)


def sort_key(event: KeptEvent, recorded_ms: int) -> str:
    return f"{recorded_ms:013d}#{event.id}"


class EventLog:
    def __init__(self, table_name: str, region: str, retention_days: int) -> None:
        self._model = bound(EventModel, table_name, region)
        self._retention_s = retention_days * 86400

    def warm(self) -> None:
        warm(self._model)

    def keep(self, events: Iterable[tuple[KeptEvent, int]]) -> int:
        """Store events with the epoch ms each was recorded at; how many were written."""
        n = 0
        with self._model.batch_write() as batch:
            for event, recorded_ms in events:
                item = self._model(
                    shard_key(event.user_id, event.id),
                    sort_key(event, recorded_ms),
                    type=event.type,
                    campaign=str(event.data.get("campaignId", "")),
                    data=json.dumps(event.data, separators=(",", ":"), sort_keys=True),
                    expires_at=recorded_ms // 1000 + self._retention_s,
                )
                batch.save(item)
                n += 1
        return n

    def page(
        self,
        user_id: str,
        *,
        after: str | None = None,
        type: str | None = None,
        campaign: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> EventPage:
        """The tenant's events after `after` (a page's `next`, or an instant: `position_at`), oldest first; or,
        `newest_first`, from the newest back, and `after` is where the last page stopped (the events before
        it are next). `next` is where the page stopped reading: give it back to go on, now or later (an
        empty page: nothing new yet; newest first, None at the oldest). ValueError for an `after` that is
        neither."""
        if after is not None and not CURSOR.match(after) and not INSTANT.match(after):
            raise ValueError("not a cursor of the event log")
        filtered = type is not None or campaign is not None
        shards = [_Shard(f"{user_id}#{n}") for n in range(SHARDS)]
        out: list[dict[str, Any]] = []
        spent = rounds = 0  # bytes of items read; rounds of Queries made
        position = after
        # A shard's page: enough for its share of the answer (events spread evenly), or a filter's batch.
        size = 1000 if filtered else max(10, 2 * -(-limit // SHARDS))
        while True:
            empty = [s for s in shards if not s.items and not s.done]
            # Each shard to read takes an even share of what is left of the budget, its Limit such that even
            # the largest events stay within it: the page never reads more than MAX_READ_BYTES.
            share = (MAX_READ_BYTES - spent) // max(1, len(empty)) // MAX_EVENT_BYTES
            if rounds >= MAX_ROUNDS:
                share = 0
            if empty and share > 0:
                rounds += 1
                for shard in empty:
                    spent += self._fill(shard, after, min(size, share), newest_first)
            read_to = [s.read_to for s in shards if not s.done]
            complete_to = (max if newest_first else min)(read_to, default=None)
            for sk, item in _merged(shards, complete_to, newest_first):
                # Filtered here, not by DynamoDB (which charges the same for what it reads and drops): each event
                # read moves the position, so the next page starts past the events this one passed over.
                position = sk
                if _wanted(item, type, campaign):
                    out.append(json.loads(item["data"]["S"]))
                    if len(out) >= limit:
                        return EventPage(out, position)
            if all(s.done and not s.items for s in shards):
                return EventPage(out, None if newest_first else position)  # newest first: the oldest reached
            if empty and share <= 0:
                return EventPage(out, position)  # the budget is spent: complete up to here

    def _fill(self, shard: _Shard, after: str | None, size: int, newest_first: bool) -> int:
        """One more page of a shard's events past `after` in the page's order; the bytes of the items read."""
        m = self._model
        past = None if not after else (m.sk < after if newest_first else m.sk > after)
        answer = m._get_connection().query(
            shard.pk,
            range_key_condition=past,
            exclusive_start_key=shard.start,
            limit=size,
            scan_index_forward=not newest_first,
        )
        items = answer.get("Items", [])
        shard.items.extend(items)
        shard.start = answer.get("LastEvaluatedKey")
        shard.done = shard.start is None
        if shard.start is not None:
            shard.read_to = str(shard.start["sk"]["S"])
        return sum(item_bytes(item) for item in items)


def item_bytes(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it for reads: each attribute's name and value, in UTF-8 (a number
    counted by its digits, a little more than DynamoDB's own, never less)."""
    return sum(len(name.encode()) + sum(len(str(v).encode()) for v in value.values()) for name, value in item.items())


@dataclass
class _Shard:
    """One of a tenant's partitions as a page reads it: what it read and has not merged, and how far it read."""

    pk: str
    items: list[dict[str, Any]] = field(default_factory=list)
    start: dict[str, Any] | None = None
    done: bool = False
    read_to: str = ""  # every event of the shard up to here has been read


def _merged(shards: list[_Shard], complete_to: str | None, newest_first: bool) -> Iterator[tuple[str, dict[str, Any]]]:
    """The shards' read events in `sk` order (newest first: backwards), up to `complete_to` (None: all), taken
    off their shards: no event past it may be answered before every shard has read past it."""
    while True:
        heads = [(s.items[0]["sk"]["S"], n) for n, s in enumerate(shards) if s.items]
        if not heads:
            return
        sk, n = max(heads) if newest_first else min(heads)
        if complete_to is not None and (sk < complete_to if newest_first else sk > complete_to):
            return
        yield sk, shards[n].items.pop(0)


def _wanted(item: dict[str, Any], type: str | None, campaign: str | None) -> bool:
    def text(name: str) -> str | None:
        return item.get(name, {}).get("S")

    return (type is None or text("type") == type) and (campaign is None or text("campaign") == campaign)


def position_at(epoch_ms: int) -> str:
    """The log's position just before the events recorded at `epoch_ms`: `after` for "from that instant on"."""
    return f"{epoch_ms:013d}#"
