"""send_emails' drain loop, with in-process fakes for SQS, SES and the registry."""

import itertools
import json
import time
from dataclasses import replace

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail, Sender
from chalicelib.core.errors import (
    QuotaExhausted,
    SendFailed,
    SendThrottled,
    TenantSendingPaused,
    TransientSendError,
)
from chalicelib.core.mime import OutgoingEmail, compose
from chalicelib.send.identity import NO_KEYS_REASON
from chalicelib.stores.ledger_model import UNATTRIBUTED, message_key, unattributed_day
from chalicelib.stores.pauses import GUARD, SES, Pause
from chalicelib.stores.ports.ledger import Entry
from chalicelib.stores.ports.sending import TenantStatus
from chalicelib.stores.ports.tenants import KeyVersion, Tenant
from tests.fakes import (
    FakeLedger,
    FakeReputation,
    FakeS3,
    FakeSchedule,
    FakeSes,
    FakeSqs,
    FakeStats,
    FakeSuppressions,
    FakeTenants,
    parts,
)
from tests.fakes.ses import FakeSesTenants
from tests.mail import html_of, parsed

_TEST_ENV = {
    "MOONSEND_STAGE": "test",
    "MOONSEND_LONG_POLL_SECONDS": "0",
    "MOONSEND_DEADLINE_MARGIN_MS": "1000",
    "MOONSEND_FREE_RATE": "1000",
    "MOONSEND_PUT_BACK_STAY_S": "0",  # a drain ends at once (the fake's copies put back never come back)
}
SETTINGS = Settings.from_env(_TEST_ENV)


def tenant(user, key=None, rate=1000.0):
    return Tenant(
        user,
        "paid" if key else "free",
        Sender(f"news@{user}.example", user.title(), "us-east-1", key, key and "secret", rate),
        (KeyVersion(1, key, "secret", "111111111111"),) if key else (),
    )


def queued(user, to, plan="paid"):
    return QueuedEmail(user, plan, {"emailAddress": f"news@{user}.example"}, "c1", "Hi", "<p>Hi</p>", to).to_json()


def drainer(sqs, ses, tenants, stats=None, ledger=None):
    stats = stats or FakeStats()
    return parts.drainer(SETTINGS, sqs, ses, tenants, stats=stats, ledger=ledger), stats


def test_drains_everything_deletes_each_sent_message_and_counts_it():
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(25)])
    ses = FakeSes()
    d, stats = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")))
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert (result.sent, result.failed, result.unfinished) == (25, 0, False)
    assert sorted(sqs.deleted) == sorted(f"rh{i}" for i in range(25))
    assert {s[0] for s in ses.sent} == {"AKIAACME"}
    assert stats.total("sent") == 25


def test_a_composed_email_goes_out_as_precompile_queued_it_with_only_its_date_put_first():
    composed = compose(OutgoingEmail("news@acme.example", "Acme", "ann@example.org", "Hi", "<p>Hi</p>", "acme", "c1"))
    email = QueuedEmail("acme", "paid", {"emailAddress": "news@acme.example"}, "c1", "Hi", None, "ann@example.org")
    sqs, ses = FakeSqs([replace(email, mime=composed).to_json()]), FakeSes()
    d, _ = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")))
    assert d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000).sent == 1
    date, _, rest = ses.raws["ann@example.org"].partition(b"\r\n")
    assert rest == composed.encode("ascii")  # not composed again: the queued Message-ID is the one sent
    assert parsed(date + b"\r\n" + rest)["Date"].datetime.timestamp() == pytest.approx(time.time(), abs=5)


def test_an_email_queued_before_precompile_composed_it_is_composed_when_it_is_sent():
    sqs, ses = FakeSqs([queued("acme", "ann@example.org")]), FakeSes()
    d, _ = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")))
    assert d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000).sent == 1
    message = parsed(ses.raws["ann@example.org"])
    # the From name the registry gives an email queued without one
    assert (message["From"], message["To"], message["Subject"]) == ("Acme <news@acme.example>", "ann@example.org", "Hi")
    assert message["Date"] is not None and message["List-Unsubscribe"].startswith("<https://")
    assert html_of(message) == "<p>Hi</p>"


def test_free_queue_sends_every_tenants_email_on_the_platform_account_from_its_own_address():
    sqs = FakeSqs([queued("ann", "a@example.org", "free"), queued("bob", "b@example.org", "free")])
    ses = FakeSes()
    d, _ = drainer(sqs, ses, FakeTenants(tenant("ann"), tenant("bob")))
    d.drain("moonsend-test-free", remaining_ms=lambda: 60_000)
    assert sorted(ses.sent) == [
        (None, "news@ann.example", "a@example.org", True),
        (None, "news@bob.example", "b@example.org", True),
    ]


def test_outcomes_decide_what_happens_to_each_message():
    sqs = FakeSqs([queued("acme", f"{n}@example.org") for n in ("ok", "bad", "slow", "flaky")])
    ses = FakeSes(
        {
            "bad@example.org": SendFailed("MessageRejected: Email address is not verified."),
            "slow@example.org": SendThrottled("TooManyRequestsException"),
            "flaky@example.org": TransientSendError("ConnectionError"),
        }
    )
    d, stats = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")))
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert (result.sent, result.failed, result.throttled, result.retried) == (1, 1, 1, 1)
    assert sorted(sqs.deleted) == ["rh0", "rh1", "rh2"]  # sent, failed for good, and throttled (re-queued)
    assert [(d, a["moonsend-throttles"]["StringValue"]) for _b, d, a in sqs.requeued] == [(2, "1")]
    assert sqs.visibility == [("rh3", 2)]  # transient: back in 2 s, then 4, 8, ... (by receive count)
    assert (stats.total("sent"), stats.total("failed")) == (1, 1)
    assert stats.adds[-1][3] == "MessageRejected: Email address is not verified."


def test_a_send_whose_answer_was_lost_keeps_its_claim_so_no_copy_goes_before_ses_could_say():
    """SES may have accepted it: the copy comes back held by the claim (waiting for the Send event, or the
    claim's end), never sent again at once as a plain transient error would be."""
    from chalicelib.core.errors import SendOutcomeUnknown

    ledger = FakeLedger()
    sqs = FakeSqs([queued("acme", "lost@example.org")])
    ses = FakeSes({"lost@example.org": SendOutcomeUnknown("ReadTimeoutError: Read timeout on endpoint URL")})
    d, stats = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")), ledger=ledger)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.retried == 1 and sqs.deleted == [] and sqs.visibility == [("rh0", 2)]
    row = ledger.rows[("acme#c1", "lost@example.org")]
    assert row["claimed_until"] > time.time() + 600 and row.get("state") not in ("sent", "failed")
    assert stats.adds == []
    # The copy comes back: the claim holds it, so it is not sent a second time.
    again = FakeSqs([queued("acme", "lost@example.org")], receives=2)
    d2, _ = drainer(again, FakeSes(), FakeTenants(tenant("acme", "AKIAACME")), ledger=ledger)
    assert d2.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000).sent == 0


