"""The free plan's daily cap, against DynamoDB in the local stack."""

import json
from concurrent.futures import ThreadPoolExecutor

from chalicelib.daily_cap import DailyCap
from tests.conftest import canonical
from tests.test_precompile import _precompiler


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


class FakeCap:
    def __init__(self, cap, already=0):
        self.cap, self.used = cap, already

    def reserve(self, user_id, wanted):
        fit = max(0, min(wanted, self.cap - self.used))
        self.used += wanted
        return fit


def _batch(n, plan):
    msg = canonical(userPlan=plan)
    del msg["recipient"]
    msg["recipients"] = [{"email": f"r{i}@example.org"} for i in range(n)]
    return json.dumps(msg)


def test_a_free_tenant_over_its_cap_has_the_rest_recorded_as_rejected_with_the_reason():
    p, sqs, *_ = _precompiler()
    p._daily_cap = FakeCap(cap=300, already=295)
    result = p.handle(_batch(8, "free"))
    assert result.queued == 5 and sum(len(e) for _u, e in sqs.batches) == 5
    over = sorted(r.email for r in result.rejected)
    assert over == ["r5@example.org", "r6@example.org", "r7@example.org"]
    assert {r.reason for r in result.rejected} == {
        "free plan daily cap of 300 emails reached (UTC day); the rest of today's are not sent"
    }
    assert p._ledger.state("user-1", "camp-1", "r7@example.org") == "rejected"


def test_paid_tenants_have_no_daily_cap():
    p, *_ = _precompiler()
    p._daily_cap = FakeCap(cap=1, already=1)
    assert p.handle(_batch(8, "paid")).queued == 8
