"""The tenant API's reads, in the states a tenant meets, each answer valid by the OpenAPI document's schema
for its route (openapi-schema-validator's 3.1 dialect): the e2e exchanges reach only the states the local
stack makes (its SES gives no free tenant a status, for one); these reach the rest with fakes."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError
from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS31Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from chalicelib.control import openapi
from chalicelib.control.campaign_reads import CampaignReads
from chalicelib.control.event_reads import EventReads
from chalicelib.control.suppression_api import SuppressionApi
from chalicelib.control.tenant_view import PlatformTerms, TenantView
from chalicelib.core.contract import Sender
from chalicelib.stores.pauses import Pause
from chalicelib.stores.ports.campaigns import CampaignCounts, Minute, SenderSnapshot
from chalicelib.stores.ports.sending import TenantStatus
from chalicelib.stores.ports.tenants import Tenant
from chalicelib.webhooks.events import ledger_events
from tests.fakes.event_log import FakeEventLog
from tests.fakes.senders import FakeFreeAddresses
from tests.fakes.suppressions import FakeSuppressions
from tests.fakes.tenants import FakeTenants
from tests.unit.test_webhook_delivery import _record, _row

NOW_S = 1_790_000_000
DOC_URI = "urn:moonsend:openapi"


def _valid_by_document(path: str, status: str, body: Any, method: str = "get") -> None:
    doc = json.loads(openapi.document())
    pointer = "/" + "/".join(
        p.replace("~", "~0").replace("/", "~1")
        for p in ("paths", path, method, "responses", status, "content", "application/json", "schema")
    )
    registry: Registry[Any] = Registry().with_resource(DOC_URI, Resource.from_contents(doc, DRAFT202012))
    OAS31Validator({"$ref": f"{DOC_URI}#{pointer}"}, registry=registry).validate(body)


class _Ses:
    def __init__(self, status: TenantStatus | None) -> None:
        self._status = status

    def status(self, user_id: str, region: str, *, max_age_s: float = 60) -> TenantStatus | None:
        return self._status


class _Usage:
    def used(self, user_id: str, now: float | None = None) -> int:
        return 3


def _view(tenant: Tenant | None, ses: TenantStatus | None) -> TenantView:
    terms = PlatformTerms("us-east-1", 1.0, 200)
    tenants = FakeTenants(*([tenant] if tenant else []))
    return TenantView(tenants, _Usage(), _Ses(ses), FakeFreeAddresses(), terms, clock=lambda: NOW_S)


_FREE = Tenant(
    "acme",
    "free",
    Sender("news@acme.example", "Acme", None, None, None, 5.0),
    pauses=(Pause("ses", "SES paused sending for SES tenant moonsend-acme: bounces", NOW_S * 1000),),
    from_addresses=("news@acme.example",),
)
_PAID = Tenant("acme", "paid", Sender("news@acme.example", "Acme", "us-east-1", "AKIA", None, 10.0))


@pytest.mark.parametrize(
    ("tenant", "ses"),
    [
        (_FREE, TenantStatus("moonsend-acme", "DISABLED", "bounces", None)),
        (_FREE, TenantStatus("moonsend-acme", "ENABLED", None, "arn:aws:ses:us-east-1:aws:reputation-policy/x")),
        (_FREE, None),  # no SES tenant yet
        (_PAID, None),
        (None, None),  # a key, no message yet
    ],
    ids=["free-paused-by-ses", "free-sending", "free-no-ses-tenant", "paid", "no-message-yet"],
)
def test_the_tenants_view_is_valid_by_the_document_in_every_standing(
    tenant: Tenant | None, ses: TenantStatus | None
) -> None:
    body = _view(tenant, ses).get_for("acme")
    try:
        _valid_by_document("/tenant", "200", body)
    except ValidationError as exc:
        pytest.fail(f"GET /tenant answers {json.dumps(body)}, which the document refuses: {exc.message}")


# --- campaigns ------------------------------------------------------------------------------------------------------


def _snapshot(plan: str, region: str | None) -> str:
    key, account = (3, "123456789012") if plan == "paid" else (None, None)
    return SenderSnapshot(plan, "news@acme.example", "Acme", region, 10.0, key, account).to_json()


_NOW_MS = NOW_S * 1000
_CAMPAIGNS = [
    # sending, paid, with an error and a busiest second
    CampaignCounts(
        "acme",
        "c-sending",
        {"queued": 10, "sent": 4, "failed": 1, "delivered": 3},
        first_sent_ms=_NOW_MS - 4000,
        last_sent_ms=_NOW_MS,
        last_error="SES: throttled",
        created_ms=_NOW_MS - 5000,
        subject="Hello {{ name }}",
        sender_snapshot=_snapshot("paid", "us-east-1"),
        busiest_sent=2,
        busiest_at_ms=_NOW_MS - 1000,
    ),
    # scheduled, free plan (no region), past its deadline: nothing more can come
    CampaignCounts(
        "acme",
        "c-scheduled",
        {"scheduled": 5},
        scheduled_at_ms=_NOW_MS + 60_000,
        deadline_ms=_NOW_MS + 120_000,
        created_ms=_NOW_MS - 1,
        subject="Later",
        sender_snapshot=_snapshot("free", None),
    ),
    CampaignCounts("acme", "c-cancelled", {"queued": 3, "cancelled": 3}, control="cancelled", created_ms=1),
    CampaignCounts("acme", "c-paused", {"queued": 3}, control="paused", created_ms=2, deadline_ms=_NOW_MS - 1),
    CampaignCounts("acme", "c-rejected-only", {"rejected": 2}),  # no sender fixed: no summary at all
]


class _Pages:
    def newest(self, user_id: str, *, before: tuple[int, str] | None = None, limit: int = 50):
        return list(_CAMPAIGNS), (1, "c-cancelled")

    def get(self, user_id: str, campaign_id: str) -> CampaignCounts | None:
        return next((c for c in _CAMPAIGNS if c.campaign_id == campaign_id), None)


class _Minutes:
    def minutes(self, user_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1440):
        return [Minute(NOW_S // 60 * 60, {"sent": 4, "delivered": 3})], "2026-09-21T14:13"


def _reads() -> CampaignReads:
    return CampaignReads(_Pages(), _Minutes(), clock=lambda: NOW_S)


def _check(path: str, body: Any) -> None:
    try:
        _valid_by_document(path, "200", body)
    except ValidationError as exc:
        pytest.fail(f"GET {path} answers {json.dumps(body)}, which the document refuses: {exc.message}")


def test_the_campaign_list_in_every_state_is_valid_by_the_document() -> None:
    body = _reads().list_for("acme", {})
    assert {c["state"] for c in body["campaigns"]} == {"sending", "scheduled", "cancelled", "paused", "done"}
    _check("/campaigns", body)


@pytest.mark.parametrize("campaign", [c.campaign_id for c in _CAMPAIGNS])
def test_a_campaign_with_its_timeline_is_valid_by_the_document(campaign: str) -> None:
    _check("/campaigns/{campaign_id}", _reads().show_for("acme", campaign, {}))


# --- suppressions and events -------------------------------------------------------------------------------------


def test_a_suppression_list_of_every_reason_is_valid_by_the_document() -> None:
    store = FakeSuppressions()
    store.add_many("acme", ["own@example.org"], "asked by phone")
    store.add("acme", "angry@example.org", "complaint", "complaint (abuse) about campaign c")
    store.add("acme", "left@example.org", "unsubscribe", "unsubscribed from campaign c")
    store.add(None, "gone@example.org", "bounce", "permanent bounce: 550 no such user")
    store.check("acme", ["gone@example.org"])
    body = SuppressionApi(store).list_for("acme", {"limit": "3"})
    assert len(body["suppressions"]) == 3 and body["next"]
    _check("/suppressions", body)


def test_the_events_of_every_kind_are_valid_by_the_document() -> None:
    queued = _row(state="queued", updated_at=1793000000000)
    changes = [
        (queued, {**queued, "state": "sent", "message_id": "0100-abc", "updated_at": 1793000001000}),
        (queued, {**queued, "state": "failed", "reason": "SES: MessageRejected", "updated_at": 1793000001000}),
        (None, _row(state="rejected", reason="recipients[3].email: not an email address", updated_at=1)),
        (None, _row(state="suppressed", reason="suppressed for this tenant: complaint (abuse)", updated_at=2)),
        (
            {**queued, "state": "sent"},
            {**queued, "state": "sent", "delivered_at": 1793000002000, "feedback": "delivered: 250 ok"},
        ),
        ({**queued, "state": "sent"}, {**queued, "state": "sent", "bounced_at": 1793000003000, "feedback": "x"}),
        ({**queued, "state": "sent"}, {**queued, "state": "sent", "opened_at": 1793000004000}),
    ]
    log = FakeEventLog()
    for n, (old, new) in enumerate(changes):
        events = ledger_events(_record(old, new, seq=n))
        assert events, (old, new)
        log.keep((e, e.at_ms) for e in events)
    body = EventReads(log).list_for("acme", {})
    assert len(body["events"]) == len(changes)
    _check("/events", body)


class _ThrottledSes:
    def status(self, user_id: str, region: str, *, max_age_s: float = 60) -> TenantStatus | None:
        raise ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Too many requests"}}, "GetTenant")


def test_a_free_tenants_view_when_ses_cannot_say_its_status_is_still_answered_without_it() -> None:
    """SES's non-send calls are limited to about one a second for the platform's account: a tenant polling
    GET /tenant from many containers is throttled, and that is no 500; its `pauses` still hold SES's pause."""
    terms = PlatformTerms("us-east-1", 1.0, 200)
    view = TenantView(FakeTenants(_FREE), _Usage(), _ThrottledSes(), FakeFreeAddresses(), terms)
    body = view.get_for("acme")
    assert (body["ses"], body["paused"]) == (None, True)
    _check("/tenant", body)


