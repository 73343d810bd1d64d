"""The suppression list: addresses moonsend will not send to, per tenant and platform-wide.

An address is suppressed for one tenant when it complained about that tenant's email or unsubscribed
from it, and for every tenant when it bounced permanently (it does not exist: nobody should send to it,
and each send to it costs the sending account reputation). One DynamoDB item per (scope, address):
scope `tenant#<userId>` or `platform`. Precompile checks every recipient (recorded as `suppressed`,
never queued), and the drainer checks again just before sending, for addresses suppressed meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import PutError
from pynamodb.models import Model

from chalicelib.stores.tables import bound, condition_failed, warm

PLATFORM = "platform"
BOUNCE, COMPLAINT, UNSUBSCRIBE = "bounce", "complaint", "unsubscribe"


class SuppressionModel(Model):
    class Meta:
        table_name = "unbound"

    scope = UnicodeAttribute(hash_key=True)  # "tenant#<userId>" or "platform"
    rcpt = UnicodeAttribute(range_key=True)  # lower-cased address
    email = UnicodeAttribute()
    source = UnicodeAttribute()  # bounce | complaint | unsubscribe
    reason = UnicodeAttribute()
    at = NumberAttribute()  # epoch ms


def tenant_scope(user_id: str) -> str:
    return f"tenant#{user_id}"


class Suppressions:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(SuppressionModel, table_name, region)

    def warm(self) -> None:
        warm(self._model)

    def add(self, user_id: str | None, email: str, source: str, reason: str) -> bool:
        """Suppress for one tenant (or, with `user_id` None, for all). False if it already was."""
        scope = tenant_scope(user_id) if user_id else PLATFORM
        item = self._model(scope, email.lower(), email=email, source=source, reason=reason[:500])
        item.at = int(time.time() * 1000)
        try:
            item.save(condition=self._model.rcpt.does_not_exist())
            return True
        except PutError as exc:
            if condition_failed(exc):
                return False
            raise

    def check(self, user_id: str, emails: Iterable[str]) -> dict[str, str]:
        """{lower-cased address: why} for the addresses this tenant may not send to."""
        wanted = sorted({e.lower() for e in emails})
        keys = [(s, e) for e in wanted for s in (tenant_scope(user_id), PLATFORM)]
        out: dict[str, str] = {}
        for i in range(0, len(keys), 100):
            for item in self._model.batch_get(keys[i : i + 100]):
                where = "for every tenant" if item.scope == PLATFORM else "for this tenant"
                out.setdefault(item.rcpt, f"suppressed {where}: {item.source} ({item.reason})")
        return out
