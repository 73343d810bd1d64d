"""The reputation guard: too many bounces or complaints pause a tenant; its email is held, not lost."""

import contextlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from chalicelib import wiring
from chalicelib.core.contract import Sender
from chalicelib.core.errors import SendFailed
from chalicelib.feedback.reputation import verdict
from chalicelib.send.sent_ahead import SentAhead
from chalicelib.stores.ports.sending import Limits, Window
from chalicelib.stores.transactions import CONFLICT_ATTEMPTS, StillConflicting
from tests.conflicts import Conflicts
from tests.fakes import FakeReputation, FakeSes, FakeSqs, FakeTenants, parts
from tests.unit.test_drainer import SETTINGS, queued, tenant
from tests.unit.test_ses_events import bounce_of, complaint_of

LIMITS = Limits()


def test_rates_over_the_limits_pause_but_small_volumes_do_not():
    assert verdict(Window(7, 199, 100, 0), LIMITS) is None  # too few sends to mean anything
    assert verdict(Window(7, 1000, 50, 1), LIMITS) is None  # 5.0% and 0.1%: at the limits, not over
    assert "bounce rate 5.1%" in verdict(Window(7, 1000, 51, 0), LIMITS)
    assert "complaint rate 0.20%" in verdict(Window(7, 1000, 0, 2), LIMITS)


def test_permanent_bounces_over_five_percent_pause_the_tenant_with_the_reason(stack, uid):
    c = wiring.container()
    user = f"careless-{uid}"
    c.tenants.accept(user, "free", Sender("news@careless.example", "C", None, None, None, 1.0), c.ses.account_of)
    c.reputation.add(user, sent=300)
    events = c.ses_events  # the container's own, as ses_events runs it
    for i in range(16):  # 16 of 300: 5.3%
        assert events.handle(bounce_of(user, f"gone{i}@x.io", c.settings.account_id)) == "recorded bounced"
        if i < 14:
            assert c.tenants.get(user).paused_reason is None  # 15 of 300 is still 5.0%
    reason = c.tenants.get(user).paused_reason
    assert reason.startswith("reputation guard: bounce rate 5.3% over the last 7 days (16 of 300)")
    assert (user, reason) in c.tenants.paused()
    c.tenants.resume(user)
    assert c.tenants.get(user).paused_reason is None


def test_sends_are_counted_before_they_go_so_a_sender_that_dies_leaves_the_count_high_never_low():
    rep = FakeReputation()
    ahead = SentAhead(rep)
    for _ in range(25):
        ahead.take("acme", 14)
    # What a sender killed here leaves: at least every send it made (the guard can only be late).
    assert rep.sent("acme") == 40 and len(rep.writes) == 2  # one write per block of 20, not per send
    ahead.settle()  # a drain that ends gives the unused remainder back: exact
    assert rep.sent("acme") == 25


def test_a_send_ses_refused_gives_its_count_back():
    rep = FakeReputation()
    ahead = SentAhead(rep)
    for _ in range(3):
        ahead.take("acme", 5)
    ahead.give_back("acme")
    ahead.take("other", 5)
    ahead.settle()
    assert (rep.sent("acme"), rep.sent("other")) == (2, 1)


def test_a_count_that_cannot_be_written_goes_with_the_next_block():
    rep = FakeReputation(fail=1)
    ahead = SentAhead(rep)
    ahead.take("acme", 10)  # the write fails; the send goes on, owed
    ahead.take("acme", 10)
    assert rep.writes == [("acme", 21)]
    ahead.settle()
    assert rep.sent("acme") == 2


def test_a_fast_sender_counts_about_a_second_of_sends_per_write_and_never_more_than_the_cap():
    rep = FakeReputation()
    ahead = SentAhead(rep)
    for _ in range(300):
        ahead.take("acme", 150)
    for _ in range(250):
        ahead.take("bulk", 5000)
    assert rep.writes == [("acme", 150), ("acme", 150), ("bulk", 200), ("bulk", 200)]


def test_the_drainer_counts_every_send_for_the_guard_and_no_refused_one():
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(47)])
    ses = FakeSes({"r5@example.org": SendFailed("MessageRejected: address blacklisted")})
    rep = FakeReputation()
    d = parts.drainer(SETTINGS, sqs, ses, FakeTenants(tenant("acme", "AK")), reputation=rep)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert (result.sent, result.failed) == (46, 1)
    assert rep.sent("acme") == 46
    assert len(rep.writes) <= 4  # three blocks and the remainder given back, not one write per email