# --- a campaign's recipients --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        None,
        "delivered: 250 2.6.0 Message received",
        "bounced: permanent bounce: smtp; 550 5.1.1 user unknown",
        "complained: complaint (abuse)",
        "opened",
    ],
)
def test_a_recipient_with_any_feedback_line_is_valid_by_the_document(line: str | None) -> None:
    """Schemathesis found `feedback: "delivered: 250 2.6.0 Message received"` where the document allows the
    bare kinds: the kind is `feedback`, SES's own text `feedbackDetail`."""
    from chalicelib.control.tenant_api import _recipient
    from chalicelib.stores.ports.ledger import Entry

    entry = Entry("ann@example.org", "sent", None, "0100-abc", 1793000001000, feedback=line)
    body = {"campaign": "c1", "recipients": [_recipient(entry)], "next": None}
    _check("/campaigns/{campaign_id}/recipients", body)
    kind, _, text = (line or "").partition(":")
    assert body["recipients"][0]["feedback"] == (kind or None)
    assert body["recipients"][0]["feedbackDetail"] == (text.strip() or None)


def test_lifting_an_entry_of_an_address_that_bounced_for_every_tenant_says_it_stays_suppressed() -> None:
    """The review's case: the answer was `lifted: true` alone, and the next send suppressed the address."""
    store = FakeSuppressions()
    store.add_many("acme", ["gone@example.org", "fine@example.org"], "asked by phone")
    store.add(None, "gone@example.org", "bounce", "permanent bounce: 550 no such user")
    api = SuppressionApi(store)
    gone = api.remove_for("acme", "gone@example.org")
    assert gone["lifted"] is True
    assert "bounce" in gone["stillSuppressed"]
    fine = api.remove_for("acme", "fine@example.org")
    assert fine == {"email": "fine@example.org", "lifted": True}
    for body in (gone, fine):
        try:
            _valid_by_document("/suppressions/{address}", "200", body, method="delete")
        except ValidationError as exc:
            pytest.fail(f"DELETE answers {body}, which the document refuses: {exc.message}")


def test_a_from_address_an_operator_gave_another_tenant_is_no_longer_listed() -> None:
    """The review's case: `fromAddresses` kept the tenant's last Sender address after an operator's
    `assign-from` gave it to another tenant (the row's set had dropped it; the Sender had not)."""
    moved = replace(_FREE, from_addresses=())  # assign-from took news@acme.example off acme's row
    addresses = FakeFreeAddresses()
    addresses.owners["news@acme.example"] = "other"
    view = TenantView(FakeTenants(moved), _Usage(), _Ses(None), addresses, PlatformTerms("us-east-1", 1.0, 200))
    assert view.get_for("acme")["fromAddresses"] == []
    addresses.owners["news@acme.example"] = "acme"  # given back: listed again
    assert view.get_for("acme")["fromAddresses"] == ["news@acme.example"]