def test_exhausted_daily_quota_stops_the_drain_and_leaves_the_rest_queued():
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(30)])
    ses = FakeSes({"r0@example.org": QuotaExhausted("Daily message quota exceeded.")})
    d, _ = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")))
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.stopped_reason and "rh0" not in sqs.deleted
    assert len(sqs.waiting) > 0  # never received, still queued


def test_deadline_stops_receiving_finishes_what_started_and_asks_to_continue():
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(100)])
    ses = FakeSes()
    clock = itertools.count(start=60_000, step=-10_000)  # 60 s, 50 s, ... left
    d, _ = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")))
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: next(clock))
    assert result.unfinished and 0 < result.sent < 100
    assert len(sqs.deleted) == result.sent == len(ses.sent)  # nothing started was left undeleted
    assert len(sqs.waiting) == 100 - result.sent


def test_a_message_for_an_unknown_tenant_is_failed_with_a_reason_not_dropped():
    sqs = FakeSqs([queued("ghost", "a@example.org"), "{not json"])
    ledger = FakeLedger()
    d, stats = drainer(sqs, FakeSes(), FakeTenants(), ledger=ledger)
    result = d.drain("moonsend-test-t-ghost", remaining_ms=lambda: 60_000)
    assert result.failed == 1 and result.retried == 1
    assert ("ghost", "c1", {"failed": 1}, "tenant unknown: no sender settings registered") in stats.adds
    assert ledger.state("ghost", "c1", "a@example.org") == "failed"
    assert sqs.deleted == ["rh0"]  # the unreadable one stays, for the dead-letter queue
    # ... and is recorded, under `_unattributed` and the day, by its digest, with the reason.
    row = ledger.rows[(f"{UNATTRIBUTED}#{unattributed_day()}", message_key("{not json"))]
    assert row["state"] == "rejected" and row["reason"].startswith("unreadable queued message in moonsend-test-t-ghost")


def test_a_transient_error_on_the_last_try_records_the_failure_before_the_dead_letter_queue():
    ledger = FakeLedger()
    sqs = FakeSqs([queued("acme", "flaky@example.org")], receives=5)  # maxReceiveCount is 5
    ses = FakeSes({"flaky@example.org": TransientSendError("ServiceUnavailable: try later")})
    d, stats = drainer(sqs, ses, FakeTenants(tenant("acme", "AK")), ledger=ledger)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.dead_lettered == 1 and sqs.deleted == []  # not deleted: SQS moves it to the DLQ
    assert sqs.visibility == [("rh0", 0)]  # visible at once, so the move happens now
    assert ledger.state("acme", "c1", "flaky@example.org") == "failed"
    reason = ledger.rows[("acme#c1", "flaky@example.org")]["reason"]
    assert reason == "ServiceUnavailable: try later (gave up after 5 tries; message in the dead-letter queue)"
    assert stats.total("failed") == 1


def test_each_drain_reports_queue_lag_and_counts_as_one_emf_record(tmp_path, monkeypatch):
    import json
    import time

    metrics_file = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("MOONSEND_METRICS_FILE", str(metrics_file))
    enqueued = int(time.time() * 1000) - 4_000  # waited about four seconds on the queue
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(3)], sent_ms=enqueued)
    d, _ = drainer(sqs, FakeSes(), FakeTenants(tenant("acme", "AK")))
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.lag.count == 3 and 4_000 <= result.lag.max_ms < 60_000
    (line,) = metrics_file.read_text().splitlines()
    record = json.loads(line)
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "moonsend"
    assert directive["Dimensions"] == [["stage", "plan", "service"]]  # never the tenant: it would be a metric each
    assert record["Sent"] == [3.0] and record["Failed"] == [0.0] and record["tenant"] == "acme"
    assert 4_000 <= record["QueueLagMaxMs"][0] < 60_000


def test_duplicate_queue_messages_give_one_send_and_the_copies_are_dropped():
    sqs = FakeSqs([queued("acme", "a@example.org"), queued("acme", "A@example.org"), queued("acme", "b@example.org")])
    ses = FakeSes()
    ledger = FakeLedger()
    d, _ = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")), ledger=ledger)
    first = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert sorted(s[2].lower() for s in ses.sent) == ["a@example.org", "b@example.org"]
    assert first.sent == 2 and (first.duplicates + first.retried) == 1
    sqs.waiting = FakeSqs([queued("acme", "a@example.org")]).waiting  # redelivered after it was sent
    again = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert again.duplicates == 1 and again.sent == 0 and len(ses.sent) == 2
    assert ledger.state("acme", "c1", "a@example.org") == "sent"


def test_a_recipient_claimed_by_another_drainer_is_left_on_the_queue():
    ledger = FakeLedger()
    assert ledger.claim("acme", "c1", "a@example.org", 300)  # another drainer, alive
    sqs = FakeSqs([queued("acme", "a@example.org")])
    ses = FakeSes()
    d, _ = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")), ledger=ledger)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.retried == 1 and ses.sent == [] and sqs.deleted == []


def test_throttled_and_transient_sends_give_the_claim_back_for_the_retry():
    ledger = FakeLedger()
    sqs = FakeSqs([queued("acme", "slow@example.org")])
    d, _ = drainer(
        sqs, FakeSes({"slow@example.org": SendThrottled("x")}), FakeTenants(tenant("acme", "AK")), ledger=ledger
    )
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert not isinstance(ledger.claim("acme", "c1", "slow@example.org", 300), Entry)


def test_an_email_kept_in_s3_is_fetched_sent_and_its_object_deleted():
    from chalicelib.stores.payloads import PayloadStore

    s3 = FakeS3()
    store = PayloadStore(s3, "bucket", threshold_bytes=10)
    pointer = store.wrap("acme", "c1", queued("acme", "big@example.org"))
    sqs = FakeSqs([pointer])
    ses = FakeSes()
    d = parts.drainer(SETTINGS, sqs, ses, FakeTenants(tenant("acme", "AKIAACME")), payload_store=store)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.sent == 1 and ses.sent[0][2] == "big@example.org"
    assert s3.objects == {}


def test_a_recipient_suppressed_after_it_was_queued_is_recorded_and_not_sent():
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(12)])
    ses, ledger = FakeSes(), FakeLedger()
    suppressions = FakeSuppressions({"r3@example.org": "suppressed for this tenant: complaint (abuse)"})
    d = parts.drainer(SETTINGS, sqs, ses, FakeTenants(tenant("acme", "AK")), ledger=ledger, suppressions=suppressions)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert (result.sent, result.suppressed) == (11, 1)
    assert "r3@example.org" not in {s[2] for s in ses.sent}
    assert ledger.state("acme", "c1", "r3@example.org") == "suppressed"
    assert "rh3" in sqs.deleted  # recorded, so the message goes
    assert suppressions.lookups == 2  # one look-up per receive batch of 10, not one per email


