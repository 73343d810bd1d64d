"""Which reason an address keeps on a tenant's suppression list, on the fake and on the DynamoDB store.

A tenant lifts only its own (`manual`) entries. An address it added itself and that then complained,
unsubscribed or bounced must take that reason: kept `manual`, the tenant could lift it and send to someone
who marked its email as spam or unsubscribed (the complaint or unsubscribe would be recorded nowhere else
the send path looks). The reverse stays as it was: an address already on the list for a recipient's or a
mailbox provider's reason keeps it when the tenant adds it."""

from __future__ import annotations

from typing import Protocol

import pytest

from chalicelib.stores.ports.suppression import BOUNCE, COMPLAINT, MANUAL, UNSUBSCRIBE, SuppressionList
from chalicelib.stores.suppression import Suppressions
from tests.contract.conftest import real_container
from tests.fakes.suppressions import FakeSuppressions


class _Ports(SuppressionList, Protocol):
    """Every suppression port."""


def _store(side: str, request: pytest.FixtureRequest) -> _Ports:
    if side == "fake":
        return FakeSuppressions()
    store: Suppressions = real_container(request).suppressions
    return store


@pytest.mark.parametrize("reason", [COMPLAINT, UNSUBSCRIBE, BOUNCE])
def test_a_recipients_reason_replaces_the_tenants_own_entry_which_then_cannot_be_lifted(
    side: str, request: pytest.FixtureRequest, uid: str, reason: str
) -> None:
    s = _store(side, request)
    user, address = f"u{uid}", f"Angry-{uid}@example.org"
    assert s.add_many(user, [address], "asked by phone") == (1, 0)
    assert s.add(user, address, reason, "what the recipient or its provider said") is True
    entry = s.entry(user, address)
    assert entry is not None and (entry.email, entry.reason) == (address, reason)
    assert s.lift(user, address) is False
    assert address.lower() in s.check(user, [address])
    assert s.add(user, address, reason, "again") is False  # recorded once


def test_the_tenants_own_entry_never_replaces_a_recipients_reason(
    side: str, request: pytest.FixtureRequest, uid: str
) -> None:
    s = _store(side, request)
    user, address = f"u{uid}", f"angry-{uid}@example.org"
    assert s.add(user, address, COMPLAINT, "abuse") is True
    assert s.add_many(user, [address], "asked by phone") == (0, 1)
    entry = s.entry(user, address)
    assert entry is not None and entry.reason == COMPLAINT


def test_a_platform_bounce_a_tenant_meets_replaces_its_own_entry(
    side: str, request: pytest.FixtureRequest, uid: str
) -> None:
    """Met at the next send (check): the tenant's list then says why the address stays, and lifting its own
    entry, which is gone, no longer answers as if the address could be sent to again."""
    s = _store(side, request)
    user, address = f"u{uid}", f"gone-{uid}@example.org"
    s.add_many(user, [address], "asked by phone")
    s.add(None, address, BOUNCE, "no such user")
    assert address in s.check(user, [address])
    entry = s.entry(user, address)
    assert entry is not None and (entry.reason, entry.platform_wide) == (BOUNCE, True)
    assert s.lift(user, address) is False
    assert s.page(user, reason=MANUAL) == ([], None)


def test_a_thousand_addresses_are_added_in_forty_requests_not_a_thousand(stack, uid, monkeypatch):
    """POST /suppressions takes up to 1,000 addresses: one conditional write each, one after the other, could
    pass API Gateway's 29 s and leave the list half added. They go 25 to a request, and what was already on
    the list (another reason, or a second spelling of an address) is counted, not added."""
    import threading
    import time

    from pynamodb.connection.base import Connection

    from chalicelib import wiring

    calls: list[str] = []
    real, me = Connection._make_api_call, threading.get_ident()

    def counted(self, op, kw, *a, **k):
        if threading.get_ident() == me:
            calls.append(op)
        return real(self, op, kw, *a, **k)

    store, user = wiring.container().suppressions, f"many{uid}"
    store.add(user, "angry@example.org", COMPLAINT, "complaint (abuse)")
    monkeypatch.setattr(Connection, "_make_api_call", counted)
    addresses = [f"r{i:04d}@example.org" for i in range(998)] + ["ANGRY@example.org", "R0001@example.org"]
    started = time.monotonic()
    assert store.add_many(user, addresses, "import") == (998, 2)
    took = time.monotonic() - started
    assert len(calls) <= 40 + 4, (len(calls), took)  # 40 transactions, and the refused ones' few extra
    assert store.entry(user, "angry@example.org").reason.startswith("complaint")  # kept its reason
    assert store.entry(user, "r0997@example.org") is not None
