"""One drainer per queue: the chain of invocations that carries the lease. The lease's own rules, the same for
MemoryLeases, are in tests/contract/test_lease_contract.py."""

import contextlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from chalicelib import wiring
from chalicelib.send import drain_chain
from chalicelib.send.drainer import DrainResult
from chalicelib.send.triggers import DrainRequest, parse_trigger
from tests.fakes.queues import Said


class FakeContext:
    function_name = "moonsend-local-send_emails"

    def __init__(self, ms=60_000):
        self.ms = ms

    def get_remaining_time_in_millis(self):
        return self.ms


class FakeContainer:
    def __init__(self, leases, unfinished_times=0, hold_s=0.0):
        self.leases = leases
        self.settings = wiring.container().settings
        self.unfinished_times = unfinished_times
        self.hold_s = hold_s
        self.drains = 0
        self.slots = []
        self.reinvoked = []

        outer = self

        class Drainer:
            def drain(self, queue, remaining_ms, slot=0):
                outer.drains += 1
                outer.slots.append(slot)
                time.sleep(outer.hold_s)
                r = DrainResult(queue, slot=slot)
                r.unfinished = outer.drains <= outer.unfinished_times
                return r

        self.drainer = Drainer()

    def chain(self):
        return drain_chain.DrainChain(self.leases, self.drainer, self.reinvoke, self.settings.deadline_margin_ms)

    def reinvoke(self, function_name, queue, generation, lease, slot=0, start_at_ms=None):
        self.reinvoked.append((queue, generation, lease) if slot == 0 else (queue, generation, lease, slot))


def test_two_alarms_at_once_start_one_drainer(stack, uid):
    c = FakeContainer(wiring.container().leases, hold_s=0.3)
    req = DrainRequest(f"moonsend-local-t-{uid}", "alarm")
    barrier = threading.Barrier(2)

    def trigger():
        barrier.wait()
        return drain_chain.run(c.chain(), req, req.queue_name, FakeContext())

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: trigger(), range(2)))
    assert c.drains == 1 and sum(r is None for r in results) == 1


def test_the_chain_hands_its_lease_on_and_releases_it_at_the_end(stack, uid):
    leases = wiring.container().leases
    queue = f"moonsend-local-t-{uid}"
    c = FakeContainer(leases, unfinished_times=1)
    drain_chain.run(c.chain(), DrainRequest(queue, "alarm"), queue, FakeContext())
    ((_queue, generation, token),) = c.reinvoked
    assert generation == 1 and leases.holder(queue).token == token
    # While the chain holds it, another alarm does nothing.
    assert drain_chain.run(c.chain(), DrainRequest(queue, "alarm"), queue, FakeContext()) is None
    # The continuation renews with the token, drains to the end and releases.
    assert drain_chain.run(c.chain(), DrainRequest(queue, "continue", 1, token), queue, FakeContext()) is not None
    assert leases.holder(queue) is None and c.drains == 2


def test_a_continuation_with_a_stale_token_does_not_drain(stack, uid):
    leases = wiring.container().leases
    queue = f"moonsend-local-t-{uid}"
    leases.acquire(queue, 60_000)
    c = FakeContainer(leases)
    assert drain_chain.run(c.chain(), DrainRequest(queue, "continue", 3, "stale"), queue, FakeContext()) is None
    assert c.drains == 0