def test_bounces_after_a_crashed_sender_do_not_pause_a_tenant_whose_rate_is_fine(stack, uid):
    # 1% bounces; the sender dies after 400 sends. Counting after sending (buffered) lost up to a second
    # of sends per death, and enough deaths made 1% look like 5%. Counted ahead, the window holds them all.
    c = wiring.container()
    user = f"fine-{uid}"
    ahead = SentAhead(c.reputation)
    for _ in range(400):
        ahead.take(user, 20)
    # (no settle: the sender is gone)
    window = c.reputation.window(user)
    assert window.sent >= 400
    c.reputation.add(user, bounced=4)
    assert verdict(c.reputation.window(user), c.reputation.limits) is None


def test_a_complaint_whose_first_try_failed_after_its_record_still_reaches_the_guard_once(stack, uid):
    # The complaint is recorded in the ledger, then its suppression write (or the count, the window's read,
    # the pause) fails: the event comes back through batchItemFailures, finds the feedback "already
    # recorded", and must still be counted, once, and judged. 5 of 1,000 (0.5%, the limit is 0.1%).
    c = wiring.container()
    user = f"complained-{uid}"
    c.tenants.accept(user, "free", Sender("news@complained.example", "C", None, None, None, 1.0), c.ses.account_of)
    c.reputation.add(user, sent=1000)
    people = [f"reader{i}@x.io" for i in range(5)]
    c.ledger.record_queued(user, "spring", people)
    events, real_add = c.ses_events, c.suppressions.add
    failing = set(people)

    def add_failing_once(scope, address, kind, reason):
        if address in failing:
            failing.discard(address)
            raise ConnectionError("DynamoDB throttled the write past the SDK's retries")
        return real_add(scope, address, kind, reason)

    c.suppressions.add = add_failing_once  # type: ignore[method-assign]
    try:
        for address in people:
            event = complaint_of(user, address, c.settings.account_id)
            with contextlib.suppress(ConnectionError):  # reported in batchItemFailures: SQS gives it again
                events.handle(event)
            assert events.handle(event) == "already recorded"  # the retry
            assert events.handle(event) == "already recorded"  # and a duplicate delivery of it
    finally:
        c.suppressions.add = real_add  # type: ignore[method-assign]
    assert c.reputation.window(user).complained == 5  # each once
    reason = c.tenants.get(user, fresh=True).paused_reason
    assert reason is not None and reason.startswith("reputation guard: complaint rate 0.20%")  # at the 2nd


def test_a_bounce_that_meets_another_transaction_on_its_day_is_counted_once_when_tried_again(stack, uid):
    # A batch's events are handled ten at a time: a tenant's bounces meet each other on its day's count,
    # and DynamoDB cancels all but one (TransactionConflict). Each is tried again, and counted once.
    c = wiring.container()
    user = f"bouncing-together-{uid}"
    people = [f"gone{i}@x.io" for i in range(3)]
    c.ledger.record_queued(user, "spring", people)
    with Conflicts(c.settings.resources.usage_table.name, user, 2) as conflicts:
        assert c.reputation.count_feedback(user, "spring", people[0], "bounced")
    assert conflicts.calls == 2  # two cancelled, the third went through
    assert not c.reputation.count_feedback(user, "spring", people[0], "bounced")  # counted already
    usage = c.settings.resources.usage_table.name
    with Conflicts(usage, user, 1000, first="ConditionalCheckFailed") as conflicts:  # counted, and met another
        assert not c.reputation.count_feedback(user, "spring", people[0], "bounced")
    assert conflicts.calls == 1  # the condition is the answer: not tried again
    with Conflicts(c.settings.resources.usage_table.name, user, 1000) as conflicts, pytest.raises(StillConflicting):
        c.reputation.count_feedback(user, "spring", people[1], "bounced")  # the event comes back, and counts then
    assert conflicts.calls == CONFLICT_ATTEMPTS
    with ThreadPoolExecutor(10) as lanes:
        counted = list(lanes.map(lambda a: c.reputation.count_feedback(user, "spring", a, "bounced"), people * 4))
    assert counted.count(True) == 2  # the two not counted yet, once each
    assert c.reputation.window(user).bounced == 3
