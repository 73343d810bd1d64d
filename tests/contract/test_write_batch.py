"""Conditional writes many to a request (TransactWriteItems), against the local stack's DynamoDB: each
write answered as it would have been alone, in fewer requests."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from pynamodb.exceptions import UpdateError

from chalicelib import wiring
from chalicelib.core import aws
from chalicelib.stores.ledger_model import LedgerModel, pk_of
from chalicelib.stores.tables import bound
from chalicelib.stores.write_batch import GroupCommit, Write, apply_all, apply_each


def _ledger_model():
    """The ledger's model, as the stage's ledger store binds it (one class per model and table)."""
    settings = wiring.container().settings
    return bound(LedgerModel, settings.resources.ledger_table.name, settings.region)


def _writes(uid, addresses, *, only_new=True):
    m = _ledger_model()
    cond = m.state.does_not_exist() if only_new else None
    return [Write(m, pk_of(f"u{uid}", "c1"), a, [m.state.set("queued"), m.email.set(a)], cond) for a in addresses]


def _requests(monkeypatch):
    """Count the DynamoDB requests this test's thread makes through pynamodb. The local stack's own
    functions (sweeper, stream poller) run on other threads of this process and are not counted."""
    from pynamodb.connection.base import Connection

    calls = []
    real, me = Connection._make_api_call, threading.get_ident()

    def counted(self, op, kw, *a, **k):
        if threading.get_ident() == me:
            calls.append(op)
        return real(self, op, kw, *a, **k)

    monkeypatch.setattr(Connection, "_make_api_call", counted)
    return calls


def test_writes_whose_conditions_hold_go_in_one_request_per_25(stack, uid, monkeypatch):
    calls = _requests(monkeypatch)
    addresses = [f"r{i}@example.org" for i in range(60)]
    assert apply_all(_writes(uid, addresses)) == [True] * 60
    assert calls == ["TransactWriteItems"] * 3
    states = wiring.container().ledger.recorded(f"u{uid}", "c1", addresses)
    assert set(states.values()) == {"queued"} and len(states) == 60


def test_a_refused_write_is_refused_alone_and_the_rest_of_its_request_is_made(stack, uid, monkeypatch):
    addresses = [f"r{i}@example.org" for i in range(10)]
    assert apply_all(_writes(uid, addresses[3:5])) == [True, True]  # these two exist already
    calls = _requests(monkeypatch)
    assert apply_all(_writes(uid, addresses)) == [True] * 3 + [False] * 2 + [True] * 5
    # The cancelled transaction, then the writes that were not at fault as one more.
    assert calls == ["TransactWriteItems"] * 2
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


def test_writes_from_many_threads_share_requests_and_each_thread_gets_its_own_answer(stack, uid):
    commits = GroupCommit()
    addresses = [f"t{i}@example.org" for i in range(40)]
    apply_all(_writes(uid, addresses[:10]))  # these exist: their writers must hear False
    start, first = threading.Barrier(20), set(addresses[:20])

    def write(w):
        if w.range_key in first:
            start.wait()
        return commits.apply(w)

    # DynamoDB's latency, which the local stack has little of: while one commit is in flight the others' writes
    # queue behind it, as they do on AWS. On a busy machine, without it, each thread's write could be done
    # before the next thread asked, and nothing would be shared.
    settings = wiring.container().settings
    client = aws.table_client(settings.region, settings.resources.ledger_table.name)

    def latency(**_):
        time.sleep(0.05)

    client.meta.events.register("before-call.dynamodb.TransactWriteItems", latency)
    client.meta.events.register("before-call.dynamodb.UpdateItem", latency)  # one write alone
    try:
        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(write, _writes(uid, addresses)))
    finally:
        client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", latency)
        client.meta.events.unregister("before-call.dynamodb.UpdateItem", latency)
    assert answers == [False] * 10 + [True] * 30
    assert commits.requests < 40


def test_a_transaction_lost_to_a_timeout_is_made_write_by_write(monkeypatch):
    """No answer (a read timeout) says nothing of any write: each is made alone, which answers for itself.
    pynamodb's own response code raises on such an error; ours reads it as no answer."""
    from botocore.exceptions import ReadTimeoutError
    from pynamodb.exceptions import TransactWriteError

    from chalicelib.stores import write_batch
    from chalicelib.stores.tables import condition_failed, response_code

    lost = TransactWriteError("Failed to write transaction items", ReadTimeoutError(endpoint_url="http://x"))
    assert response_code(lost) is None and not condition_failed(lost)

    class Lost:
        def __init__(self, **_kw):
            pass

        def __enter__(self):
            return self

        def update(self, *_a, **_kw):
            pass

        def __exit__(self, *_exc):
            raise lost

    class Model:
        class Meta:
            table_name = "t"

        def __init__(self, *_key):
            pass

        @staticmethod
        def _get_connection():
            return type("C", (), {"connection": None})()

    alone = []
    monkeypatch.setattr(write_batch, "TransactWrite", Lost)
    monkeypatch.setattr(write_batch, "apply_one", lambda w: alone.append(w.range_key) or w.range_key != "b")
    writes = [Write(Model, "pk", k, [], None) for k in ("a", "b", "c")]
    assert apply_all(writes) == [True, False, True] and alone == ["a", "b", "c"]


