"""Several drainers on one queue (issue 22): a rate above one drainer's is split in bands, never exceeded.

The units: the bands themselves (chalicelib.core.drainer_shares), then whole drainers racing on one
queue. Each drainer runs as send_emails does on AWS: its own invocation (here a thread) with a fresh
drainer and pacing, through the drain chain, holding its slot's lease, handing on at its deadline with
a continuation; slot 0 starts the others. They share what is shared on AWS: one SQS queue (with
visibility timeouts and receive counts), the ledger, the leases, and SES, which notes when each send
arrives. The promise is checked where SES counts it: no one-second window holds more sends than the
rate, overall and per campaign, and no recipient is sent twice.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from types import SimpleNamespace

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail, Sender
from chalicelib.core.drainer_shares import drainers_for, lease_key, share
from chalicelib.queueing.drain_starter import DrainStarter
from chalicelib.send import drain_chain
from chalicelib.send.ses_sender import SendQuota
from chalicelib.send.triggers import DrainRequest
from chalicelib.stores.ports.tenants import KeyVersion, Tenant
from tests.fakes import FakeLedger, FakeTenants, parts
from tests.fakes.leases import MemoryLeases
from tests.fakes.shared_queue import SharedSqs

MAX = 100  # one drainer's most, per second, in these tests
SETTINGS = Settings.from_env(
    {
        "MOONSEND_STAGE": "test",
        "MOONSEND_LONG_POLL_SECONDS": "0",
        "MOONSEND_DEADLINE_MARGIN_MS": "1000",
        "MOONSEND_DRAINER_MAX_RATE": str(MAX),
    }
)
QUEUE = "moonsend-test-t-acme"


# The bands.


@pytest.mark.parametrize(
    ("rate", "expected"),
    [
        (0.5, [0.5]),
        (100, [100]),
        (100.5, [100]),  # above one drainer's most, rates are split in whole emails
        (101, [100, 1]),
        (250, [100, 100, 50]),
        (1000, [100] * 10),
    ],
)
def test_a_rate_is_split_into_bands_of_at_most_one_drainers_most(rate, expected):
    n = drainers_for(rate, MAX)
    assert [share(rate, slot, MAX) for slot in range(n)] == expected
    assert share(rate, n, MAX) == 0 and share(rate, n + 5, MAX) == 0


def test_each_slots_band_grows_with_the_rate_so_slots_that_disagree_stay_within_the_highest():
    rng = random.Random(22)
    rates = sorted(
        {0.25, 1, 99.5, 100, 100.5, 101, 150, 199, 200, 201, 999, 1000, 1001}
        | {rng.uniform(0, 1200) for _ in range(300)}
    )
    for slot in range(13):
        bands = [share(r, slot, MAX) for r in rates]
        assert bands == sorted(bands), f"slot {slot}'s band shrinks as the rate rises"
    for _ in range(2000):
        # Each slot has seen some rate no higher than the queue's highest, R: together they stay within R.
        top = rng.choice(rates)
        seen = [rng.choice([r for r in rates if r <= top]) for _ in range(drainers_for(top, MAX) + 2)]
        assert sum(share(r, slot, MAX) for slot, r in enumerate(seen)) <= top


def test_equal_parts_would_break_the_rate_where_bands_do_not():
    """Why bands: 200/s is one drainer, 201/s two. Equal parts give 200 then 100.5 + 100.5, and a slot 0
    still at 200 beside a slot 1 already at 100.5 sends 300.5 a second."""
    equal = 200 + 201 / 2
    bands = share(200, 0, 200) + share(201, 1, 200)
    assert equal > 201 and bands <= 201


def test_slot_zero_keeps_the_queues_lease_name_and_the_others_have_their_own():
    assert lease_key(QUEUE, 0) == QUEUE
    assert lease_key(QUEUE, 3) == f"{QUEUE}#3"


# Drainers racing on one queue.


class Killed(BaseException):
    """The drainer's process died here (a Lambda out of memory, a host gone): nothing after runs."""