def test_a_drain_that_ended_makes_the_next_one_wait_until_its_last_window_is_over(stack, uid):
    """The next drain may run in another container with a fresh pacing: it begins a window after the last
    send of the one before, which the lease item keeps (one DynamoDB update, no extra request to read it)."""
    leases = wiring.container().leases
    queue = f"moonsend-local-t-{uid}"
    first = leases.acquire(queue, 60_000)
    quiet = int(time.time() * 1000) + 800
    leases.drop(first, quiet)
    assert leases.holder(queue) is None  # free: a writer or the alarm starts the next drain at once
    assert leases.renew(queue, first.token, 60_000) is None  # the old chain's token renews nothing
    second = leases.acquire(queue, 60_000)
    assert second is not None and second.quiet_from_ms == quiet
    leases.drop(second)  # nothing sent: no quiet time, the item stays released (the sweeper reads it)
    assert leases.acquire(queue, 60_000).quiet_from_ms is None

    class Ended(FakeContainer):
        def __init__(self):
            super().__init__(leases)
            self.started_at = None
            outer = self

            class Drainer:
                def drain(self, queue, remaining_ms, slot=0):
                    outer.started_at = time.time() * 1000
                    r = DrainResult(queue)
                    r.quiet_from_ms = int(time.time() * 1000) + 700
                    return r

            self.drainer = Drainer()

    other = f"{queue}-b"
    c = Ended()
    drain_chain.run(c.chain(), DrainRequest(other, "alarm"), other, FakeContext())
    assert leases.holder(other) is None
    d = Ended()
    drain_chain.run(d.chain(), DrainRequest(other, "alarm"), other, FakeContext())
    assert d.started_at >= c.started_at + 690


def test_a_continuation_delivered_twice_renews_the_lease_once(stack, uid):
    """Lambda's async invoke is at least once, and the SDK retries an invoke that timed out: two copies of
    one continuation would each drain the slot at its whole band. Renewing changes the token."""
    leases = wiring.container().leases
    queue = f"moonsend-local-t-{uid}"
    first = leases.acquire(queue, 60_000)
    renewed = leases.renew(queue, first.token, 60_000)
    assert renewed is not None and renewed.token != first.token
    assert leases.renew(queue, first.token, 60_000) is None  # the second copy
    assert leases.renew(queue, renewed.token, 60_000) is not None  # the chain goes on with the new token


def test_each_drainer_of_a_queue_holds_its_own_slots_lease_and_hands_it_on(stack, uid):
    leases = wiring.container().leases
    queue = f"moonsend-local-t-{uid}"
    c = FakeContainer(leases, unfinished_times=1)
    drain_chain.run(c.chain(), DrainRequest(queue, "helper", slot=2), queue, FakeContext())
    ((_q, generation, token, slot),) = c.reinvoked
    assert (generation, slot, c.slots) == (1, 2, [2])
    assert leases.holder(f"{queue}#2").token == token and leases.holder(queue) is None
    # Slot 0 is free for the alarm; a second start of slot 2 finds it held.
    assert drain_chain.run(c.chain(), DrainRequest(queue, "alarm"), queue, FakeContext()) is not None
    assert drain_chain.run(c.chain(), DrainRequest(queue, "helper", slot=2), queue, FakeContext()) is None
    assert (
        drain_chain.run(c.chain(), DrainRequest(queue, "continue", 1, token, slot=2), queue, FakeContext()) is not None
    )
    assert leases.holder(f"{queue}#2") is None and c.slots == [2, 0, 2]


@pytest.mark.parametrize("slot", [1, 7])
def test_a_drainers_slot_travels_in_its_start_and_its_continuations(slot):
    from chalicelib.send.triggers import continuation_event, sweep_event

    arn = "arn:aws:sns:us-east-1:1:t"
    started = parse_trigger(sweep_event("q", arn, slot=slot)["Records"][0]["Sns"]["Message"])
    continued = parse_trigger(continuation_event("q", 2, arn, "tok", slot)["Records"][0]["Sns"]["Message"])
    assert (started.source, started.slot) == ("helper", slot)
    assert (continued.source, continued.slot, continued.lease) == ("continue", slot, "tok")


@pytest.mark.parametrize("slot", [-1, 1000, "1", True, 1.5])
def test_a_trigger_with_a_slot_no_drainer_can_have_asks_for_nothing(slot):
    message = json.dumps({"kind": "moonsend.drain.sweep", "queue": "q", "slot": slot})
    assert parse_trigger(message) is None


@pytest.mark.parametrize("lease", ["tok-1", None])
def test_continuation_messages_carry_the_lease(lease):
    from chalicelib.send.triggers import continuation_event

    event = continuation_event("q", 4, "arn:aws:sns:us-east-1:1:t", lease or "")
    req = parse_trigger(event["Records"][0]["Sns"]["Message"])
    assert (req.queue_name, req.source, req.generation) == ("q", "continue", 4)
    assert req.lease == (lease or "")
    assert json.loads(event["Records"][0]["Sns"]["Message"])["kind"] == "moonsend.drain.continue"


