"""The tenant registry's, the free plan's From addresses', the campaign senders' and SES tenants' contracts
(chalicelib.stores.ports), each on its fake and on the real store over the local stack."""

from __future__ import annotations

import re
from typing import Any, Protocol

import pytest

from chalicelib.core.contract import Sender
from chalicelib.core.errors import SenderRefused
from chalicelib.stores.campaign_sender import CampaignSenders
from chalicelib.stores.free_senders import FreeAddresses
from chalicelib.stores.pauses import GUARD, OPERATOR, TENANT
from chalicelib.stores.platform_identities import PlatformIdentities
from chalicelib.stores.ports.campaigns import SenderFix, SenderSnapshot
from chalicelib.stores.ports.sending import FreeAddressRecords, SesTenantRecords
from chalicelib.stores.ports.tenants import Tenant, TenantRecords
from chalicelib.stores.ses_tenants import SesTenants
from chalicelib.stores.tenants import TenantRegistry
from tests.contract.conftest import real_container
from tests.fakes.senders import FakeCampaignSenders, FakeFreeAddresses
from tests.fakes.ses import FakeSesTenants
from tests.fakes.tenants import FakeTenants

ACCOUNT, OTHER_ACCOUNT = "111111111111", "222222222222"

# --- the tenant registry -----------------------------------------------------------------------------------


class TenantPort(TenantRecords, Protocol):
    """Every tenant port at once: what FakeTenants stands in for."""


def tenants_of(side: str, request: pytest.FixtureRequest) -> TenantPort:
    if side == "fake":
        return FakeTenants()
    store: TenantRegistry = real_container(request).tenants
    return store


def _sender(key: str | None = None, secret: str | None = None, address: str = "news@a.example") -> Sender:
    return Sender(address, "News", "us-east-1", key, secret, 5.0)


def _in(account: str) -> Any:
    """account_of: STS's answer for any keys."""
    return lambda _sender: account


def _never(_sender: Sender) -> str:
    raise AssertionError("known keys are not looked up again")


def _registered(tenants: TenantPort, user: str) -> Tenant:
    tenant = tenants.get(user, fresh=True)
    assert tenant is not None
    return tenant


