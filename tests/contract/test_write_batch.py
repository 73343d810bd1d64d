"""Conditional writes several at once, against the local stack's DynamoDB: each write its own UpdateItem
(a transaction bills two write units a write: issue 53), answered as itself."""

import threading
import time

import pytest
from pynamodb.exceptions import UpdateError

from chalicelib import wiring
from chalicelib.core import aws
from chalicelib.stores import write_batch
from chalicelib.stores.ledger_model import LedgerModel, pk_of
from chalicelib.stores.tables import bound
from chalicelib.stores.write_batch import Write, apply_all, apply_each


def _ledger_model():
    """The ledger's model, as the stage's ledger store binds it (one class per model and table)."""
    settings = wiring.container().settings
    return bound(LedgerModel, settings.resources.ledger_table.name, settings.region)


def _writes(uid, addresses, *, only_new=True):
    m = _ledger_model()
    cond = m.state.does_not_exist() if only_new else None
    return [Write(m, pk_of(f"u{uid}", "c1"), a, [m.state.set("queued"), m.email.set(a)], cond) for a in addresses]


def test_each_write_is_one_update_item_never_a_transaction(stack, uid):
    seen = []
    addresses = [f"r{i}@example.org" for i in range(60)]
    with _dynamodb_calls(seen):
        assert apply_all(_writes(uid, addresses)) == [True] * 60
    assert sorted(seen) == ["UpdateItem"] * 60
    states = wiring.container().ledger.recorded(f"u{uid}", "c1", addresses)
    assert set(states.values()) == {"queued"} and len(states) == 60


def test_a_refused_write_is_refused_alone_and_the_others_are_made(stack, uid):
    addresses = [f"r{i}@example.org" for i in range(10)]
    assert apply_all(_writes(uid, addresses[3:5])) == [True, True]  # these two exist already
    assert apply_all(_writes(uid, addresses)) == [True] * 3 + [False] * 2 + [True] * 5
    assert len(wiring.container().ledger.recorded(f"u{uid}", "c1", addresses)) == 10


def test_two_writes_to_one_item_never_share_a_request(stack, uid):
    w = _writes(uid, ["same@example.org", "other@example.org", "same@example.org"])
    assert apply_all(w) == [True, True, False]  # the second write to `same` came after, and found it


def test_a_write_that_fails_for_another_reason_raises_for_itself_alone(stack, uid):
    m = _ledger_model()
    bad = Write(m, pk_of(f"u{uid}", "c1"), "bad@example.org", [m.attempts.add(1), m.attempts.set(2)], None)
    outcomes = apply_each([*_writes(uid, ["good@example.org"]), bad])
    assert outcomes[0] is True and isinstance(outcomes[1], UpdateError)
    with pytest.raises(UpdateError):
        apply_all([bad])


def test_a_batch_has_several_writes_in_flight_at_once(stack, uid):
    """DynamoDB's latency, which the local stack has little of: with it, writes made one after the other
    would each wait for the one before; the pool has several out at once, never more than MAX_IN_FLIGHT."""
    out, most, lock = [0], [0], threading.Lock()

    def enter(**_):
        with lock:
            out[0] += 1
            most[0] = max(most[0], out[0])
        time.sleep(0.05)

    def leave(**_):
        with lock:
            out[0] -= 1

    client = _ledger_client()
    client.meta.events.register("before-call.dynamodb.UpdateItem", enter)
    client.meta.events.register("after-call.dynamodb.UpdateItem", leave)
    try:
        assert apply_all(_writes(uid, [f"t{i}@example.org" for i in range(40)])) == [True] * 40
    finally:
        client.meta.events.unregister("before-call.dynamodb.UpdateItem", enter)
        client.meta.events.unregister("after-call.dynamodb.UpdateItem", leave)
    assert 1 < most[0] <= write_batch.MAX_IN_FLIGHT


def test_no_writes_is_no_requests_and_no_answers():
    assert apply_each([]) == [] and apply_all([]) == []


def test_writes_to_one_key_are_made_in_the_order_given(monkeypatch):
    """The pool overlaps different items only: a second write to one item sees what the first did."""
    order = []

    def one(w):
        order.append((w.range_key, w.actions[0]))
        time.sleep(0.01 if w.actions[0] == 1 else 0)
        return True

    monkeypatch.setattr(write_batch, "apply_one", one)
    writes = [Write(_AnyTable, "pk", key, [n], None) for n in (1, 2, 3) for key in ("a", "b")]
    assert apply_all(writes) == [True] * 6
    for key in ("a", "b"):
        assert [n for k, n in order if k == key] == [1, 2, 3]


class _AnyTable:
    """A model for writes that a replaced apply_one only answers: only its table name is read."""

    class Meta:
        table_name = "t"


def _ledger_client():
    settings = wiring.container().settings
    return aws.table_client(settings.region, settings.resources.ledger_table.name)


class _dynamodb_calls:
    """The DynamoDB operations the ledger's client makes meanwhile, from any thread (the pool's too)."""

    def __init__(self, seen: list[str]) -> None:
        self._seen = seen

    def _note(self, model, **_):
        self._seen.append(model.name)

    def __enter__(self):
        _ledger_client().meta.events.register("before-call.dynamodb.*", self._note)
        return self

    def __exit__(self, *_exc):
        _ledger_client().meta.events.unregister("before-call.dynamodb.*", self._note)