def test_a_stalled_queue_is_picked_up_by_the_sweeper(stack, uid):
    """Messages arrive with nothing to start a drain: no direct start, and the queue's alarm, where the stage
    gives queues one, already in ALARM (no notification); by default it has none. Only the sweeper helps."""
    from chalicelib.core.contract import QueuedEmail, Sender
    from tests.conftest import read_sends
    from tests.e2e.test_pipeline_e2e import _tenant

    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    # The stack's own minutely sweep would rescue the queue too, whenever its minute comes round: hold
    # it off, so that this test's sweep is the one that does (and the "nothing happens" check holds).
    for schedule in stack.scheduler.schedules:
        schedule.next_at = time.monotonic() + 600
    c = wiring.container()
    c.tenants.accept(
        user,
        "paid",
        Sender(sender["emailAddress"], "", "us-east-1", sender["apiKey"], sender["apiSecret"], 20.0),
        c.ses.account_of,
    )
    queue = f"moonsend-local-t-{user}"
    url = c.queues.ensure(queue, user)
    if stack.settings.queue_alarms:
        stack.alarms.evaluate_once(force=True)  # the new alarm settles (OK: the queue is empty)
        cw = stack.client("cloudwatch")
        cw.set_alarm_state(AlarmName=f"{queue}-not-empty", StateValue="ALARM", StateReason="left over from a drain")
    body = QueuedEmail(user, "paid", {}, "c1", "Hi", "<p>Hi</p>", "late@example.org").to_json()
    stack.client("sqs").send_message(QueueUrl=url, MessageBody=body)
    time.sleep(2.5)  # alarm evaluations come and go: the state stays ALARM, nothing is notified
    assert stack.queue_depths()[queue][0] == 1
    from infra.local.scheduler import scheduled_event

    tick = scheduled_event("arn:aws:events:us-east-1:123456789012:rule/sweep", "123456789012", "us-east-1")
    resp = stack.client("lambda").invoke(FunctionName="moonsend-local-sweep_queues", Payload=json.dumps(tick))
    assert resp["StatusCode"] == 200 and "FunctionError" not in resp
    assert stack.wait_until_drained(30)
    assert [s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user] == ["late@example.org"]
    for schedule in stack.scheduler.schedules:
        schedule.next_at = time.monotonic()


def test_the_sweeper_leaves_queues_that_are_being_drained_alone(stack, uid):
    from chalicelib.jobs.sweeper import Sweeper

    started = []
    leases = wiring.container().leases
    busy, idle = f"moonsend-local-t-busy{uid}", f"moonsend-local-t-idle{uid}"
    # Both made here, not by a tenant's sends, which mark their queue in use: said in use as those would be.
    sweeper = Sweeper(wiring.container().settings, stack.client("sqs"), leases, Said({busy, idle}), started.append)
    sqs = stack.client("sqs")
    # The stack's own sweeper (every minute, or at once after a test that brought it forward) would start
    # a real drain of the idle queue first, and this sweeper would rightly leave it alone: it waits.
    schedules = [(schedule, schedule.next_at) for schedule in stack.scheduler.schedules]
    for schedule, _at in schedules:
        schedule.next_at = time.monotonic() + 3600
    time.sleep(1.5)  # a tick under way when they were put off has started what it found due
    assert stack.wait_until_drained(30)  # and that has finished (retire_idle_queues deletes unmarked queues)
    urls = [sqs.create_queue(QueueName=q)["QueueUrl"] for q in (busy, idle)]
    for url in urls:
        sqs.send_message(QueueUrl=url, MessageBody="{}")
    lease = leases.acquire(busy, 60_000)
    try:
        sweeper.sweep()
        assert idle in started and busy not in started
    finally:  # these hold unsendable messages: leave nothing for the stack's own sweeper
        leases.drop(lease)
        for url in urls:
            with contextlib.suppress(ClientError):
                sqs.purge_queue(QueueUrl=url)
        for schedule, at in schedules:
            schedule.next_at = at
        for q in (busy, idle):
            sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=q)["QueueUrl"])
