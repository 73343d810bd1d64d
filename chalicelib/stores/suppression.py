"""The suppression list: addresses moonsend will not send to, per tenant and platform-wide.

An address is suppressed for one tenant when it complained about that tenant's email, unsubscribed from
it, or the tenant put it on its list itself (`manual`: `POST /suppressions`), and for every tenant when it
bounced permanently (it does not exist: nobody should send to it, and each send to it costs the sending
account reputation). One DynamoDB item per (scope, address): scope `tenant#<userId>` or `platform`.
Precompile checks every recipient (recorded as `suppressed`, never queued), and the drainer checks again
just before sending, for addresses suppressed meanwhile.

A platform bounce applies to a tenant once the tenant meets the address: the tenant whose email bounced, and
any tenant that sends to it later (the check finds it). Then a `bounce` row is written in the tenant's own
scope too, so that the tenant's list (`GET /suppressions`, one query of its own partition) shows it, without
ever showing a tenant the addresses other tenants' email bounced from. Only `manual` rows can be lifted by
the tenant: a complaint, an unsubscribe or a bounce stays (the recipient asked, or the address does not exist).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, PutError
from pynamodb.models import Model

from chalicelib.stores.ports.suppression import BOUNCE, MANUAL, Suppression
from chalicelib.stores.tables import bound, condition_failed, warm
from chalicelib.stores.write_batch import Write, apply_all

PLATFORM = "platform"


class SuppressionModel(Model):
    class Meta:
        table_name = "unbound"

    scope = UnicodeAttribute(hash_key=True)  # "tenant#<userId>" or "platform"
    rcpt = UnicodeAttribute(range_key=True)  # lower-cased address
    email = UnicodeAttribute()
    source = UnicodeAttribute()  # bounce | complaint | unsubscribe | manual
    reason = UnicodeAttribute()
    at = NumberAttribute()  # epoch ms


def tenant_scope(user_id: str) -> str:
    return f"tenant#{user_id}"


# A page filtered by reason reads at most this many of the tenant's entries.
MAX_READ = 5000


def _entry(item: SuppressionModel) -> Suppression:
    return Suppression(item.rcpt, item.email, item.source, item.reason, int(item.at) if item.at else None)


class Suppressions:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(SuppressionModel, table_name, region)

    def warm(self) -> None:
        warm(self._model)

    def add(self, user_id: str | None, email: str, source: str, reason: str) -> bool:
        """Suppress for one tenant (or, with `user_id` None, for all). False if it already was.

        A reason other than `manual` replaces the tenant's own (`manual`) entry: kept, it would let the
        tenant lift a complaint, an unsubscribe or a bounce along with its own entry."""
        scope = tenant_scope(user_id) if user_id else PLATFORM
        item = self._model(scope, email.lower(), email=email, source=source, reason=reason[:500])
        item.at = int(time.time() * 1000)
        condition = self._model.rcpt.does_not_exist()
        if source != MANUAL:
            condition = condition | (self._model.source == MANUAL)
        try:
            item.save(condition=condition)
            return True
        except PutError as exc:
            if condition_failed(exc):
                return False
            raise

    def check(self, user_id: str, emails: Iterable[str]) -> dict[str, str]:
        """{lower-cased address: why} for the addresses this tenant may not send to. A platform bounce found
        here for the first time is written to the tenant's own list too (it now applies to the tenant)."""
        wanted = sorted({e.lower() for e in emails})
        keys = [(s, e) for e in wanted for s in (tenant_scope(user_id), PLATFORM)]
        out: dict[str, str] = {}
        own: dict[str, str] = {}  # address -> its source on the tenant's list
        platform: dict[str, SuppressionModel] = {}
        for i in range(0, len(keys), 100):
            for item in self._model.batch_get(keys[i : i + 100]):
                if item.scope == PLATFORM:
                    platform[item.rcpt] = item
                else:
                    own[item.rcpt] = item.source
                where = "for every tenant" if item.scope == PLATFORM or item.source == BOUNCE else "for this tenant"
                out.setdefault(item.rcpt, f"suppressed {where}: {item.source} ({item.reason})")
        for rcpt, item in platform.items():
            if own.get(rcpt, MANUAL) == MANUAL:  # none, or the tenant's own entry, which it could lift
                self.add(user_id, item.email, BOUNCE, item.reason)
        return out

    def add_many(self, user_id: str, emails: Iterable[str], reason: str) -> tuple[int, int]:
        """The tenant's own (`manual`) entries; (added, already suppressed for it). An address already on its
        list for another reason keeps that reason.

        Conditional writes several at once (chalicelib.stores.write_batch), not one after the other: the API's
        1,000 addresses take about 1,000 / 16 round trips, well inside API Gateway's 29 s, where 1,000 writes
        in a row could pass it and leave the list half added."""
        m, scope, now = self._model, tenant_scope(user_id), int(time.time() * 1000)
        writes = [
            Write(
                m,
                scope,
                email.lower(),
                [m.email.set(email), m.source.set(MANUAL), m.reason.set(reason[:500]), m.at.set(now)],
                m.rcpt.does_not_exist(),
            )
            for email in emails
        ]
        applied = apply_all(writes)
        added = sum(applied)
        return added, len(applied) - added

    def addresses(self, user_id: str) -> Iterable[str]:
        """Every address on the tenant's list, lower-cased (its keys only: an upload's report counts them)."""
        m = self._model
        for item in m.query(tenant_scope(user_id), attributes_to_get=["rcpt"]):
            yield item.rcpt

    def entry(self, user_id: str, email: str) -> Suppression | None:
        """The tenant's own entry for an address (a platform bounce that applies to it among them)."""
        try:
            return _entry(self._model.get(tenant_scope(user_id), email.lower(), consistent_read=True))
        except self._model.DoesNotExist:
            return None

    def lift(self, user_id: str, email: str) -> bool:
        """Take the tenant's `manual` entry off its list; False when there is none (any other reason stays)."""
        try:
            self._model(tenant_scope(user_id), email.lower()).delete(condition=self._model.source == MANUAL)
        except DeleteError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def page(
        self,
        user_id: str,
        *,
        reason: str | None = None,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> tuple[list[Suppression], str | None]:
        """The tenant's list in address order, from the address `after` on, filtered by reason and by an
        address prefix; and the address to go on after, when there may be more. A page filtered by reason
        reads at most MAX_READ entries (DynamoDB filters after reading)."""
        m = self._model
        condition = m.rcpt.startswith(prefix.lower()) if prefix else None
        conn = m._get_connection()
        start: dict[str, Any] | None = None
        if after is not None:
            start = {"scope": {"S": tenant_scope(user_id)}, "rcpt": {"S": after.lower()}}
        out: list[Suppression] = []
        read = 0
        while len(out) < limit and read < MAX_READ:
            answer = conn.query(
                tenant_scope(user_id),
                range_key_condition=condition,
                filter_condition=m.source == reason if reason else None,
                exclusive_start_key=start,
                limit=limit - len(out) if reason is None else min(1000, MAX_READ - read),
            )
            for raw in answer.get("Items", []):
                out.append(_entry(m.from_raw_data(raw)))
                if len(out) >= limit:
                    return out, out[-1].rcpt
            read += int(answer.get("ScannedCount", 0))
            start = answer.get("LastEvaluatedKey")
            if start is None:
                return out, None
        return out, str(start["rcpt"]["S"]) if start else None
