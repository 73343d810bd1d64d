"""Tenants' webhook endpoints, and the deliveries held for replay, each in a table of its own.

- An endpoint is one row, `<user>` / `<endpoint id>` (`ep_...`), its secret with it. The secret is stored
  because every request is signed with it; it is shown to the tenant once, when the endpoint is
  registered, and never logged or listed.
- In a partition of its own, `#count#<user>` / `#count`: how many endpoints the tenant has. An endpoint is
  added in one transaction with the count's increment, on the condition that the count is under the cap,
  and removed in one with its decrement: the cap holds however many adds come at once (counted first and
  written after, 20 adds at once left 12). Not in the tenant's partition: the release before the count
  read every row there as an endpoint (its stream fan-out failed every batch of the tenant on a count row,
  during a deploy or after a rollback), and no user id holds `#`, so no tenant's partition is this one.
  The release that kept it at `<user>` / `#count` left such rows: each add and removal deletes the
  tenant's, in its transaction.
- The count can drift: a removal by the release before it does not lower it. When it refuses an add, it
  is checked against the endpoints there and set to them, on the condition that no add or removal came
  in between (each raises its `version`), and the add decided again.
- A held request is one row, `<user>#<endpoint id>` / `<webhook id>`: a request that an endpoint was
  disabled for (or while disabled), kept HELD_DAYS for `moonsend webhook replay`. Its own table, so that
  the functions that hold deliveries can write there and never to the endpoints' secrets.
"""

from __future__ import annotations

import builtins
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from chalicelib.core.webhook_contract import HELD_DAYS, MAX_ENDPOINTS_PER_TENANT, EndpointRequest
from chalicelib.stores.tables import bound, condition_failed, response_code
from chalicelib.stores.transactions import StillConflicting, first_reason, transact

ENDPOINT_PREFIX = "ep_"
COUNT_ROW = "#count"  # the count's sort key ('#' begins no endpoint id)
CAP_DECISIONS = 3  # an add refused, the count repaired and the add tried again: at most this many times


class WebhookModel(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)
    endpoint_id = UnicodeAttribute(range_key=True)
    url = UnicodeAttribute()
    event_types = UnicodeAttribute()  # JSON list
    max_events = NumberAttribute()
    secret = UnicodeAttribute()
    created_at = NumberAttribute()
    disabled_reason = UnicodeAttribute(null=True)
    disabled_at = NumberAttribute(null=True)
    tested_at = NumberAttribute(null=True)  # the last test request's time
    # The endpoint left a request unanswered (chalicelib.webhooks.deliverer): none is made before this
    # time, and then one goes first, alone (`claim_probe`).
    quiet_until = NumberAttribute(null=True)


class EndpointCountModel(Model):
    """The tenant's count, `#count#<user>` / `#count` in the endpoints' table (and the rows the previous
    release kept at `<user>` / `#count`, deleted)."""

    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)
    endpoint_id = UnicodeAttribute(range_key=True)
    endpoints = NumberAttribute()
    version = NumberAttribute(default=0)  # raised by every add and removal: a repair is made on the one it read


class HeldModel(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)  # <user>#<endpoint id> ('#' is in neither's alphabet)
    webhook_id = UnicodeAttribute(range_key=True)
    body = UnicodeAttribute()  # the delivery as it was queued (chalicelib.webhooks.messages)
    parked_at = NumberAttribute()
    expires_at = NumberAttribute()  # epoch seconds, DynamoDB TTL


@dataclass(frozen=True)
class Endpoint:
    user_id: str
    id: str
    url: str
    event_types: tuple[str, ...]
    max_events: int
    secret: str = field(repr=False)  # never in a log line made of the endpoint
    created_at: float
    disabled_reason: str | None = None
    disabled_at: float | None = None
    quiet_until: float | None = None  # left a request unanswered: none is made before then

    @property
    def enabled(self) -> bool:
        return self.disabled_reason is None

    def wants(self, event_type: str) -> bool:
        return event_type in self.event_types

    def public(self) -> dict[str, object]:
        """What the tenant sees of it (never the secret)."""
        return {
            "id": self.id,
            "url": self.url,
            "eventTypes": list(self.event_types),
            "maxEventsPerRequest": self.max_events,
            "enabled": self.disabled_reason is None,
            "disabledReason": self.disabled_reason,
            "disabledAt": self.disabled_at,
        }