def _paused(user, key=None):
    t = tenant(user, key)
    return Tenant(t.user_id, t.plan, t.sender, t.keys, (Pause(GUARD, "reputation guard: bounce rate 6.0% ..."),))


class TaggedSqs(FakeSqs):
    def __init__(self, bodies, owner):
        super().__init__(bodies)
        self.owner, self.receives = owner, 0

    def list_queue_tags(self, QueueUrl):
        return {"Tags": {"moonsend:tenant": self.owner}}

    def receive_message(self, QueueUrl, MaxNumberOfMessages, **kw):
        self.receives += 1
        return super().receive_message(QueueUrl, MaxNumberOfMessages, **kw)


def test_a_paused_tenants_queue_is_not_even_received_from():
    # Receiving would spend the messages' redelivery budget: the pause is checked first.
    sqs = TaggedSqs([queued("acme", f"r{i}@example.org") for i in range(5)], owner="acme")
    ses = FakeSes()
    d, _ = drainer(sqs, ses, FakeTenants(_paused("acme", "AK")))
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.stopped_reason.startswith("tenant paused: reputation guard")
    assert sqs.receives == 0 and ses.sent == [] and len(sqs.waiting) == 5


class RefusingSchedule(FakeSchedule):
    """The schedule store unreachable: paused email cannot be parked."""

    def put(self, **_kw):
        raise ConnectionError("DynamoDB unreachable")


def test_on_the_free_queue_a_paused_tenants_email_is_parked_and_the_others_go_out():
    sqs = FakeSqs([queued("careless", "a@example.org", "free"), queued("fine", "b@example.org", "free")])
    ses, ledger, store = FakeSes(), FakeLedger(), FakeSchedule()
    tenants = FakeTenants(_paused("careless"), tenant("fine"))
    d = parts.drainer(SETTINGS, sqs, ses, tenants, ledger=ledger, schedule=store)
    result = d.drain("moonsend-test-free", remaining_ms=lambda: 60_000)
    assert [s[2] for s in ses.sent] == ["b@example.org"] and result.stopped_reason is None
    assert [(b.bucket, b.campaign_id, store.emails(b)[0][0]) for b in store.batches] == [
        ("held#careless", "_held", "a@example.org")
    ]  # parked under the tenant until it is resumed: nothing recorded against it, nothing lost
    assert ledger.state("careless", "c1", "a@example.org") is None and len(sqs.deleted) == 2


def test_on_the_free_queue_a_paused_tenants_email_that_cannot_be_parked_stays_on_the_queue():
    sqs = FakeSqs([queued("careless", "a@example.org", "free"), queued("fine", "b@example.org", "free")])
    ses, ledger = FakeSes(), FakeLedger()
    tenants = FakeTenants(_paused("careless"), tenant("fine"))
    d = parts.drainer(SETTINGS, sqs, ses, tenants, ledger=ledger, schedule=RefusingSchedule())
    result = d.drain("moonsend-test-free", remaining_ms=lambda: 60_000)
    assert [s[2] for s in ses.sent] == ["b@example.org"] and result.stopped_reason is None
    assert [(delay, json.loads(body)["recipient"]["email"]) for body, delay, _a in sqs.requeued] == [
        (900, "a@example.org")
    ]  # back in 15 minutes as a fresh message: nothing recorded against it, nothing lost
    assert ledger.state("careless", "c1", "a@example.org") is None


class SwitchingControl:
    """The campaign's state flips to `state` once `after` emails have gone out."""

    def __init__(self, ses, after, state):
        self.ses, self.after, self.to = ses, after, state
        self.current = None

    def state(self, user_id, campaign_id, fresh=False):
        return self.to if len(self.ses.sent) >= self.after else self.current


def test_a_cancel_mid_drain_stops_every_send_not_yet_on_its_way_and_records_the_rest():
    from chalicelib.send.drainer import SEND_WORKERS

    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(60)])
    ses, ledger, stats = FakeSes(), FakeLedger(), FakeStats()
    control = SwitchingControl(ses, after=5, state="cancelled")
    d = parts.drainer(
        SETTINGS, sqs, ses, FakeTenants(tenant("acme", "AK", rate=20.0)), stats=stats, ledger=ledger, control=control
    )
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    # The check sits after the rate slot, right before SES: only sends already past it go out.
    assert 5 <= len(ses.sent) <= 5 + 1 and len(ses.sent) < SEND_WORKERS
    assert result.cancelled == 60 - len(ses.sent) and len(sqs.deleted) == 60  # recorded, so removed
    states = {ledger.state("acme", "c1", f"r{i}@example.org") for i in range(60)}
    assert states == {"sent", "cancelled"} and stats.total("cancelled") == result.cancelled


def test_a_free_email_whose_from_an_operator_gave_to_another_tenant_is_failed_with_why_and_not_sent():
    from tests.fakes.senders import FakeFreeAddresses

    addresses = FakeFreeAddresses()
    addresses.owners["news@careless.example"] = "rightful"  # assigned away after the email was accepted
    addresses.owners["news@fine.example"] = "fine"
    sqs = FakeSqs([queued("careless", "a@example.org", "free"), queued("fine", "b@example.org", "free")])
    ses, ledger = FakeSes(), FakeLedger()
    tenants = FakeTenants(tenant("careless"), tenant("fine"))
    d = parts.drainer(SETTINGS, sqs, ses, tenants, ledger=ledger, addresses=addresses)
    result = d.drain("moonsend-test-free", remaining_ms=lambda: 60_000)
    assert [s[2] for s in ses.sent] == ["b@example.org"] and result.failed == 1
    entry = ledger.rows[ledger._key("careless", "c1", "a@example.org")]
    assert entry["state"] == "failed"
    assert "From address news@careless.example is no longer this tenant's but another tenant's" in entry["reason"]
    assert "assign-from" in entry["reason"] and len(sqs.deleted) == 2


def test_a_free_email_whose_from_claim_was_dropped_is_failed_and_a_read_that_fails_gives_it_back():
    from tests.fakes.senders import FakeFreeAddresses

    class Unreadable(FakeFreeAddresses):
        def owner(self, address):
            raise ConnectionError("throttled")

    sqs = FakeSqs([queued("careless", "a@example.org", "free")])
    ses, ledger = FakeSes(), FakeLedger()
    d = parts.drainer(SETTINGS, sqs, ses, FakeTenants(tenant("careless")), ledger=ledger, addresses=Unreadable())
    d.drain("moonsend-test-free", remaining_ms=lambda: 60_000)
    assert ses.sent == [] and ledger.state("careless", "c1", "a@example.org") is None  # given back: tried later
    assert [rh for rh, _ in sqs.visibility] == ["rh0"] and sqs.deleted == []  # backed off on the queue

    sqs = FakeSqs([queued("careless", "a@example.org", "free")])
    d = parts.drainer(SETTINGS, sqs, ses, FakeTenants(tenant("careless")), ledger=ledger, addresses=FakeFreeAddresses())
    d.drain("moonsend-test-free", remaining_ms=lambda: 60_000)
    entry = ledger.rows[ledger._key("careless", "c1", "a@example.org")]
    assert ses.sent == [] and entry["state"] == "failed" and "claimed by nobody" in entry["reason"]