class TestTenantRegistryContract:
    def test_accept_registers_the_sender_and_get_reads_it_back_without_the_secret(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        tenants, user = tenants_of(side, request), f"t-{uid}"
        assert tenants.get(user, fresh=True) is None
        v1 = tenants.accept(user, "paid", _sender("AKIA1", f"s1-{uid}"), _in(ACCOUNT))
        assert v1 is not None and (v1.version, v1.api_key, v1.account) == (1, "AKIA1", ACCOUNT)
        tenant = _registered(tenants, user)
        assert (tenant.plan, tenant.sender.email_address, tenant.sender.rate_per_second) == (
            "paid",
            "news@a.example",
            5.0,
        )
        assert tenant.sender.api_key == "AKIA1" and tenant.sender.api_secret is None  # no secret handed out
        assert [(k.version, k.account) for k in tenant.keys] == [(1, ACCOUNT)] and tenant.pauses == ()
        again = tenants.accept(user, "paid", _sender("AKIA1", f"s1-{uid}"), _never)  # the same keys: no STS call
        assert again is not None and again.version == 1

    def test_new_keys_of_the_same_account_are_the_next_version_and_every_secret_round_trips(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        tenants, user = tenants_of(side, request), f"t-{uid}"
        tenants.accept(user, "paid", _sender("AKIA1", f"s1-{uid}"), _in(ACCOUNT))
        v2 = tenants.accept(user, "paid", _sender("AKIA2", f"s2-{uid}"), _in(ACCOUNT))  # a rotation
        assert v2 is not None and v2.version == 2
        tenant = _registered(tenants, user)
        assert [tenants.secret_of(user, k) for k in tenant.keys] == [f"s1-{uid}", f"s2-{uid}"]
        newest = tenant.sending_keys(1)  # email queued with version 1 goes out with its account's newest keys
        assert newest is not None and newest.version == 2

    def test_keys_of_another_account_are_refused_and_change_nothing(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        tenants, user = tenants_of(side, request), f"t-{uid}"
        tenants.accept(user, "paid", _sender("AKIA1", f"s1-{uid}"), _in(ACCOUNT))
        with pytest.raises(SenderRefused, match=OTHER_ACCOUNT):
            tenants.accept(user, "paid", _sender("AKIA9", f"s9-{uid}"), _in(OTHER_ACCOUNT))
        assert [(k.api_key, k.account) for k in _registered(tenants, user).keys] == [("AKIA1", ACCOUNT)]

    def test_a_free_sender_registers_no_keys(self, side: str, request: pytest.FixtureRequest, uid: str) -> None:
        tenants, user = tenants_of(side, request), f"t-{uid}"
        assert tenants.accept(user, "free", _sender(), _never) is None
        tenant = _registered(tenants, user)
        assert (tenant.plan, tenant.keys, tenant.current_keys) == ("free", (), None)

    def test_each_owner_pauses_once_and_lifts_only_its_own_pause(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        tenants, user = tenants_of(side, request), f"t-{uid}"
        assert tenants.pause(user, OPERATOR, "no such tenant") is False
        tenants.accept(user, "free", _sender(), _never)
        assert tenants.pause(user, TENANT, "paused by the tenant") is True
        assert tenants.pause(user, TENANT, "paused by the tenant, again") is False  # its first reason stays
        assert tenants.pause(user, GUARD, "reputation guard: bounces") is True
        held = _registered(tenants, user).pauses
        assert [(p.owner, p.reason) for p in held] == [
            (TENANT, "paused by the tenant"),
            (GUARD, "reputation guard: bounces"),
        ]
        lifted = tenants.resume(user, [TENANT])
        assert [p.owner for p in lifted] == [TENANT]
        assert _registered(tenants, user).paused_reason == "reputation guard: bounces"  # the guard's stands
        assert tenants.resume(user, [TENANT]) == ()
        assert [p.owner for p in tenants.resume(user)] == [GUARD]  # every owner's, by default
        assert _registered(tenants, user).paused_reason is None


# --- the free plan's From addresses ------------------------------------------------------------------------


def free_addresses_of(side: str, request: pytest.FixtureRequest, own: str, domain: str) -> FreeAddressRecords:
    """The claims, with `own` verified as an identity of its own and `domain` as a domain identity."""
    if side == "fake":
        return FakeFreeAddresses(own=[own], domains=[domain])
    stack = request.getfixturevalue("stack")
    ses = stack.client("sesv2")  # the platform's account
    ses.create_email_identity(EmailIdentity=own)
    ses.create_email_identity(EmailIdentity=domain)
    s = stack.settings
    store = FreeAddresses(s.resources.tenants_table.name, s.region, PlatformIdentities(lambda: ses))
    return store


class TestFreeAddressesContract:
    def test_an_address_of_its_own_is_the_first_senders_and_refused_to_another(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        own, domain = f"news-{uid}@own.example", f"platform-{uid}.example"
        addresses = free_addresses_of(side, request, own, domain)
        addresses.claim(f"a-{uid}", own, 1)
        addresses.claim(f"a-{uid}", own.upper(), 2)  # the same address, whatever its case
        with pytest.raises(SenderRefused, match="is the From address of another tenant"):
            addresses.claim(f"b-{uid}", own, 3)

    def test_an_address_only_the_domain_covers_or_nothing_covers_is_claimed_by_nobody(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        own, domain = f"news-{uid}@own.example", f"platform-{uid}.example"
        addresses = free_addresses_of(side, request, own, domain)
        with pytest.raises(SenderRefused, match=re.escape(f"covered only by the platform's domain identity {domain}")):
            addresses.claim(f"a-{uid}", f"billing@{domain}", 1)
        with pytest.raises(SenderRefused, match="is not verified in the platform's SES account"):
            addresses.claim(f"a-{uid}", f"news-{uid}@nowhere.example", 1)


# --- each campaign's sender --------------------------------------------------------------------------------


def campaign_senders_of(side: str, request: pytest.FixtureRequest) -> SenderFix:
    if side == "fake":
        return FakeCampaignSenders()
    store: CampaignSenders = real_container(request).campaign_senders
    return store


class TestCampaignSenderContract:
    def test_the_first_message_fixes_the_campaigns_sender_and_another_is_refused_by_field(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        senders, user = campaign_senders_of(side, request), f"u{uid}"
        first = SenderSnapshot("paid", "news@a.example", "News", "us-east-1", 5.0, 1, ACCOUNT)
        senders.fix(user, "c1", first)
        senders.fix(user, "c1", first)
        senders.fix(user, "c1", SenderSnapshot("paid", "news@a.example", "News", "us-east-1", 5.0, 1, ACCOUNT))
        other = SenderSnapshot("paid", "news@a.example", "Newsletter", "us-east-1", 5.0, 1, ACCOUNT)
        with pytest.raises(SenderRefused, match=re.escape("sender.fromName is 'News' for this campaign, 'Newsletter'")):
            senders.fix(user, "c1", other)
        senders.fix(user, "c2", other)  # another campaign has its own


# --- SES tenants of the platform's account -----------------------------------------------------------------


def ses_tenants_of(side: str, request: pytest.FixtureRequest) -> tuple[SesTenantRecords, str]:
    """SES tenants, and the region they are in."""
    if side == "fake":
        return FakeSesTenants(), "us-east-1"
    c = real_container(request)
    store: SesTenants = c.ses_tenants
    return store, c.settings.region


class TestSesTenantsContract:
    def test_a_tenant_set_up_is_its_named_ses_tenant_and_may_send_and_one_never_set_up_has_none(
        self, side: str, request: pytest.FixtureRequest, uid: str
    ) -> None:
        ses_tenants, region = ses_tenants_of(side, request)
        user = f"u{uid}"
        assert ses_tenants.status(user, region, max_age_s=0) is None
        name = ses_tenants.ensure(user, f"news@{uid}.example", region)
        assert name == ses_tenants.name_of(user) and ses_tenants.ensure(user, f"news@{uid}.example", region) == name
        status = ses_tenants.status(user, region, max_age_s=0)
        assert status is not None and status.name == name and not status.paused
        ses_tenants.forget(user)  # the next send sets it up again: the same tenant
        assert ses_tenants.ensure(user, f"news@{uid}.example", region) == name
