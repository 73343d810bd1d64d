"""The free plan's daily cap, against DynamoDB in the local stack."""

import json
from concurrent.futures import ThreadPoolExecutor

from chalicelib.stores.daily_cap import DailyCap, batch_id
from chalicelib.stores.ports.sending import Share
from tests.conftest import canonical
from tests.fakes import FakeCap, FakeLedger
from tests.unit.test_precompile import _precompiler


def _cap(stack, cap):
    return DailyCap(stack.settings.resources.usage_table.name, stack.settings.region, cap)


def test_batches_fit_until_the_cap_and_the_rest_do_not(stack, uid):
    cap = _cap(stack, 25)
    day = 1_795_300_000.0
    assert [cap.reserve(f"free-{uid}", n, now=day) for n in (10, 10, 10, 10)] == [10, 10, 5, 0]
    assert cap.reserve(f"free-{uid}", 10, now=day + 86_400) == 10  # a new UTC day starts afresh
    assert cap.reserve(f"other-{uid}", 20, now=day) == 20  # per tenant


def test_concurrent_precompiles_never_grant_more_than_the_cap_in_all(stack, uid):
    cap = _cap(stack, 300)
    with ThreadPoolExecutor(16) as pool:
        granted = list(pool.map(lambda _i: cap.reserve(f"race-{uid}", 30), range(20)))
    assert sum(granted) == 300 and cap.used(f"race-{uid}") == 600


def test_the_same_batch_reserved_again_gets_the_same_answer_and_is_counted_once(stack, uid):
    cap = _cap(stack, 25)
    day = 1_795_300_000.0
    a, b, c = (batch_id("camp", [f"{k}{i}@x.example" for i in range(10)]) for k in "abc")
    assert cap.reserve(f"dup-{uid}", 10, now=day, batch=a) == 10
    assert cap.reserve(f"dup-{uid}", 10, now=day, batch=a) == 10  # a duplicate delivery
    assert cap.reserve(f"dup-{uid}", 10, now=day, batch=b) == 10  # not 5: the duplicate spent nothing
    assert cap.reserve(f"dup-{uid}", 10, now=day, batch=c) == 5
    assert cap.reserve(f"dup-{uid}", 10, now=day, batch=c) == 5  # a partial fit is repeated as it was
    assert cap.reserve(f"dup-{uid}", 10, now=day, batch=b) == 10
    assert cap.used(f"dup-{uid}", now=day) == 30


def test_batches_after_the_cap_are_refused_without_growing_the_days_item(stack, uid):
    cap = _cap(stack, 20)
    day = 1_795_300_000.0
    ids = [batch_id("camp", [f"r{i}@x.example"]) for i in range(50)]
    assert [cap.reserve(f"full-{uid}", 8, now=day, batch=b) for b in ids[:4]] == [8, 8, 4, 0]
    assert [cap.reserve(f"full-{uid}", 8, now=day, batch=b) for b in ids[4:]] == [0] * 46
    item = stack.client("dynamodb").get_item(
        TableName=stack.settings.resources.usage_table.name,
        Key={"user_id": {"S": f"full-{uid}"}, "day": {"S": "2026-11-21"}},
        ConsistentRead=True,
    )["Item"]
    assert sum(1 for k in item if k.startswith("b_")) == 3  # one record per batch that got a share


def test_concurrent_duplicates_of_batches_never_grant_more_than_the_cap(stack, uid):
    cap = _cap(stack, 300)
    ids = [batch_id("camp", [f"b{k}-{i}@x.example" for i in range(30)]) for k in range(20)]
    with ThreadPoolExecutor(16) as pool:
        granted = list(pool.map(lambda b: (b, cap.reserve(f"racedup-{uid}", 30, batch=b)), ids + ids))
    first = dict(granted[:20])
    assert all(first[b] == g for b, g in granted[20:])  # each duplicate answered as its original
    assert sum(first.values()) == 300