class PausingTenants(FakeTenants):
    """The tenant's pause is written (by another container) once `after` emails have gone out: `get` still
    answers the tenant as cached before it; only `pause_of` reads the pause."""

    def __init__(self, ses, after, *tenants):
        super().__init__(*tenants)
        self.ses, self.after = ses, after

    def pause_of(self, user_id, *, fresh=False):
        return "paused by an operator: audit" if len(self.ses.sent) >= self.after else None


def test_a_tenants_pause_mid_drain_stops_every_send_not_yet_on_its_way_and_parks_the_rest():
    from chalicelib.send.drainer import SEND_WORKERS

    sqs = FakeSqs([queued("acme", f"r{i}@example.org", "free") for i in range(60)])
    ses, ledger, store = FakeSes(), FakeLedger(), FakeSchedule()
    tenants = PausingTenants(ses, 5, tenant("acme"))
    d = parts.drainer(SETTINGS, sqs, ses, tenants, ledger=ledger, schedule=store)
    d.drain("moonsend-test-free", remaining_ms=lambda: 60_000)
    # Asked after the rate slot, right before SES, as a campaign's cancel is: only sends past it go out.
    assert 5 <= len(ses.sent) <= 5 + 1 and len(ses.sent) < SEND_WORKERS
    parked = sum(len(store.emails(b)) for b in store.batches)
    assert parked == 60 - len(ses.sent) and len(sqs.deleted) == 60  # parked under the tenant: nothing lost
    assert {ledger.state("acme", "c1", f"r{i}@example.org") for i in range(60)} == {"sent", None}


@pytest.mark.parametrize("parking", ["parked", "store unreachable"])
def test_a_paused_campaign_is_kept_and_after_resume_finishes_with_no_duplicate(parking):
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(20)])
    ses, ledger = FakeSes(), FakeLedger()
    store = FakeSchedule() if parking == "parked" else RefusingSchedule()
    control = SwitchingControl(ses, after=4, state="paused")
    tenants = FakeTenants(tenant("acme", "AK", rate=20.0))
    d = parts.drainer(SETTINGS, sqs, ses, tenants, ledger=ledger, control=control, schedule=store)
    first = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    kept = [body for body, delay, _a in sqs.requeued if delay == 900]  # on the queue, when it cannot be parked
    kept += [body for b in store.batches for _address, body in store.emails(b)]
    assert 4 <= len(ses.sent) <= 5 and len(kept) == 20 - len(ses.sent) and first.stopped_reason is None

    control.after = 10**9  # resumed; the kept copies come back (unparked, or as SQS would after their delay)
    sqs.waiting = FakeSqs(kept).waiting
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert sorted(s[2] for s in ses.sent) == sorted(f"r{i}@example.org" for i in range(20))  # each once


def test_an_email_past_its_campaigns_deadline_is_recorded_expired_and_not_sent():
    late = QueuedEmail("acme", "paid", {}, "c1", "Hi", "<p>Hi</p>", "late@example.org", deadline_ms=1).to_json()
    sqs = FakeSqs([late, queued("acme", "ok@example.org")])
    ses, ledger = FakeSes(), FakeLedger()
    d, stats = drainer(sqs, ses, FakeTenants(tenant("acme", "AK", rate=50.0)), ledger=ledger)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert [s[2] for s in ses.sent] == ["ok@example.org"] and result.expired == 1 and len(sqs.deleted) == 2
    row = ledger.rows[("acme#c1", "late@example.org")]
    assert row["state"] == "expired" and "not sent by its deadline 1970-01-01T00:00:00.001Z" in row["reason"]
    assert stats.total("expired") == 1


class AlwaysPaused:
    def state(self, user_id, campaign_id, fresh=False):
        return "paused"


class ResumedWhileHolding:
    """Paused as the sender's cached read sees it; resumed by the time it reads again, uncached."""

    def state(self, user_id, campaign_id, fresh=False):
        return None if fresh else "paused"


def test_paused_email_leaves_the_queue_for_the_held_partition_without_a_delayed_copy():
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(12)])
    store = FakeSchedule()
    control = AlwaysPaused()
    d = parts.drainer(
        SETTINGS, sqs, FakeSes(), FakeTenants(tenant("acme", "AK", 50.0)), control=control, schedule=store
    )
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    parked = [e for b in store.batches for e, _body in store.emails(b)]
    assert sorted(parked) == sorted(f"r{i}@example.org" for i in range(12))
    assert {b.bucket for b in store.batches} == {"held#acme#c1"} and not store.removed
    assert len(sqs.deleted) == 12 and sqs.requeued == [] and sqs.batched == []  # no copy left circling


def test_email_held_just_as_its_campaign_is_resumed_goes_straight_back_on_the_queue():
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(5)])
    store = FakeSchedule()
    d = parts.drainer(
        SETTINGS, sqs, FakeSes(), FakeTenants(tenant("acme", "AK", 50.0)), control=ResumedWhileHolding(), schedule=store
    )
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert store.removed == store.batches and store.batches  # the resume's release may have run before it
    assert sorted(json.loads(b)["recipient"]["email"] for b in sqs.batched) == [f"r{i}@example.org" for i in range(5)]


@pytest.mark.parametrize(
    ("claimed_s_ago", "expires_in_s", "delays"),
    [(1, 1800, {32}), (400, 1400, {900}), (1700, 100, {100, 101})],
)
def test_a_copy_held_by_a_live_claim_on_its_last_receive_goes_back_fresh_instead_of_to_the_dead_letters(
    claimed_s_ago, expires_in_s, delays
):
    """A sender at work (claimed 1 s ago): back soon. A dead one's claim: back when it expires, at most
    SQS's 15 minutes of delay."""
    ledger = FakeLedger()
    claim = ledger.claim("acme", "c1", "a@example.org", 1800)
    ledger.rows[(claim.pk, claim.rcpt)]["updated_at"] = int((time.time() - claimed_s_ago) * 1000)
    ledger.rows[(claim.pk, claim.rcpt)]["claimed_until"] = time.time() + expires_in_s
    sqs = FakeSqs([queued("acme", "a@example.org")], receives=4)  # one receive left before the DLQ
    ses = FakeSes()
    d, _ = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")), ledger=ledger)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.retried == 1 and ses.sent == [] and sqs.visibility == []
    assert [json.loads(b)["recipient"]["email"] for b, _d, _a in sqs.requeued] == ["a@example.org"]
    assert sqs.requeued[0][1] in delays
    assert sqs.deleted == ["rh0"]