class TooManyEndpoints(Exception):
    pass


class EndpointsBusy(Exception):
    """Other requests kept changing the tenant's endpoints at the same time: nothing was done, try again."""


def _count_key(user_id: str) -> str:
    """The count's partition: `#` is in no user id, so this is no tenant's partition."""
    return f"#count#{user_id}"


class WebhookEndpoints:
    def __init__(self, table_name: str, region: str, sleep: Callable[[float], None] = time.sleep) -> None:
        self._model = bound(WebhookModel, table_name, region)
        self._count = bound(EndpointCountModel, table_name, region)
        self._sleep = sleep

    def add(self, user_id: str, request: EndpointRequest, secret: str, now: float) -> Endpoint:
        self._start_count(user_id)
        endpoint_id = ENDPOINT_PREFIX + secrets.token_urlsafe(12)
        row = self._model(
            user_id,
            endpoint_id,
            url=request.url,
            event_types=json.dumps(list(request.event_types)),
            max_events=request.max_events,
            secret=secret,
            created_at=now,
        )
        c = self._count

        def write(tx: TransactWrite) -> None:
            tx.delete(c(user_id, COUNT_ROW))  # the previous release's count, if it is there
            tx.save(row, condition=self._model.endpoint_id.does_not_exist())
            tx.update(
                c(_count_key(user_id), COUNT_ROW),
                actions=[c.endpoints.add(1), c.version.add(1)],
                condition=c.endpoints < MAX_ENDPOINTS_PER_TENANT,
            )

        for _ in range(CAP_DECISIONS):
            cancelled = self._transact(write)
            if cancelled is None:
                return _endpoint(row)
            # pynamodb sends deletes, then puts, then updates: the count's reason is the last.
            reasons = cancelled.cancellation_reasons
            if not (reasons and reasons[-1] is not None and reasons[-1].code == "ConditionalCheckFailed"):
                raise cancelled
            if not self._recount(user_id):  # the count was right: the tenant has its ten
                break
        raise TooManyEndpoints(f"at most {MAX_ENDPOINTS_PER_TENANT} endpoints per tenant")

    def get(self, user_id: str, endpoint_id: str) -> Endpoint | None:
        if not endpoint_id.startswith(ENDPOINT_PREFIX):  # the count's row is not an endpoint
            return None
        try:
            return _endpoint(self._model.get(user_id, endpoint_id, consistent_read=True))
        except DoesNotExist:
            return None

    def list(self, user_id: str) -> list[Endpoint]:
        rows = self._model.query(user_id, self._model.endpoint_id.startswith(ENDPOINT_PREFIX), consistent_read=True)
        return [_endpoint(row) for row in rows]

    def remove(self, user_id: str, endpoint_id: str) -> bool:
        if self.get(user_id, endpoint_id) is None:
            return False
        self._start_count(user_id)
        c = self._count

        def write(tx: TransactWrite) -> None:
            tx.delete(self._model(user_id, endpoint_id), condition=self._model.endpoint_id.exists())
            tx.delete(c(user_id, COUNT_ROW))  # the previous release's count, if it is there
            tx.update(c(_count_key(user_id), COUNT_ROW), actions=[c.endpoints.add(-1), c.version.add(1)])

        cancelled = self._transact(write)
        if cancelled is None:
            return True
        # pynamodb sends deletes before updates, in the order given: the endpoint's reason is the first.
        if first_reason(cancelled) == "ConditionalCheckFailed":
            return False  # removed meanwhile, by another request
        raise cancelled

    def _transact(self, write: Callable[[TransactWrite], None]) -> TransactWriteError | None:
        """Run the transaction `write` makes (chalicelib.stores.transactions: a conflict with another on one of
        its items is tried again); one that kept meeting others is EndpointsBusy."""
        try:
            return transact(self._model._get_connection().connection, write, self._sleep)
        except StillConflicting:
            raise EndpointsBusy(
                "the tenant's endpoints are being changed by other requests at the same time: try again"
            ) from None

    def _start_count(self, user_id: str) -> None:
        """The count's row, made from the endpoints there the first time it is needed (tenants whose endpoints
        were added before it existed). Until it exists no add can pass (its condition needs the count), so
        the endpoints counted here are all there are."""
        c = self._count
        try:
            c.get(_count_key(user_id), COUNT_ROW, consistent_read=True)
            return
        except DoesNotExist:
            pass
        try:
            c(_count_key(user_id), COUNT_ROW, endpoints=len(self.list(user_id)), version=0).save(
                condition=c.endpoint_id.does_not_exist()
            )
        except PutError as exc:
            if not condition_failed(exc):  # made meanwhile by another request: that one counted
                raise

    def _recount(self, user_id: str) -> bool:
        """Check the count against the endpoints there and set it to them where it differs (a removal by the
        release before the count left it high), on the condition that no add or removal came in between (the
        version read first is still the count's). Whether the count changed since it refused, by this repair
        or by another request: either way the add is decided again."""
        c = self._count
        try:
            read = c.get(_count_key(user_id), COUNT_ROW, consistent_read=True)
        except DoesNotExist:  # not there (deleted by hand, say): made from the endpoints
            self._start_count(user_id)
            return True
        there = len(self.list(user_id))
        if there == read.endpoints:
            return False
        try:
            c(_count_key(user_id), COUNT_ROW).update(
                actions=[c.endpoints.set(there), c.version.add(1)], condition=c.version == read.version
            )
        except UpdateError as exc:
            if not (condition_failed(exc) or response_code(exc) == "TransactionConflictException"):
                raise
        return True

    def disabled(self) -> builtins.list[Endpoint]:
        """Every tenant's disabled endpoints (a scan: for the operator's page, not hot paths); no count rows,
        which have no reason."""
        m = self._model
        return [_endpoint(row) for row in m.scan(m.disabled_reason.exists())]

    def disable(self, user_id: str, endpoint_id: str, reason: str, now: float) -> bool:
        """Stop delivering to it, saying why. True if this call disabled it (not already, and still there)."""
        m = self._model
        try:
            m(user_id, endpoint_id).update(
                actions=[m.disabled_reason.set(reason[:500]), m.disabled_at.set(now)],
                condition=m.endpoint_id.exists() & m.disabled_reason.does_not_exist(),
            )
            return True
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise

    def claim_test(self, user_id: str, endpoint_id: str, now: float, interval_s: float) -> bool:
        """Whether a test request may go now: none went in the last `interval_s` (the claim is written, so
        two requests at once cannot both pass). False also for an endpoint that is not there."""
        m = self._model
        try:
            m(user_id, endpoint_id).update(
                actions=[m.tested_at.set(now)],
                condition=m.endpoint_id.exists() & (m.tested_at.does_not_exist() | (m.tested_at <= now - interval_s)),
            )
            return True
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise

    def quieten(self, user_id: str, endpoint_id: str, until: float) -> None:
        """The endpoint left a request unanswered: no request is made to it before `until`."""
        m = self._model
        try:
            m(user_id, endpoint_id).update(actions=[m.quiet_until.set(until)], condition=m.endpoint_id.exists())
        except UpdateError as exc:
            if not condition_failed(exc):  # removed meanwhile: nothing to quieten
                raise

    def claim_probe(self, user_id: str, endpoint_id: str, now: float, until: float) -> bool:
        """Whether a request may go to a quiet endpoint now: its wait is over and no other request has
        claimed the first go since (written, so that of many at once one goes); the claim quietens it
        until `until`, which the request's answer ends (`answered`) or its silence renews."""
        m = self._model
        try:
            m(user_id, endpoint_id).update(
                actions=[m.quiet_until.set(until)],
                condition=m.endpoint_id.exists() & (m.quiet_until.does_not_exist() | (m.quiet_until <= now)),
            )
            return True
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise

    def answered(self, user_id: str, endpoint_id: str) -> None:
        """The endpoint answered (whatever its status): requests to it go as they come again."""
        m = self._model
        try:
            m(user_id, endpoint_id).update(
                actions=[m.quiet_until.remove()], condition=m.endpoint_id.exists() & m.quiet_until.exists()
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    def enable(self, user_id: str, endpoint_id: str) -> bool:
        """Deliver to it again (replay). False if there is no such endpoint."""
        m = self._model
        try:
            m(user_id, endpoint_id).update(
                actions=[m.disabled_reason.remove(), m.disabled_at.remove(), m.quiet_until.remove()],
                condition=m.endpoint_id.exists(),
            )
            return True
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise


@dataclass(frozen=True)
class HeldRequest:
    endpoint_id: str
    webhook_id: str
    body: str  # the delivery's queue message
    parked_at: float


class HeldRequests:
    """Deliveries an endpoint did not take, kept for replay (HELD_DAYS, then DynamoDB's TTL drops them)."""

    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(HeldModel, table_name, region)

    def hold(self, user_id: str, endpoint_id: str, webhook_id: str, body: str, now: float) -> None:
        # Held again under the same key (a redelivered message) is the same row, with a new `parked_at`:
        # nothing is doubled, and a replay that read the row before does not delete it.
        pk = _held_pk(user_id, endpoint_id)
        self._model(pk, webhook_id, body=body, parked_at=now, expires_at=int(now) + HELD_DAYS * 86400).save()

    def held(self, user_id: str, endpoint_id: str) -> Iterator[HeldRequest]:
        """Every delivery held for the endpoint, in key order."""
        for row in self._model.query(_held_pk(user_id, endpoint_id), consistent_read=True):
            yield HeldRequest(endpoint_id, row.webhook_id, row.body, float(row.parked_at))

    def count(self, user_id: str, endpoint_id: str) -> int:
        """Every row counted (tests; a tenant's listing counts up to a bound: count_upto)."""
        return self._model.count(_held_pk(user_id, endpoint_id), consistent_read=True)

    def count_upto(self, user_id: str, endpoint_id: str, bound: int, max_pages: int) -> tuple[int, bool]:
        """How many are held, counted up to `bound` rows or `max_pages` of DynamoDB's pages (a page reads
        at most 1 MB), and whether there may be more than that (the count is then a lower bound). The rows'
        bodies are read to be counted, so pages, not rows, are what a count of large deliveries costs."""
        connection = self._model._get_connection()
        counted, start = 0, None
        for _ in range(max_pages):
            page = connection.query(
                _held_pk(user_id, endpoint_id),
                consistent_read=True,
                exclusive_start_key=start,
                limit=bound + 1 - counted,
                select="COUNT",
            )
            counted += int(page.get("Count", 0))
            start = page.get("LastEvaluatedKey")
            if counted > bound:
                return bound, True
            if start is None:
                return counted, False
        return counted, True

    def page(self, user_id: str, endpoint_id: str, after: str | None, limit: int) -> tuple[list[HeldRequest], bool]:
        """Up to `limit` held requests whose key is past `after`, in key order, and whether there may be
        more. A key is a webhook id: a delivery held again under one a job has passed is not read again."""
        m = self._model
        condition = m.webhook_id > after if after is not None else None
        rows = list(
            m.query(_held_pk(user_id, endpoint_id), condition, consistent_read=True, limit=limit, page_size=limit)
        )
        held = [HeldRequest(endpoint_id, r.webhook_id, r.body, float(r.parked_at)) for r in rows]
        return held, len(held) == limit

    def delete(self, user_id: str, rows: list[HeldRequest]) -> None:
        """Delete the rows whatever they hold now (an endpoint removed: none of them is wanted)."""
        with self._model.batch_write() as batch:
            for row in rows:
                batch.delete(self._model(_held_pk(user_id, row.endpoint_id), row.webhook_id))

    def remove(self, user_id: str, held: HeldRequest) -> bool:
        """Delete the row as it was read: not if it was held again since (a replayed delivery that failed
        again while the replay ran), which stays for the next replay."""
        try:
            self._model(_held_pk(user_id, held.endpoint_id), held.webhook_id).delete(
                condition=self._model.parked_at == held.parked_at
            )
            return True
        except DeleteError as exc:
            if condition_failed(exc):
                return False
            raise


def _held_pk(user_id: str, endpoint_id: str) -> str:
    return f"{user_id}#{endpoint_id}"


def _endpoint(row: WebhookModel) -> Endpoint:
    return Endpoint(
        row.user_id,
        row.endpoint_id,
        row.url,
        tuple(json.loads(row.event_types)),
        int(row.max_events),
        row.secret,
        float(row.created_at),
        row.disabled_reason,
        float(row.disabled_at) if row.disabled_at is not None else None,
        float(row.quiet_until) if row.quiet_until is not None else None,
    )