def test_batch_ids_name_the_campaign_and_its_recipients():
    assert batch_id("c1", ["a@x", "b@x"]) == batch_id("c1", iter(["a@x", "b@x"]))
    assert batch_id("c1", ["a@x", "b@x"]) != batch_id("c2", ["a@x", "b@x"])
    assert batch_id("c1", ["a@x", "b@x"]) != batch_id("c1", ["a@xb@x"])
    assert batch_id("c1", ["a@x"]) != batch_id("c1", ["a@x", "b@x"])


def _batch(n, plan):
    msg = canonical(userPlan=plan)
    del msg["recipient"]
    msg["recipients"] = [{"email": f"r{i}@example.org"} for i in range(n)]
    return json.dumps(msg)


def test_a_free_tenant_over_its_cap_has_the_rest_recorded_as_rejected_with_the_reason():
    cap, ledger = FakeCap(cap=300, already=295), FakeLedger()
    p, sqs, *_ = _precompiler(ledger=ledger, daily_cap=cap)
    result = p.handle(_batch(8, "free"))
    assert result.queued == 5 and sum(len(e) for _u, e in sqs.batches) == 5
    over = sorted(r.email for r in result.rejected)
    assert over == ["r5@example.org", "r6@example.org", "r7@example.org"]
    assert {r.reason for r in result.rejected} == {
        "free plan daily cap of 300 emails reached (UTC day); the rest of today's are not sent"
    }
    assert ledger.state("user-1", "camp-1", "r7@example.org") == "rejected"
    # reserved as one batch of the campaign's recipients, so a redelivery is not counted again
    assert cap.batches == [batch_id("camp-1", [f"r{i}@example.org" for i in range(8)])]


def test_paid_tenants_have_no_daily_cap():
    p, *_ = _precompiler(daily_cap=FakeCap(cap=1, already=1))
    assert p.handle(_batch(8, "paid")).queued == 8


def test_a_retry_that_wants_fewer_gets_the_first_share_and_counts_nothing(stack, uid):
    cap = _cap(stack, 25)
    day = 1_800_000_000.0
    user = f"retry-{uid}"
    assert cap.reserve(user, 20, now=day) == 20
    batch = batch_id("camp", [f"r{i}@x.example" for i in range(10)])
    assert cap.share(user, 10, batch, now=day) == Share(5)
    # Retried after 3 of its recipients were recorded: it wants 7, and has the share it was given.
    assert cap.share(user, 7, batch, now=day) == Share(5, repeated=True)
    assert cap.share(user, 0, batch, now=day) == Share(5, repeated=True)
    assert cap.used(user, now=day) == 30  # counted once (what each batch wanted)


def test_a_retried_free_batch_queues_the_same_recipients_and_rejects_the_same_ones():
    # The first try was let through 5 of 8 (295 of 300 used), queued them and died before recording
    # anything; the sender then sent r0 and r1. The retry (fewer fresh recipients) must neither spend
    # the cap again nor let a sixth through.
    cap, ledger = FakeCap(cap=300, already=295), FakeLedger()
    p, sqs, *_ = _precompiler(ledger=ledger, daily_cap=cap)
    first = p.handle(_batch(8, "free"))
    assert first.queued == 5
    ledger.rows.clear()  # as if the first try had died before its ledger writes...
    for r in ("r0@example.org", "r1@example.org"):  # ...and the sender had been faster for two
        assert ledger.record_sent_event("user-1", "camp-1", r, f"ses-{r}")
    sqs.batches.clear()
    retry = p.handle(_batch(8, "free"))
    queued = sorted(json.loads(e["MessageBody"])["recipient"]["email"] for _u, batch in sqs.batches for e in batch)
    assert retry.queued == 3 and queued == ["r2@example.org", "r3@example.org", "r4@example.org"]
    assert sorted(r.email for r in retry.rejected) == ["r5@example.org", "r6@example.org", "r7@example.org"]
    assert cap.used == 295 + 8 and len(set(cap.batches)) == 1  # one batch, counted once