def test_backing_off_a_copy_whose_twin_was_already_deleted_does_not_stop_the_drain():
    from botocore.exceptions import ClientError

    class TwinDeleted(FakeSqs):
        def change_message_visibility(self, QueueUrl, ReceiptHandle, VisibilityTimeout):
            raise ClientError(
                {"Error": {"Code": "ReceiptHandleIsInvalid", "Message": "gone"}}, "ChangeMessageVisibility"
            )

    ledger = FakeLedger()
    assert ledger.claim("acme", "c1", "a@example.org", 1800)
    sqs = TwinDeleted([queued("acme", "a@example.org"), queued("acme", "b@example.org")])
    ses = FakeSes()
    d, _ = drainer(sqs, ses, FakeTenants(tenant("acme", "AKIAACME")), ledger=ledger)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.retried == 1 and [to for *_x, to, _p in ses.sent] == ["b@example.org"]


def test_claim_hold_is_configurable_but_never_shorter_than_twice_the_visibility_timeout():
    from chalicelib.core.config import Settings
    from chalicelib.core.resources import SEND_VISIBILITY_TIMEOUT_S

    assert Settings.from_env({}).claim_hold_s == 1800
    assert Settings.from_env({"MOONSEND_CLAIM_HOLD_S": "900"}).claim_hold_s == 900
    # shorter, a copy redelivered after the visibility timeout could be sent before SES's Send event
    assert Settings.from_env({"MOONSEND_CLAIM_HOLD_S": "60"}).claim_hold_s == 2 * SEND_VISIBILITY_TIMEOUT_S


def _versioned(user, to, version, address="news@acme.example"):
    sender = {"emailAddress": address, "fromName": "Acme", "region": "us-east-1", "ratePerSecond": 50}
    if version is not None:
        sender["keyVersion"] = version
    return QueuedEmail(user, "paid", sender, "c1", "Hi", "<p>Hi</p>", to).to_json()


def _rotated_and_moved(user):
    """acme: keys v1 and v2 in account 1 (a rotation), then v3 in account 3 (an operator's move)."""
    keys = (
        KeyVersion(1, "AK1", "s1", "111111111111"),
        KeyVersion(2, "AK2", "s2", "111111111111"),
        KeyVersion(3, "AK3", "s3", "333333333333"),
    )
    # What the registry says now (another From, the free plan) must not matter to email already queued.
    return Tenant(user, "free", Sender("later@acme.example", "Later", "us-east-1", "AK3", "s3", 1.0), keys)


def test_each_email_goes_out_with_its_campaigns_from_and_the_newest_keys_of_its_key_versions_account():
    sqs = FakeSqs([_versioned("acme", "a@example.org", 1), _versioned("acme", "b@example.org", 3, "new@acme.example")])
    ses = FakeSes()
    d, _ = drainer(sqs, ses, FakeTenants(_rotated_and_moved("acme")))
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert sorted(ses.sent) == [
        ("AK2", "news@acme.example", "a@example.org", False),  # v1's account, rotated to v2: never AK3's account
        ("AK3", "new@acme.example", "b@example.org", False),
    ]


def test_email_on_a_tenants_queue_without_keys_fails_with_why_and_never_goes_through_the_platform():
    ledger = FakeLedger()
    sqs = FakeSqs([_versioned("acme", "a@example.org", 7)])  # a key version the tenant no longer has
    ses = FakeSes()
    d, stats = drainer(sqs, ses, FakeTenants(_rotated_and_moved("acme")), ledger=ledger)
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert ses.sent == [] and stats.total("failed") == 1
    row = ledger.rows[("acme#c1", "a@example.org")]
    assert (row["state"], row["reason"]) == ("failed", NO_KEYS_REASON)


class RotatingTenants(FakeTenants):
    """A container whose cached read predates a rotation: the fresh read has the account's new keys."""

    def __init__(self, cached, fresh):
        super().__init__(cached)
        self.fresh = fresh

    def get(self, user_id, fresh=False):
        return self.fresh if fresh else super().get(user_id)


def test_keys_aws_refuses_after_a_rotation_are_retried_with_the_new_keys_not_failed():
    from chalicelib.core.errors import KeysRejected

    ledger = FakeLedger()
    old = KeyVersion(1, "AKOLD", "s1", "111111111111")
    new = KeyVersion(2, "AKNEW", "s2", "111111111111")
    sender = Sender("news@acme.example", "Acme", "us-east-1", "AKOLD", "s1", 50.0)
    cached = Tenant("acme", "paid", sender, (old,))
    rotated = Tenant("acme", "paid", sender, (old, new))

    class RefusesOldKeys(FakeSes):
        def send(self, sender, to, raw, platform=False, tenant=None):
            if sender.api_key == "AKOLD":
                raise KeysRejected("InvalidClientTokenId: The security token included in the request is invalid.")
            return super().send(sender, to, raw, platform)

    ses = RefusesOldKeys()
    d, stats = drainer(
        FakeSqs([_versioned("acme", "a@example.org", 1)]), ses, RotatingTenants(cached, rotated), ledger=ledger
    )
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert (result.sent, result.failed) == (0, 0) and stats.total("failed") == 0  # back on the queue, not failed
    d2, _ = drainer(
        FakeSqs([_versioned("acme", "a@example.org", 1)]), ses, RotatingTenants(rotated, rotated), ledger=ledger
    )
    d2.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert ses.sent == [("AKNEW", "news@acme.example", "a@example.org", False)]


def test_held_email_over_the_queues_size_goes_back_through_s3_when_its_campaign_is_resumed():
    # The finding: email held and put straight back was sent to the queue whole, so one over the offload
    # threshold was refused by SQS and stayed held for good.
    from chalicelib.stores.payloads import PayloadStore

    s3 = FakeS3()
    payloads = PayloadStore(s3, "bucket", threshold_bytes=2000)
    big = QueuedEmail(
        "acme", "paid", {"emailAddress": "news@acme.example"}, "c1", "Hi", "<p>" + "x" * 5000 + "</p>", "a@example.org"
    )
    sqs = FakeSqs([big.to_json()])
    d = parts.drainer(
        SETTINGS, sqs, FakeSes(), FakeTenants(tenant("acme", "AK", 50.0)), payload_store=payloads,
        control=ResumedWhileHolding(), schedule=FakeSchedule(),
    )  # fmt: skip
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert len(sqs.batched) == 1 and PayloadStore.pointer(sqs.batched[0]) is not None
    assert payloads.unwrap(sqs.batched[0]) == big.to_json()


class CannotCreateQueues:
    """TenantQueues for a sender: its role may not create queues or alarms (infra/iam.py), as on AWS."""

    def ensure(self, name, user_id):
        raise AssertionError("the sender must never create a queue (AccessDenied on AWS)")