class _AnyTable:
    """A model for writes that a replaced apply_each only answers: only its table name is read."""

    class Meta:
        table_name = "t"


def test_a_slow_commit_does_not_hold_up_the_writes_that_arrive_meanwhile(monkeypatch):
    """Commits run side by side (up to MAX_COMMITS): one write stuck on a slow request leaves others free."""
    from chalicelib.stores import write_batch

    release, slow_started = threading.Event(), threading.Event()

    def each(writes, _max):
        if any(w.range_key == "slow" for w in writes):
            slow_started.set()
            release.wait(10)
        return [True] * len(writes)

    monkeypatch.setattr(write_batch, "apply_each", each)
    commits = GroupCommit()

    with ThreadPoolExecutor(4) as pool:
        slow = pool.submit(commits.apply, Write(_AnyTable, "pk", "slow", [], None))
        assert slow_started.wait(5)
        fast = [pool.submit(commits.apply, Write(_AnyTable, "pk", f"k{i}", [], None)) for i in range(3)]
        assert all(f.result(timeout=5) for f in fast)  # answered while the slow commit is still out
        assert not slow.done()
        release.set()
        assert slow.result(timeout=5)


def test_writes_that_arrive_while_a_fast_commit_is_out_wait_for_it_and_go_together(monkeypatch):
    """A second commit starts beside one under way only once that one is slow: with four free to start at
    once, most writes went alone (measured: half the sender's DynamoDB CPU on single UpdateItems)."""
    from chalicelib.stores import write_batch

    sizes = []
    # The clock stands still, so the first commit stays fast however slowly the machine starts the other
    # threads; it answers once all of them are waiting (a busy machine once spread their arrival over
    # several commits, and the test measured the scheduler instead of the rule).
    commits = GroupCommit(clock=lambda: 0.0)

    def each(writes, _max):
        sizes.append(len(writes))
        if len(sizes) == 1:
            deadline = time.monotonic() + 10
            while commits.waiting < 23 and time.monotonic() < deadline:
                time.sleep(0.001)
        return [True] * len(writes)

    monkeypatch.setattr(write_batch, "apply_each", each)

    with ThreadPoolExecutor(24) as pool:
        assert all(pool.map(lambda i: commits.apply(Write(_AnyTable, "pk", f"k{i}", [], None)), range(24)))
    # The first write goes at once; the others wait for it and go in one transaction, not each alone
    # beside it (the old rule, up to four commits at once, gave [1, 1, 1, 1, 20]).
    assert sizes == [1, 23]


def test_writes_carried_by_a_thread_that_dies_are_committed_by_another(monkeypatch):
    """A thread killed mid-commit (its process gone: a BaseException) takes no other writer's answer with it."""
    from chalicelib.stores import write_batch

    class Killed(BaseException):
        pass

    calls = []
    entered = threading.Event()
    go = threading.Event()

    def each(writes, _max):
        calls.append([w.range_key for w in writes])
        if len(calls) == 1:
            entered.set()
            go.wait(5)
            raise Killed()
        return [True] * len(writes)

    monkeypatch.setattr(write_batch, "apply_each", each)
    commits = GroupCommit(max_commits=1)

    def doomed():
        try:
            commits.apply(Write(_AnyTable, "pk", "doomed", [], None))
        except Killed:
            return "killed"

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(doomed)
        assert entered.wait(5)
        other = pool.submit(commits.apply, Write(_AnyTable, "pk", "other", [], None))
        time.sleep(0.1)  # `other` is waiting behind the doomed commit
        go.set()
        assert first.result(timeout=5) == "killed"
        assert other.result(timeout=5) is True
    assert calls[-1] == ["other"]  # committed again, without the dead thread's own write