class ArrivalSes:
    """SES that notes when each send arrives (where it counts against the rate), then answers 20 ms later."""

    def __init__(self, latency_s=0.02):
        self.latency_s = latency_s
        self.arrived: list[tuple[float, str]] = []  # (when, recipient)
        self.lock = threading.Lock()

    def quota(self, sender, platform=False):
        return SendQuota(5000.0, 10_000_000.0, 0.0)

    def send(self, sender, to, raw, platform=False, tenant=None):
        with self.lock:
            self.arrived.append((time.monotonic(), to))
        time.sleep(self.latency_s)
        return f"ses-{to}"

    def busiest_second(self, prefix=""):
        ts = sorted(t for t, to in self.arrived if to.startswith(prefix))
        best, lo = 0, 0
        for hi in range(len(ts)):
            while ts[hi] - ts[lo] >= 1.0:
                lo += 1
            best = max(best, hi - lo + 1)
        return best


class DiesAfter:
    """One drainer's view of SES: its `n`th send reaches SES, and the drainer dies before hearing back."""

    def __init__(self, ses, n):
        self.ses, self.n, self.calls = ses, n, itertools.count(1)
        self.died_sending: list[str] = []

    def quota(self, sender, platform=False):
        return self.ses.quota(sender)

    def send(self, sender, to, raw, platform=False, tenant=None):
        if next(self.calls) == self.n:
            with self.ses.lock:
                self.ses.arrived.append((time.monotonic(), to))
            self.died_sending.append(to)
            raise Killed()
        return self.ses.send(sender, to, raw, platform)


class Lambdas:
    """send_emails invocations, each in its own thread with a fresh container (drainer, pacing), given
    `lambda_s` of Lambda time so that chains hand on at their deadline."""

    def __init__(self, sqs, ses, ledger, tenants, *, lambda_s=4.0, ses_for_slot=None):
        self.sqs, self.ses, self.ledger, self.tenants = sqs, ses, ledger, tenants
        self.leases = MemoryLeases()
        self.lambda_s = lambda_s
        self.ses_for_slot = ses_for_slot or {}
        self.results: list = []
        self.died: list[int] = []
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def start_drain(self, queue, start_at_ms=None, slot=0):
        self._invoke(DrainRequest(queue, "sweep" if slot == 0 else "helper", slot=slot))

    def _invoke(self, request):
        t = threading.Thread(target=self._run, args=(request,))
        with self.lock:
            self.threads.append(t)
        t.start()

    def _run(self, request):
        ses = self.ses_for_slot.pop(request.slot, None) if request.source != "continue" else None
        deadline = time.monotonic() + self.lambda_s
        chain = drain_chain.DrainChain(
            leases=self.leases,
            drainer=parts.drainer(
                SETTINGS,
                self.sqs,
                ses or self.ses,
                self.tenants,
                ledger=self.ledger,
                drains=DrainStarter(self.leases, self.start_drain),
            ),
            hand_on=lambda _fn, queue, generation, lease, slot, at: self._invoke(
                DrainRequest(queue, "continue", generation, lease, at, slot)
            ),
            deadline_margin_ms=SETTINGS.deadline_margin_ms,
        )
        context = SimpleNamespace(
            function_name="send_emails",
            get_remaining_time_in_millis=lambda: int((deadline - time.monotonic()) * 1000),
        )
        try:
            result = drain_chain.run(chain, request, request.queue_name, context)
        except Killed:
            self.died.append(request.slot)
            return
        if result is not None:
            with self.lock:
                self.results.append(result)

    def wait(self, timeout_s=60.0):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with self.lock:
                alive = [t for t in self.threads if t.is_alive()]
            if not alive:
                return
            alive[0].join(timeout=0.1)
        raise AssertionError("drainers still running")

    def drain_until_empty(self, sqs, tries=6):
        """Start slot 0 until the queue is empty: email handed back as the last drainers ended goes back as a
        fresh copy, drained by the next start (on AWS the alarm's or the sweeper's)."""
        for _ in range(tries):
            self.start_drain(QUEUE)
            self.wait()
            if sqs.left == 0:
                return

    def sent_by_slot(self):
        by: dict[int, int] = {}
        for r in self.results:
            by[r.slot] = by.get(r.slot, 0) + r.sent
        return by


def acme(rate=1000.0):
    return Tenant(
        "acme",
        "paid",
        Sender("news@acme.example", "Acme", "us-east-1", "AKIAACME", "secret", rate),
        (KeyVersion(1, "AKIAACME", "secret", "111111111111"),),
    )