def test_email_parked_as_its_campaign_is_resumed_goes_back_to_the_queue_it_came_from_without_creating_one():
    # The finding: the put-back went through the queue registry, which creates a queue (and its alarm) in
    # a container that has not cached its URL; the sender's role may do neither, and the drain crashed.
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(3)])
    store = FakeSchedule()
    d = parts.drainer(
        SETTINGS, sqs, FakeSes(), FakeTenants(tenant("acme", "AK", 50.0)), control=ResumedWhileHolding(),
        schedule=store, queues=CannotCreateQueues(),
    )  # fmt: skip
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.retried == 3 and len(sqs.deleted) == 3 and store.removed == store.batches
    assert {url for url, _entries in sqs.batches} == {"https://sqs/moonsend-test-t-acme"}


def test_a_cancel_is_counted_but_is_not_the_campaigns_last_error():
    sqs = FakeSqs([queued("acme", "a@example.org")])
    stats = FakeStats()
    control = SwitchingControl(FakeSes(), after=0, state="cancelled")
    d = parts.drainer(SETTINGS, sqs, FakeSes(), FakeTenants(tenant("acme", "AK", 50.0)), stats=stats, control=control)
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert stats.total("cancelled") == 1 and [e for _u, _c, _d, e in stats.adds] == [None]


def test_a_drain_that_met_only_another_copys_email_names_no_tenant_in_its_metrics():
    ledger = FakeLedger()
    ledger.claim("acme", "c1", "a@example.org", 600)  # another sender is at it
    d, _ = drainer(
        FakeSqs([queued("acme", "a@example.org")]), FakeSes(), FakeTenants(tenant("acme", "AK")), ledger=ledger
    )
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.retried == 1 and result.tenants == set()


class TricklingSqs(FakeSqs):
    """Messages arrive one at a time, `per_s` a second (a queue filled as fast as it is drained)."""

    def __init__(self, bodies, per_s):
        super().__init__(bodies)
        self.arrived_at = [time.monotonic() + i / per_s for i in range(len(self.waiting))]
        self.receives: list[int] = []

    def receive_message(self, QueueUrl, MaxNumberOfMessages, WaitTimeSeconds=0, **kw):
        if self.arrived_at and WaitTimeSeconds:  # a long poll answers when the next message arrives
            time.sleep(max(0.0, min(WaitTimeSeconds, self.arrived_at[0] - time.monotonic())))
        now = time.monotonic()
        ready = sum(1 for t in self.arrived_at[: len(self.waiting)] if t <= now)
        got = super().receive_message(QueueUrl, min(MaxNumberOfMessages, ready), **kw) if ready else {}
        self.arrived_at = self.arrived_at[len(got.get("Messages", [])) :]
        self.receives.append(len(got.get("Messages", [])))
        return got


class SlowSes(FakeSes):
    """SES answering after 150 ms: several sends are always in flight at 40 a second."""

    def send(self, sender, to, raw, platform=False, tenant=None):
        time.sleep(0.15)
        return super().send(sender, to, raw, platform)


def test_while_email_is_in_flight_a_queue_filled_as_fast_as_it_drains_is_received_in_batches():
    n, rate = 60, 40.0
    sqs = TricklingSqs([queued("acme", f"r{i}@example.org") for i in range(n)], per_s=rate)
    settings = Settings.from_env({**_TEST_ENV, "MOONSEND_LONG_POLL_SECONDS": "1"})
    d = parts.drainer(settings, sqs, SlowSes(), FakeTenants(tenant("acme", "AKIAACME", rate=rate)), stats=FakeStats())
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.sent == n
    # Asking again after each finished send took one ReceiveMessage per email; now about one per ten sent.
    assert len(sqs.receives) <= n / 4, sqs.receives


def test_a_full_queue_is_received_ten_at_a_time():
    n = 95
    sqs = TricklingSqs([queued("acme", f"r{i}@example.org") for i in range(n)], per_s=1e9)
    d, _ = drainer(sqs, FakeSes(), FakeTenants(tenant("acme", "AKIAACME", rate=200.0)))
    assert d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000).sent == n
    assert [r for r in sqs.receives if r] == [10] * 9 + [5]


def test_what_a_slow_drain_holds_when_its_deadline_comes_is_sent_within_half_its_margin():
    """At 2 a second with a 4 s margin a drain holds at most 4 messages (before, 20: 10 s of sends, and
    Lambda would have stopped it mid-send at its timeout)."""
    rate, margin_ms = 2.0, 4_000
    settings = Settings.from_env({**_TEST_ENV, "MOONSEND_DEADLINE_MARGIN_MS": str(margin_ms)})
    sqs = FakeSqs([queued("acme", f"r{i}@example.org") for i in range(40)])
    ses = FakeSes()
    d = parts.drainer(settings, sqs, ses, FakeTenants(tenant("acme", "AKIAACME", rate=rate)), stats=FakeStats())
    sent_at_deadline: list[int] = []

    def remaining_ms() -> int:
        if len(ses.sent) < 12:  # past its first receive, made before it knew the rate (taken as 10/s)
            return 60_000
        sent_at_deadline[:] = sent_at_deadline or [len(ses.sent)]
        return margin_ms - 1_000

    result = d.drain("moonsend-test-t-acme", remaining_ms=remaining_ms)
    assert result.unfinished
    assert result.sent - sent_at_deadline[0] <= rate * margin_ms / 2000
    assert len(sqs.deleted) == result.sent  # everything it held was sent and deleted before it ended


class UnreadableSesTenants(FakeSesTenants):
    def status(self, user_id, region, max_age_s=60.0):
        raise ConnectionError("SES unreachable")


class UnsetSesTenants(FakeSesTenants):
    def ensure(self, user_id, from_address, region):
        raise ConnectionError("SES unreachable")


def _ses_refuses(to):
    return FakeSes(outcomes={to: TenantSendingPaused("SendingPausedException: Sending is paused for tenant")})


def _free_drain(ses, ses_tenants, reputation=None):
    sqs = FakeSqs([queued("careless", "a@example.org", "free"), queued("fine", "b@example.org", "free")])
    ledger, store, tenants = FakeLedger(), FakeSchedule(), FakeTenants(tenant("careless"), tenant("fine"))
    d = parts.drainer(
        SETTINGS, sqs, ses, tenants, ledger=ledger, schedule=store, ses_tenants=ses_tenants, reputation=reputation
    )
    return d.drain("moonsend-test-free", remaining_ms=lambda: 60_000), tenants, ledger, store


def test_free_plan_email_goes_out_through_its_tenants_ses_tenant_in_its_region():
    ses, ses_tenants = FakeSes(), FakeSesTenants()
    _free_drain(ses, ses_tenants)
    assert sorted(ses.tenants) == ["ses-careless", "ses-fine"]
    assert sorted(ses_tenants.ensured) == [
        ("careless", "news@careless.example", "us-east-1"),
        ("fine", "news@fine.example", "us-east-1"),
    ]


