"""The rules of a tenant's people (chalicelib.console.people): addresses as one mailbox whatever their case,
no change to one's own role or membership, a bounded list, and roles by name."""

from __future__ import annotations

import pytest

from chalicelib.api.console_people import role_named
from chalicelib.api.principal import Role
from chalicelib.console.people import People, PersonRefused
from chalicelib.stores.people import MAX_PEOPLE
from tests.fakes.people import FakePeople


def test_an_invitation_keys_the_address_in_lower_case_and_a_second_changes_the_role():
    store = FakePeople()
    people = People(store, lambda: 5.0)
    first = people.invite("acme", "  Ann@Example.ORG ", Role.VIEWER, "boss@example.org")
    assert first.new and first.person.address == "ann@example.org" and first.person.invited_at == 5.0
    again = people.invite("acme", "ann@example.org", Role.SENDER, "other@example.org")
    assert not again.new and again.person.role == Role.SENDER and again.person.invited_by == "boss@example.org"
    assert [p.role for p in people.of_tenant("acme")] == [Role.SENDER]


@pytest.mark.parametrize("given", ["", "ann", "ann@", "<script>@x", "a" * 65 + "@example.org", "x@" + "y" * 300])
def test_what_is_not_an_address_is_refused_and_nothing_stored(given: str):
    store = FakePeople()
    with pytest.raises(PersonRefused, match="not an email address"):
        People(store).invite("acme", given, Role.VIEWER, "boss@example.org")
    assert store.items == {}


def test_nobody_changes_their_own_role_or_removes_themselves():
    store = FakePeople()
    people = People(store)
    people.invite("acme", "boss@example.org", Role.ADMIN, "operator")
    with pytest.raises(PersonRefused, match="own role"):
        people.invite("acme", "Boss@example.org", Role.VIEWER, "boss@example.org")
    with pytest.raises(PersonRefused, match="remove yourself"):
        people.remove("acme", "boss@example.org", "boss@example.org")
    assert people.remove("acme", "boss@example.org", "api-key") and not people.remove("acme", "x@y.org", "api-key")


def test_a_tenant_has_at_most_its_bound_of_people_and_a_role_change_still_goes():
    store = FakePeople()
    people = People(store)
    for i in range(MAX_PEOPLE):
        people.invite("acme", f"p{i}@example.org", Role.VIEWER, "operator")
    with pytest.raises(PersonRefused, match=f"at most {MAX_PEOPLE}"):
        people.invite("acme", "one-more@example.org", Role.VIEWER, "operator")
    assert people.invite("acme", "p0@example.org", Role.ADMIN, "operator").person.role == Role.ADMIN


def test_roles_are_named_as_the_console_shows_them():
    assert [role_named(n) for n in ("viewer", " Sender ", "ADMIN")] == [Role.VIEWER, Role.SENDER, Role.ADMIN]
    with pytest.raises(PersonRefused, match="not a role"):
        role_named("owner")


def test_a_client_is_its_address_or_its_ipv6_networks_64():
    from types import SimpleNamespace

    from chalicelib.api.console import _client

    def asked(source: str | None) -> str:
        return _client(SimpleNamespace(context={"identity": {"sourceIp": source}}))  # type: ignore[arg-type]

    assert asked("203.0.113.7") == "203.0.113.7"
    assert asked("2001:db8:1:2:aaaa::1") == asked("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert asked("2001:db8:1:3::1") != asked("2001:db8:1:2::1")
    assert asked("::ffff:198.51.100.4") == "198.51.100.4"
    assert asked(None) == "unknown" and asked("not-an-address") == "not-an-address"


def test_the_settings_page_of_a_tenant_with_no_message_yet_says_how_it_begins():
    from chalicelib.console import pages
    from chalicelib.console.sessions import Session

    shown = pages.render(
        "settings.html",
        base="",
        session=Session("acme", None, 3, "token"),
        role_name="admin",
        active="settings",
        title="Settings",
        tenant={"id": "acme", "plan": None, "pauses": []},
        owners={},
        lifted_by={},
        own_pause=False,
        may_pause=True,
        notice=None,
        problem=None,
        max_reason=200,
    )
    assert "Nothing sent yet" in shown and "PrecompileEmail" in shown and "Pause all sending" not in shown