def queued(campaign, rate, n, prefix=None):
    sender = {"emailAddress": "news@acme.example", "ratePerSecond": rate}
    return [
        QueuedEmail(
            "acme", "paid", sender, campaign, "Hi", "<p>Hi</p>", f"{prefix or campaign}-{i}@example.org"
        ).to_json()
        for i in range(n)
    ]


def sends_per_recipient(ses):
    counts: dict[str, int] = {}
    for _t, to in ses.arrived:
        counts[to] = counts.get(to, 0) + 1
    return counts


def test_three_drainers_share_a_rate_no_one_second_window_above_it_and_no_recipient_twice():
    sqs = SharedSqs(queued("c1", 300, 900), tags={"moonsend:tenant": "acme"})
    ses, ledger = ArrivalSes(), FakeLedger()
    lambdas = Lambdas(sqs, ses, ledger, FakeTenants(acme()), lambda_s=2.0)
    lambdas.start_drain(QUEUE)
    lambdas.wait()

    assert sqs.left == 0 and ledger.final_count() == 900
    assert set(sends_per_recipient(ses).values()) == {1}
    assert ses.busiest_second() <= 300
    # Slot 0 started the two others, each held its own lease, and each chain handed on at its deadline.
    assert sorted(set(lambdas.leases.taken)) == [QUEUE, f"{QUEUE}#1", f"{QUEUE}#2"]
    by_slot = lambdas.sent_by_slot()
    assert sorted(by_slot) == [0, 1, 2] and all(n > 0 for n in by_slot.values())
    assert any(r.unfinished for r in lambdas.results)


@pytest.mark.parametrize(("waiting", "helpers"), [(60, []), (900, [1, 2])])
def test_the_first_drainer_starts_helpers_only_for_more_email_than_it_holds_ahead(waiting, helpers):
    """A helper with nothing to receive ends at once and is started again a few seconds later: the first
    drainer asks for helpers only when more waits than the second and a half of sends it holds itself."""
    from chalicelib.queueing.drain_starter import DrainStarter as Starter
    from tests.fakes.leases import FakeLeases
    from tests.fakes.parts import Starts

    starts = Starts()
    sqs = SharedSqs(queued("c1", 300, waiting), tags={"moonsend:tenant": "acme"})
    d = parts.drainer(SETTINGS, sqs, ArrivalSes(0.0), FakeTenants(acme()), drains=Starter(FakeLeases(), starts))
    assert d.drain(QUEUE, remaining_ms=lambda: 60_000).sent == waiting
    assert sorted({s[2] for s in starts}) == helpers  # (asked again every few seconds: no lease here)


@pytest.mark.parametrize("receives", [1, 4])
def test_a_handed_back_email_goes_back_as_a_fresh_copy_so_it_never_nears_the_dead_letter_queue(receives):
    from chalicelib.send.message_actions import MessageActions
    from tests.fakes import FakeSqs
    from tests.fakes.s3 import payloads

    sqs = FakeSqs(queued("c1", 300, 1), receives=receives)
    (message,) = sqs.receive_message("q", 1)["Messages"]
    MessageActions(sqs, payloads()).hand_back("https://sqs/q", message)
    assert sqs.requeued == [(message["Body"], 0, None)] and sqs.deleted == [message["ReceiptHandle"]]
    assert sqs.visibility == []


def test_a_drainer_killed_mid_batch_neither_breaks_the_rate_nor_sends_anyone_twice():
    sqs = SharedSqs(queued("c1", 300, 600), visibility_s=300, time_scale=0.005, tags={"moonsend:tenant": "acme"})
    ses, ledger = ArrivalSes(), FakeLedger()
    dying = DiesAfter(ses, 40)
    lambdas = Lambdas(sqs, ses, ledger, FakeTenants(acme()), lambda_s=3.0, ses_for_slot={1: dying})
    lambdas.start_drain(QUEUE)
    lambdas.wait()
    assert lambdas.died == [1] and len(dying.died_sending) == 1

    # The email SES took as slot 1 died is claimed by it: nobody sends it again. Its Send event records it,
    # then what is left on the queue (the dead drainer's batch, back after its visibility timeout) drains.
    (lost,) = dying.died_sending
    assert ledger.state("acme", "c1", lost) is None
    ledger.record_sent_event("acme", "c1", lost, f"ses-{lost}")
    for _ in range(20):
        if sqs.left == 0:
            break
        time.sleep(0.7)  # the dead drainer's messages come back after 300 s (scaled), or their back-off
        lambdas.start_drain(QUEUE)
        lambdas.wait()

    assert sqs.left == 0 and ledger.final_count() == 600
    assert set(sends_per_recipient(ses).values()) == {1}
    assert ses.busiest_second() <= 300