def test_a_tenant_ses_paused_is_paused_here_with_ses_cause_its_email_held_and_the_others_sent():
    paused = TenantStatus("ses-careless", "DISABLED", "The bounce rate exceeded 10%", "arn:standard")
    result, tenants, ledger, store = _free_drain(_ses_refuses("a@example.org"), FakeSesTenants({"careless": paused}))
    assert tenants.paused_now == [("careless", paused.reason)] and result.stopped_reason is None
    assert tenants.pause_owners == [SES]  # SES's pause: lifted once SES lifts its own
    assert result.sent == 1 and ledger.state("careless", "c1", "a@example.org") is None  # held, never failed
    assert [(b.bucket, store.emails(b)[0][0]) for b in store.batches] == [("held#careless", "a@example.org")]


def test_a_refusal_while_the_whole_account_is_paused_stops_the_drain_and_pauses_no_tenant():
    ses = _ses_refuses("a@example.org")
    ses.account_sending = False
    enabled = TenantStatus("ses-careless", "ENABLED", None, "arn:standard")
    result, tenants, ledger, _ = _free_drain(ses, FakeSesTenants({"careless": enabled}))
    assert tenants.paused_now == [] and result.stopped_reason == "daily quota exhausted or sending paused"
    assert ledger.state("careless", "c1", "a@example.org") is None


def test_a_refusal_whose_ses_status_cannot_be_read_holds_only_that_tenant_with_ses_words():
    result, tenants, ledger, _ = _free_drain(_ses_refuses("a@example.org"), UnreadableSesTenants())
    ((user, reason),) = tenants.paused_now
    assert user == "careless" and reason.startswith("SES refused sending for SES tenant ses-careless: SendingPaused")
    assert result.stopped_reason is None and result.sent == 1
    assert ledger.state("careless", "c1", "a@example.org") is None


def test_email_whose_ses_tenant_cannot_be_set_up_is_retried_and_not_counted_as_sent():
    reputation = FakeReputation()
    result, tenants, ledger, _ = _free_drain(FakeSes(), UnsetSesTenants(), reputation)
    assert result.sent == 0 and result.retried == 2 and tenants.paused_now == []
    assert ledger.state("careless", "c1", "a@example.org") is None
    assert all(n >= 0 for _u, n in reputation.writes)  # nothing given back that was not taken


class _ThrottledKms(FakeTenants):
    """The registry, with KMS's Decrypt of a tenant's secret throttled past the SDK's retries."""

    def secret_of(self, user_id, keys):
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "Decrypt")


class _ThrottledTable(FakeTenants):
    """The registry, with DynamoDB's read of the tenant throttled past the SDK's retries."""

    def get(self, user_id, fresh=False):
        from botocore.exceptions import ClientError

        raise ClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"}}, "GetItem"
        )


@pytest.mark.parametrize("registry", [_ThrottledKms, _ThrottledTable])
def test_a_dependency_throttled_before_the_send_gives_the_claims_back_and_retries_later(registry):
    """The review's case: a throttled KMS Decrypt escaped the drain, the invocation failed, and every email it
    had claimed waited out the claim (30 minutes on AWS) though the docs said "queued for the next attempt"."""
    ledger = FakeLedger()
    to = ["a@example.org", "b@example.org"]
    sqs, ses = FakeSqs([queued("acme", t) for t in to]), FakeSes()
    d, _stats = drainer(sqs, ses, registry(tenant("acme", "AK")), ledger=ledger)
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)  # no exception: the drain ends as usual
    assert ses.sent == [] and sqs.deleted == []
    assert {rh for rh, _ in sqs.visibility} == {"rh0", "rh1"}  # backed off on the queue, tried again later
    for address in to:  # given back: the next try claims them at once, not after the claim's 30 minutes
        assert not isinstance(ledger.claim("acme", "c1", address, 300), Entry)


class _ThrottledFinish(FakeLedger):
    """The ledger, with its write of a recipient's outcome throttled past the SDK's retries."""

    def finish(self, claim, state, *, message_id=None, reason=None):
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "UpdateItem")


def test_an_outcome_decided_before_the_send_that_cannot_be_written_gives_the_claim_back_and_retries():
    """Nothing went to SES (a tenant the registry does not know is failed at the gate): when that failure's
    write is throttled, the claim is given back and the message backed off, as for a read that fails."""
    ledger = _ThrottledFinish()
    sqs, ses = FakeSqs([queued("ghost", "a@example.org")]), FakeSes()
    d, _stats = drainer(sqs, ses, FakeTenants(), ledger=ledger)
    result = d.drain("moonsend-test-t-ghost", remaining_ms=lambda: 60_000)  # no exception
    assert (result.failed, result.retried) == (0, 1)
    assert ses.sent == [] and sqs.deleted == [] and [rh for rh, _ in sqs.visibility] == ["rh0"]
    assert not isinstance(ledger.claim("ghost", "c1", "a@example.org", 300), Entry)  # given back


def test_an_outcome_decided_before_ses_was_asked_anywhere_that_cannot_be_written_is_retried_not_failed():
    """No keys for the email's version (decided after the gate, before the send): the failure's write throttled
    gives the claim back and backs the message off; the drain goes on."""
    ledger = _ThrottledFinish()
    sqs, ses = FakeSqs([_versioned("acme", "a@example.org", 7)]), FakeSes()
    d, _stats = drainer(sqs, ses, FakeTenants(_rotated_and_moved("acme")), ledger=ledger)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert (result.failed, result.retried) == (0, 1) and ses.sent == []
    assert not isinstance(ledger.claim("acme", "c1", "a@example.org", 300), Entry)  # given back


@pytest.mark.parametrize("refused", [None, SendFailed("MessageRejected: bad")])
def test_an_outcome_after_ses_was_asked_that_cannot_be_written_keeps_the_claim_and_fails_the_drain(refused):
    """Sent (or refused for good), then its write throttled: the claim is kept, never given back, so no copy
    goes out before SES's Send event has had the claim's lifetime to record it (a duplicate otherwise)."""
    from chalicelib.send.executor import LedgerNotWritten

    ledger = _ThrottledFinish()
    sqs = FakeSqs([queued("acme", "a@example.org")])
    ses = FakeSes({"a@example.org": refused} if refused else None)
    d, _stats = drainer(sqs, ses, FakeTenants(tenant("acme", "AK")), ledger=ledger)
    with pytest.raises(LedgerNotWritten, match="ThrottlingException"):
        d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert len(ses.sent) == (0 if refused else 1) and sqs.deleted == []
    assert isinstance(ledger.claim("acme", "c1", "a@example.org", 300), Entry)  # still this drain's claim


