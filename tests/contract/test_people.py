"""A tenant's people and the emailed sign-in links, on the fake stores and on DynamoDB: an agency's address
found in each of its tenants, a role changed keeping the first invitation, a link used once and never
after its expiry, two uses at once signing in once."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from chalicelib.console.links import LINK_S, SignInLinks
from chalicelib.console.people import People
from chalicelib.stores.people import PeopleStore
from chalicelib.stores.ports.console import Person
from chalicelib.stores.sign_in_links import SignInLinkStore
from tests.contract.conftest import real_container
from tests.fakes.people import FakePeople, FakeSignInLinks


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stores(side: str, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    if side == "fake":
        return FakePeople(), FakeSignInLinks()
    c = real_container(request)
    r, region = c.settings.resources, c.settings.region
    return PeopleStore(r.people_table.name, region), SignInLinkStore(r.sign_in_links_table.name, region)


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def address() -> str:
    return f"p-{uuid.uuid4().hex[:8]}@agency.example"


def test_an_agencys_address_is_found_in_each_of_its_tenants_with_its_role_there(stores: tuple[Any, Any]):
    people, _ = stores
    one, two, who = tenant(), tenant(), address()
    people.put(Person(one, who, 1, "operator", 1.0))
    people.put(Person(two, who, 3, "operator", 1.0))
    people.put(Person(two, address(), 2, who, 2.0))
    assert sorted(people.tenants_of(who)) == sorted([one, two])
    assert [(p.tenant_id, p.role) for p in People(people).memberships(who)] == sorted([(one, 1), (two, 3)])
    assert len(people.of_tenant(two)) == 2 and people.of_tenant(tenant()) == []


def test_a_role_changed_keeps_who_invited_the_person_and_when(stores: tuple[Any, Any]):
    people, _ = stores
    t, who = tenant(), address()
    people.put(Person(t, who, 1, "ann@example.org", 100.0))
    people.put(Person(t, who, 2, "bob@example.org", 200.0))
    got = people.get(t, who)
    assert got is not None and (got.role, got.invited_by, got.invited_at) == (2, "ann@example.org", 100.0)
    people.remove(t, who)
    assert people.get(t, who) is None and people.tenants_of(who) == []


def test_a_link_signs_in_once_and_never_after_fifteen_minutes(stores: tuple[Any, Any]):
    people, links = stores
    clock, t, who = Clock(), tenant(), address()
    people.put(Person(t, who, 2, "operator", clock.now))
    service = SignInLinks(links, People(people), clock)
    token = service.mint(who)
    opened = service.open(token)
    assert opened is not None and opened.address == who and [p.tenant_id for p in opened.memberships] == [t]
    assert service.open(token) is not None  # opening reads only: a mail scanner's fetch uses nothing up
    assert service.use(token, tenant()) is None  # not a tenant of this address: nothing used
    signed = service.use(token, t)
    assert signed is not None and (signed.tenant_id, signed.address, signed.role) == (t, who, 2)
    assert service.use(token, t) is None and service.open(token) is None  # used
    late = service.mint(who)
    clock.now += LINK_S
    assert service.open(late) is None and service.use(late, t) is None  # expired
    assert links.get(late) is None  # stored by its digest, never the token itself


def test_two_uses_of_one_link_at_once_sign_in_once(stores: tuple[Any, Any]):
    people, links = stores
    t, who = tenant(), address()
    people.put(Person(t, who, 1, "operator", 1.0))
    service = SignInLinks(links, People(people))
    token = service.mint(who)
    results: list[object] = []
    barrier = threading.Barrier(4)

    def use() -> None:
        barrier.wait()
        results.append(service.use(token, t))

    threads = [threading.Thread(target=use) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sum(r is not None for r in results) == 1


def test_a_link_for_an_address_nobody_has_is_never_made_and_odd_tokens_open_nothing(stores: tuple[Any, Any]):
    people, links = stores
    service = SignInLinks(links, People(people))
    assert service.request(address()) is None
    for token in (None, "", "x" * 43, "é" * 43, "x" * 10_000, "../../etc/passwd"):
        assert service.open(token) is None and service.use(token, "t") is None


def test_a_link_made_before_a_sign_out_everywhere_or_a_new_invitation_signs_in_no_more(stores: tuple[Any, Any]):
    people, links = stores
    clock, t, who = Clock(), tenant(), address()
    people.put(Person(t, who, 2, "operator", clock.now))
    service = SignInLinks(links, People(people, clock), clock)
    before_sign_out = service.mint(who)
    clock.now += 5
    assert people.signed_out(t, who, clock.now)
    assert service.open(before_sign_out) is None and service.use(before_sign_out, t) is None
    clock.now += 1
    before_removal = service.mint(who)
    clock.now += 5
    people.remove(t, who)
    people.put(Person(t, who, 1, "boss@example.org", clock.now))  # invited again
    assert service.use(before_removal, t) is None
    clock.now += 1
    assert service.use(service.mint(who), t) is not None  # a link of now signs in