def test_a_rate_lowered_mid_drain_sends_the_new_campaign_at_its_rate_and_the_extra_drainers_end():
    """A campaign at 300/s (three drainers) then one at 100/s on the same queue: slots 1 and 2 hand the
    slower campaign's email back and end; slot 0 sends it, at 100/s."""
    sqs = SharedSqs(queued("fast", 300, 600) + queued("slow", 100, 250), tags={"moonsend:tenant": "acme"})
    ses, ledger = ArrivalSes(), FakeLedger()
    lambdas = Lambdas(sqs, ses, ledger, FakeTenants(acme()), lambda_s=3.0)
    lambdas.drain_until_empty(sqs)

    assert sqs.left == 0 and ledger.final_count() == 850
    assert set(sends_per_recipient(ses).values()) == {1}
    assert ses.busiest_second() <= 300 and ses.busiest_second("slow-") <= 100
    ended = [r for r in lambdas.results if r.slot > 0 and r.handed_back]
    assert ended and all(r.stopped_reason == "the queue's rate needs fewer drainers" for r in ended)


def test_a_rate_raised_mid_drain_gets_its_drainers_and_stays_within_the_new_rate():
    """A campaign at 100/s (one drainer) then one at 250/s: slot 0 starts two more when it meets it."""
    sqs = SharedSqs(queued("slow", 100, 150) + queued("fast", 250, 600), tags={"moonsend:tenant": "acme"})
    ses, ledger = ArrivalSes(), FakeLedger()
    lambdas = Lambdas(sqs, ses, ledger, FakeTenants(acme()), lambda_s=3.0)
    lambdas.drain_until_empty(sqs)

    assert sqs.left == 0 and ledger.final_count() == 750
    assert set(sends_per_recipient(ses).values()) == {1}
    assert ses.busiest_second() <= 250 and ses.busiest_second("slow-") <= 100
    assert {f"{QUEUE}#1", f"{QUEUE}#2"} <= set(lambdas.leases.taken)


# On the local stack, from the packaged template.


@pytest.mark.e2e
def test_a_tenant_above_one_drainers_rate_is_drained_by_several_within_its_rate(stack, uid):
    from chalicelib import wiring
    from infra.producer import CampaignSpec, messages, publish
    from infra.status import max_in_window
    from tests.conftest import TEST_DRAINER_MAX_RATE, read_sends
    from tests.e2e.test_pipeline_e2e import _tenant

    rate = 40  # 15 + 15 + 10 on the test stack
    assert drainers_for(rate, TEST_DRAINER_MAX_RATE) == 3
    sender = _tenant(stack, uid, rate=rate, ses_rate=rate * 2)  # SES would take more: the drainers must not
    user = f"tenant-{uid}"
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(CampaignSpec(user, sender, "s", "b", "c1"), [{"email": f"r{i}@example.org"} for i in range(240)]),
    )
    assert stack.wait_until_drained(90)

    sends = [s for s in read_sends(stack.config.outbox) if s["userId"] == user]
    assert sorted(s["to"] for s in sends) == sorted(f"r{i}@example.org" for i in range(240))
    assert max_in_window(sorted(s["ts"] for s in sends), 1000) <= rate
    assert wiring.container().stats.get(user, "c1")["sent"] == 240
    # Each slot held its own lease: the ones that sent left their quiet time on it.
    queue = f"moonsend-local-t-{user}"
    table = stack.client("dynamodb").scan(TableName=wiring.container().settings.resources.leases_table.name)
    keys = {item["queue"]["S"] for item in table["Items"]}
    assert {queue, f"{queue}#1", f"{queue}#2"} <= keys