def test_a_throttled_delete_fails_no_drain_its_email_recorded_and_its_counts_kept():
    from botocore.exceptions import ClientError

    class ThrottledDeletes(FakeSqs):
        def delete_message_batch(self, QueueUrl, Entries):
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "DeleteMessageBatch"
            )

    sqs, ses, ledger, stats = (
        ThrottledDeletes([queued("acme", f"r{i}@example.org") for i in range(12)]),
        FakeSes(),
        FakeLedger(),
        FakeStats(),
    )
    d = parts.drainer(SETTINGS, sqs, ses, FakeTenants(tenant("acme", "AK")), ledger=ledger, stats=stats)
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert result.sent == 12 and len(ses.sent) == 12 and stats.total("sent") == 12
    # Not deleted: each comes back after its visibility timeout, is found sent, and is deleted then.
    assert {ledger.state("acme", "c1", f"r{i}@example.org") for i in range(12)} == {"sent"}


def test_a_drain_failed_by_a_throttled_receive_first_finishes_and_deletes_what_it_had_in_flight():
    from botocore.exceptions import ClientError

    class ThrottledSecondReceive(FakeSqs):
        receives = 0

        def receive_message(self, QueueUrl, MaxNumberOfMessages, **kw):
            self.receives += 1
            if self.receives > 1:
                raise ClientError(
                    {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "ReceiveMessage"
                )
            return super().receive_message(QueueUrl, MaxNumberOfMessages, **kw)

    sqs, ses, ledger = (
        ThrottledSecondReceive([queued("acme", f"r{i}@example.org") for i in range(5)]),
        FakeSes(),
        FakeLedger(),
    )
    d = parts.drainer(SETTINGS, sqs, ses, FakeTenants(tenant("acme", "AK")), ledger=ledger)
    with pytest.raises(ClientError):
        d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    # The error is the chain's to handle (it hands the drain on); the email already in flight was sent,
    # recorded and its messages deleted, not left to come back after their visibility timeout.
    assert len(ses.sent) == 5 and sorted(sqs.deleted) == sorted(f"rh{i}" for i in range(5))


class DelayingSqs(FakeSqs):
    """A copy sent back with a delay is received again once it is due, as SQS's DelaySeconds does."""

    def __init__(self, bodies):
        super().__init__(bodies)
        self.due: list[tuple[float, dict]] = []
        self.receives = 0

    def send_message(self, QueueUrl, MessageBody, DelaySeconds, MessageAttributes=None):
        super().send_message(QueueUrl, MessageBody, DelaySeconds, MessageAttributes)
        n = len(self.requeued)
        copy = {"MessageId": f"copy{n}", "ReceiptHandle": f"rh-copy{n}", "Body": MessageBody}
        copy |= {"Attributes": {"ApproximateReceiveCount": "1"}, "MessageAttributes": MessageAttributes or {}}
        self.due.append((time.monotonic() + DelaySeconds, copy))

    def receive_message(self, QueueUrl, MaxNumberOfMessages, **kw):
        self.receives += 1
        now = time.monotonic()
        self.waiting += [m for at, m in self.due if at <= now]
        self.due = [(at, m) for at, m in self.due if at > now]
        if not self.waiting and kw.get("WaitTimeSeconds"):
            time.sleep(0.05)  # a long poll's wait, shortened
        return super().receive_message(QueueUrl, MaxNumberOfMessages)


class ThrottledOnce(FakeSes):
    def send(self, sender, to, raw_mime, platform=False, tenant=None):
        if self.outcomes.pop(to, None):
            raise SendThrottled("Maximum sending rate exceeded.")
        return super().send(sender, to, raw_mime, platform, tenant)


def test_a_drain_stays_for_the_email_it_put_back_and_sends_it_when_it_is_due():
    """With no not-empty alarm, nothing else would start a drain for a throttled copy before the sweeper's
    next minute: the drain that put it back waits for it (a copy's first delay is 2 s) and sends it."""
    sqs = DelayingSqs([queued("acme", "a@example.org"), queued("acme", "b@example.org")])
    ses = ThrottledOnce({"b@example.org": SendThrottled("x")})
    settings = replace(SETTINGS, put_back_stay_s=60.0)
    d = parts.drainer(settings, sqs, ses, FakeTenants(tenant("acme", "AK")), stats=FakeStats())
    started = time.monotonic()
    result = d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert sorted(to for _k, _f, to, _p in ses.sent) == ["a@example.org", "b@example.org"]
    assert [delay for _b, delay, _a in sqs.requeued] == [2]
    assert time.monotonic() - started >= 2 and not result.unfinished


def test_a_drain_does_not_stay_for_email_due_back_later_than_its_stay():
    settings = replace(SETTINGS, put_back_stay_s=1.0)
    sqs = DelayingSqs([queued("acme", "b@example.org")])
    ses = ThrottledOnce({"b@example.org": SendThrottled("x")})
    d = parts.drainer(settings, sqs, ses, FakeTenants(tenant("acme", "AK")), stats=FakeStats())
    started = time.monotonic()
    d.drain("moonsend-test-t-acme", remaining_ms=lambda: 60_000)
    assert ses.sent == [] and len(sqs.due) == 1  # left for the sweeper's minute
    assert time.monotonic() - started < 1.5


class ThrottledSendMessage(FakeSqs):
    """SendMessage throttled past the SDK's retries: putting a copy back raises."""

    def send_message(self, QueueUrl, MessageBody, DelaySeconds, MessageAttributes=None):
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "SendMessage")


def test_decisions_collected_with_one_whose_action_raises_are_left_to_act_on_not_lost():
    """Decisions are collected several at a time. When one's action raises (putting a throttled copy back,
    throttled past the SDK's retries), the ones collected with it go back on the finished queue: dropped,
    `_finish_inflight` waited for them until the Lambda was killed, with no wind-down and no hand-on."""
    from concurrent.futures import Future

    from chalicelib.send.drain_report import DrainResult
    from chalicelib.send.drainer import _Drain
    from chalicelib.send.outcomes import Decision, Outcome
    from chalicelib.send.sides import QueueRef

    sqs = ThrottledSendMessage([])
    d, _ = drainer(sqs, FakeSes(), FakeTenants(tenant("acme", "AK")))
    drain = _Drain(QueueRef("q", "https://sqs/q", 0, False), DrainResult("q"))
    for outcome in (Outcome.THROTTLED, Outcome.DUPLICATE, Outcome.DUPLICATE):
        future: Future[Decision] = Future()
        future.set_result(Decision(outcome))
        drain.inflight[future] = {"ReceiptHandle": f"rh-{len(drain.inflight)}", "Body": queued("acme", "a@x.org")}
        drain.finished.put(future)
    with pytest.raises(Exception, match="Rate exceeded"):
        d._collect(drain, wait=False)
    assert drain.finished.qsize() == 2 and len(drain.inflight) == 2  # the duplicates: still to act on
    d._collect(drain, wait=False)
    assert not drain.inflight and drain.to_delete == [
        {"ReceiptHandle": "rh-1", "Body": queued("acme", "a@x.org")},
        {"ReceiptHandle": "rh-2", "Body": queued("acme", "a@x.org")},
    ]
