"""Tenants' webhook endpoints: one row per endpoint (`<user>` / `<endpoint id>`), its secret with it.

The secret is stored because every request is signed with it; it is shown to the tenant once, when the
endpoint is registered, and never logged or listed.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.models import Model

from chalicelib.core.webhook_contract import MAX_ENDPOINTS_PER_TENANT, EndpointRequest
from chalicelib.stores.tables import bound


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

    def public(self) -> dict[str, object]:
        """What the tenant sees of it (never the secret)."""
        return {
            "id": self.id,
            "url": self.url,
            "eventTypes": list(self.event_types),
            "maxEventsPerRequest": self.max_events,
            "enabled": self.disabled_reason is None,
            "disabledReason": self.disabled_reason,
        }


class TooManyEndpoints(Exception):
    pass


class WebhookEndpoints:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(WebhookModel, table_name, region)

    def add(self, user_id: str, request: EndpointRequest, secret: str, now: float) -> Endpoint:
        if len(self.list(user_id)) >= MAX_ENDPOINTS_PER_TENANT:
            raise TooManyEndpoints(f"at most {MAX_ENDPOINTS_PER_TENANT} endpoints per tenant")
        endpoint_id = "ep_" + secrets.token_urlsafe(12)
        row = self._model(
            user_id,
            endpoint_id,
            url=request.url,
            event_types=json.dumps(list(request.event_types)),
            max_events=request.max_events,
            secret=secret,
            created_at=now,
        )
        row.save(condition=self._model.endpoint_id.does_not_exist())
        return _endpoint(row)

    def get(self, user_id: str, endpoint_id: str) -> Endpoint | None:
        try:
            return _endpoint(self._model.get(user_id, endpoint_id, consistent_read=True))
        except DoesNotExist:
            return None

    def list(self, user_id: str) -> list[Endpoint]:
        return [_endpoint(row) for row in self._model.query(user_id, consistent_read=True)]

    def remove(self, user_id: str, endpoint_id: str) -> bool:
        if self.get(user_id, endpoint_id) is None:
            return False
        self._model(user_id, endpoint_id).delete()
        return True


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
    )
