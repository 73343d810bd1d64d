"""SES's sending events recorded in the ledger (with the JSON shape SES publishes to SNS)."""

import json

import pytest

from chalicelib.feedback.ses_events import SesEvents, parse_event
from chalicelib.stores.pauses import SES
from chalicelib.stores.recorder import Recorder
from infra.local.ses import send_event
from tests.fakes import FakeLedger, FakeReputation, FakeStats, FakeSuppressions, FakeTenants
from tests.fakes.ses import FakeSesTenants

PLATFORM = "123456789012"

RAW = (
    b"From: Acme <news@acme.io>\r\nTo: ann@x.io\r\nSubject: Hi\r\nMessage-ID: <1@acme.io>\r\n"
    b"X-Moonsend-Tenant: acme\r\nX-Moonsend-Campaign: spring\r\n\r\nHello\r\n"
)


def _event(kind="Send", **extra):
    record = send_event("111122223333", "moonsend-test-events", RAW, ["ann@x.io"], "ses-msg-1")
    record["eventType"] = kind
    record.pop("send")
    record.update(extra)
    return json.dumps(record)


def _recording(ledger, stats, account="111122223333"):
    """SesEvents with a fake per port; acme's keys are of the account the events come from."""
    return SesEvents(
        Recorder(ledger, stats),
        FakeSuppressions(),
        FakeTenants(_acme(account)),
        PLATFORM,
        FakeReputation(),
        FakeSesTenants(),
        "us-east-1",
    )


def test_the_send_event_shape_carries_what_moonsend_matches_on():
    e = parse_event(_event())
    assert (e.event_type, e.message_id, e.user_id, e.campaign_id, e.recipients) == (
        "Send",
        "ses-msg-1",
        "acme",
        "spring",
        ("ann@x.io",),
    )


def test_a_send_event_records_a_recipient_the_sender_never_recorded_and_counts_it_once():
    ledger, stats = FakeLedger(), FakeStats()
    ledger.record_queued("acme", "spring", ["ann@x.io"])
    events = _recording(ledger, stats)
    assert events.handle(_event()) == "recorded sent"
    assert events.handle(_event()) == "already recorded"  # SNS redelivers
    assert ledger.state("acme", "spring", "ann@x.io") == "sent"
    assert ledger.rows[("acme#spring", "ann@x.io")]["message_id"] == "ses-msg-1"
    assert stats.total("sent") == 1


def test_a_sender_that_recorded_first_is_not_counted_again_by_the_event():
    ledger, stats = FakeLedger(), FakeStats()
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    assert ledger.finish(claim, "sent", message_id="ses-msg-1")
    assert _recording(ledger, stats).handle(_event()) == "already recorded"
    assert stats.total("sent") == 0


def test_the_sender_does_not_count_what_the_event_recorded_first():
    ledger = FakeLedger()
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    _recording(ledger, FakeStats()).handle(_event())  # the event is faster than the sender's record
    assert ledger.finish(claim, "sent", message_id="ses-msg-1") is False


def test_events_of_other_mail_and_unreadable_records_are_dropped_without_error():
    events = _recording(FakeLedger(), FakeStats())
    foreign = json.loads(_event())
    foreign["mail"]["headers"] = [h for h in foreign["mail"]["headers"] if not h["name"].startswith("X-Moonsend")]
    assert events.handle(json.dumps(foreign)) == "ignored"
    assert events.handle("{not json") == "unreadable"
    assert events.handle(json.dumps({"eventType": "Send"})) == "unreadable"


def test_a_reject_event_turns_that_sent_email_into_failed_and_moves_the_count():
    ledger, stats = FakeLedger(), FakeStats()
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    ledger.finish(claim, "sent", message_id="ses-msg-1")
    reject = _event("Reject", reject={"reason": "Bad content"})
    assert _recording(ledger, stats).handle(reject) == "recorded failed"
    assert ledger.state("acme", "spring", "ann@x.io") == "failed"
    assert ledger.rows[("acme#spring", "ann@x.io")]["reason"] == "rejected by SES: Bad content"
    assert (stats.total("sent"), stats.total("failed")) == (-1, 1)


# --- bounces, complaints, deliveries: SES's own example records (event publishing to SNS) -----------

BOUNCE = {
    "eventType": "Bounce",
    "bounce": {
        "bounceType": "Permanent",
        "bounceSubType": "General",
        "bouncedRecipients": [
            {
                "emailAddress": "ann@x.io",
                "action": "failed",
                "status": "5.1.1",
                "diagnosticCode": "smtp; 550 5.1.1 user unknown",
            }
        ],
        "timestamp": "2017-08-05T00:41:02.669Z",
        "feedbackId": "01000157c44f053b-61b59c11-9236-11e6-8f96-7be8aexample-000000",
        "reportingMTA": "dsn; mta.example.com",
    },
}
COMPLAINT = {
    "eventType": "Complaint",
    "complaint": {
        "complainedRecipients": [{"emailAddress": "ann@x.io"}],
        "timestamp": "2017-08-05T00:41:02.669Z",
        "feedbackId": "01000157c44f053b-61b59c11-9236-11e6-8f96-7be8aexample-000000",
        "userAgent": "Mozilla/5.0",
        "complaintFeedbackType": "abuse",
        "arrivalDate": "2017-08-05T00:41:02.669Z",
    },
}
DELIVERY = {
    "eventType": "Delivery",
    "delivery": {
        "timestamp": "2016-10-19T23:21:04.133Z",
        "processingTimeMillis": 11893,
        "recipients": ["ann@x.io"],
        "smtpResponse": "250 2.6.0 Message received",
        "reportingMTA": "mta.example.com",
    },
}


def _record(kind, account="111122223333"):
    mail = json.loads(_event())["mail"]
    mail["sendingAccountId"] = account
    return json.dumps({**kind, "mail": mail})


def bounce_of(user: str, address: str, account: str) -> str:
    """A permanent bounce of `address`, sent for tenant `user` (its X-Moonsend-Tenant header), as SNS delivers it."""
    return _feedback_of(BOUNCE, "bounce", "bouncedRecipients", user, address, account)


def complaint_of(user: str, address: str, account: str) -> str:
    """A complaint about `address`, of tenant `user`'s email, as SES publishes it."""
    return _feedback_of(COMPLAINT, "complaint", "complainedRecipients", user, address, account)


def _feedback_of(kind: dict, detail: str, recipients: str, user: str, address: str, account: str) -> str:
    record = json.loads(_record(kind, account=account))
    record["mail"]["destination"] = [address]
    record[detail][recipients][0]["emailAddress"] = address
    for h in record["mail"]["headers"]:
        if h["name"] == "X-Moonsend-Tenant":
            h["value"] = user
    return json.dumps(record)


def _acme(account="111122223333"):
    from chalicelib.core.contract import Sender
    from chalicelib.stores.ports.tenants import KeyVersion, Tenant

    keys = (KeyVersion(1, "AKIA", "s", account),)
    return Tenant("acme", "paid", Sender("news@acme.io", "Acme", "us-east-1", "AKIA", "s", 5.0), keys)


def _handler(account="111122223333"):
    ledger, stats, sup = FakeLedger(), FakeStats(), FakeSuppressions()
    events = SesEvents(
        Recorder(ledger, stats),
        sup,
        FakeTenants(_acme(account)),
        PLATFORM,
        FakeReputation(),
        FakeSesTenants(),
        "us-east-1",
    )
    return events, ledger, stats, sup


def test_a_permanent_bounce_suppresses_the_address_for_every_tenant_and_is_counted_once():
    events, ledger, stats, sup = _handler()
    assert events.handle(_record(BOUNCE)) == "recorded bounced"
    assert events.handle(_record(BOUNCE)) == "already recorded"
    # For every tenant, and on the tenant's own list (it met the address); idempotent in the store.
    assert sup.added == [(None, "ann@x.io", "bounce"), ("acme", "ann@x.io", "bounce")] * 2
    assert sup.check("globex", ["ann@x.io"]) and sup.check("acme", ["ann@x.io"])
    assert stats.total("bounced") == 1
    assert ledger.rows[("acme#spring", "ann@x.io")]["feedback"] == "bounced: Permanent: smtp; 550 5.1.1 user unknown"


def test_a_transient_bounce_is_counted_but_suppresses_nothing():
    events, _ledger, stats, sup = _handler()
    transient = json.loads(json.dumps(BOUNCE))
    transient["bounce"]["bounceType"] = "Transient"
    events.handle(_record(transient))
    assert sup.added == [] and stats.total("bounced") == 1


def test_a_complaint_suppresses_the_address_for_that_tenant_only():
    events, _ledger, stats, sup = _handler()
    assert events.handle(_record(COMPLAINT)) == "recorded complained"
    assert sup.added == [("acme", "ann@x.io", "complaint")] and stats.total("complained") == 1


def test_a_delivery_is_recorded_beside_the_sent_state():
    events, ledger, stats, _sup = _handler()
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    ledger.finish(claim, "sent", message_id="ses-msg-1")
    assert events.handle(_record(DELIVERY)) == "recorded delivered"
    row = ledger.rows[("acme#spring", "ann@x.io")]
    assert row["state"] == "sent" and row["feedback"] == "delivered: 250 2.6.0 Message received"
    assert stats.total("delivered") == 1
    # SES's own time of the delivery (AWS's example event: 2016-10-19T23:21:04.133Z), kept beside moonsend's
    # for timing a machine's open (chalicelib.ingest.machines); its event may be handled much later.
    assert row["ses_delivered_at"] == 1476919264133


def test_an_event_from_an_account_that_did_not_send_the_tenants_email_is_dropped():
    # The events topic takes SES events from any account (paid tenants send from theirs); only the
    # tenant's own account may speak for its email, or anyone could suppress another tenant's list.
    events, ledger, stats, sup = _handler(account="111122223333")
    assert events.handle(_record(BOUNCE, account="999999999999")) == "untrusted"
    assert events.handle(_record(COMPLAINT, account="999999999999")) == "untrusted"
    assert sup.added == [] and stats.adds == [] and ledger.rows == {}
    unknown = _recording(FakeLedger(), FakeStats(), account=None)
    assert unknown.handle(_record(BOUNCE)) == "untrusted"  # the tenant's account not learned yet


def test_feedback_is_matched_to_the_ledger_by_ses_message_id():
    # Found by tenant, campaign and recipient (the headers), the entry must be the send SES speaks of:
    # an event about another message to the same address (an earlier send, say) records nothing.
    events, ledger, stats, _sup = _handler()
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    ledger.finish(claim, "sent", message_id="ses-msg-OTHER")
    assert events.handle(_record(DELIVERY)) == "already recorded"
    assert stats.total("delivered") == 0 and "feedback" not in ledger.rows[("acme#spring", "ann@x.io")]


def test_a_batch_of_events_writes_each_campaigns_counters_once_when_flushed():
    ledger, stats = FakeLedger(), FakeStats()
    people = ["ann@x.io", "bob@x.io", "cy@x.io"]
    ledger.record_queued("acme", "spring", people)
    events = _recording(ledger, stats)
    batch = events.batch()
    for i, person in enumerate(people):
        record = json.loads(_event())
        record["mail"]["destination"] = [person]
        record["mail"]["messageId"] = f"ses-msg-{i}"
        assert batch.record(json.dumps(record)) == "recorded sent"
    assert stats.adds == []  # nothing written per event
    batch.flush()
    assert stats.adds == [("acme", "spring", {"sent": 3}, None)]
    assert {ledger.state("acme", "spring", p) for p in people} == {"sent"}


def test_a_batch_begins_no_event_with_too_little_time_left_and_still_writes_what_it_counted():
    """A hundred events, some with a bounce's side effects, under a throttled table, could outlast the
    function's 30 s: Lambda would stop it before the counters' flush and give back the handled events too."""
    from chalicelib.feedback.ses_events import STOP_WITH_MS, NotBegun

    ledger, stats = FakeLedger(), FakeStats()
    people = ["ann@x.io", "bob@x.io", "cy@x.io"]
    ledger.record_queued("acme", "spring", people)
    left = [30_000]
    batch = _recording(ledger, stats).batch(lambda: left[0])
    for i, person in enumerate(people):
        record = json.loads(_event())
        record["mail"]["destination"] = [person]
        record["mail"]["messageId"] = f"ses-msg-{i}"
        if i == 2:
            left[0] = STOP_WITH_MS - 1
            with pytest.raises(NotBegun):
                batch.record(json.dumps(record))
        else:
            assert batch.record(json.dumps(record)) == "recorded sent"
    batch.flush()
    assert stats.adds == [("acme", "spring", {"sent": 2}, None)]
    assert ledger.state("acme", "spring", "cy@x.io") == "queued"  # not begun: it comes back


def test_an_event_in_an_sns_envelope_is_read_as_the_event_it_carries():
    """The queue's subscription without raw delivery (set by hand) wraps each event in SNS's envelope."""
    envelope = json.dumps({"Type": "Notification", "MessageId": "m-1", "Message": _event()})
    assert parse_event(envelope).message_id == "ses-msg-1"


def test_a_bounce_from_the_platforms_account_has_the_guard_read_ses_status_and_pause_a_tenant_ses_paused():
    from chalicelib.stores.ports.sending import TenantStatus

    paused = TenantStatus("moonsend-test-acme", "DISABLED", "The bounce rate exceeded 10.0%", None)
    tenants = FakeTenants(_acme(PLATFORM))
    events = SesEvents(
        Recorder(FakeLedger(), FakeStats()),
        FakeSuppressions(),
        tenants,
        PLATFORM,
        FakeReputation(),
        FakeSesTenants({"acme": paused}),
        "us-east-1",
    )
    assert events.handle(_record(BOUNCE, account=PLATFORM)) == "recorded bounced"
    assert tenants.paused_now == [("acme", paused.reason)] and tenants.pause_owners == [SES]
    # From a tenant's own account, SES's tenants of the platform's account say nothing about it.
    own = FakeTenants(_acme())
    events = SesEvents(
        Recorder(FakeLedger(), FakeStats()),
        FakeSuppressions(),
        own,
        PLATFORM,
        FakeReputation(),
        FakeSesTenants({"acme": paused}),
        "us-east-1",
    )
    assert events.handle(_record(BOUNCE)) == "recorded bounced" and own.paused_now == []


def _send_of(person: str, i: int) -> str:
    record = json.loads(_event())
    record["mail"]["destination"] = [person]
    record["mail"]["messageId"] = f"ses-msg-{i}"
    return json.dumps(record)


def test_a_batchs_send_events_read_the_ledger_once_and_write_only_where_no_outcome_is_recorded():
    """Nearly always the drainer recorded `sent` before SES's event came: one read for the batch answers
    those, and only the recipient whose drainer died (no outcome) is written, without a read of its own."""
    ledger, stats = FakeLedger(), FakeStats()
    people = ["ann@x.io", "bob@x.io", "cy@x.io"]
    ledger.record_queued("acme", "spring", people)
    for i, person in enumerate(people[:2]):
        claim = ledger.claim("acme", "spring", person, 300)
        assert ledger.finish(claim, "sent", message_id=f"ses-msg-{i}")
    batch = _recording(ledger, stats).batch()
    bodies = [_send_of(p, i) for i, p in enumerate(people)] + ["{not json", json.dumps({"eventType": "Send"})]
    batch.read_ahead(bodies)
    assert [batch.record(b) for b in bodies] == [
        "already recorded",
        "already recorded",
        "recorded sent",
        "unreadable",
        "unreadable",
    ]
    batch.flush()
    assert (ledger.batch_reads, ledger.event_reads) == (1, 0)
    assert stats.adds == [("acme", "spring", {"sent": 1}, None)]
    assert ledger.rows[("acme#spring", "cy@x.io")]["message_id"] == "ses-msg-2"


def test_a_send_event_read_ahead_as_open_is_still_decided_by_the_conditional_write():
    """The read is eventually consistent and old by the time the event is handled: the drainer's record may
    land in between, and the event must then neither overwrite it nor count it."""
    ledger, stats = FakeLedger(), FakeStats()
    ledger.record_queued("acme", "spring", ["ann@x.io"])
    batch = _recording(ledger, stats).batch()
    batch.read_ahead([_event()])
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    assert ledger.finish(claim, "sent", message_id="ses-msg-1")  # after the read, before the event's write
    assert batch.record(_event()) == "already recorded"
    batch.flush()
    assert stats.adds == []
    assert ledger.event_reads == 0  # decided by the write alone, not by a read of its own


def test_a_send_event_with_a_key_dynamodb_would_refuse_does_not_keep_the_batch_from_reading_ahead():
    """The tenant's own SES account can put any campaign header on its mail: a campaign id past DynamoDB's key
    size would fail the batch's read, and every other event would read its own."""
    ledger, stats = FakeLedger(), FakeStats()
    ledger.record_queued("acme", "spring", ["ann@x.io"])
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    assert ledger.finish(claim, "sent", message_id="ses-msg-1")
    forged = json.loads(_event())
    for header in forged["mail"]["headers"]:
        if header["name"] == "X-Moonsend-Campaign":
            header["value"] = "c" * 3000
    batch = _recording(ledger, stats).batch()
    batch.read_ahead([json.dumps(forged), _event()])
    assert batch.record(_event()) == "already recorded"
    assert (ledger.batch_reads, ledger.event_reads) == (1, 0)
    with pytest.raises(Exception, match="ValidationException"):  # its own read refused: it alone is retried
        batch.record(json.dumps(forged))


def test_send_events_whose_read_ahead_fails_each_read_their_own_and_are_recorded_as_before():
    class Throttled(FakeLedger):
        def with_outcome(self, recipients):
            raise RuntimeError("ProvisionedThroughputExceededException")

    ledger, stats = Throttled(), FakeStats()
    people = ["ann@x.io", "bob@x.io"]
    ledger.record_queued("acme", "spring", people)
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    assert ledger.finish(claim, "sent", message_id="ses-msg-0")
    batch = _recording(ledger, stats).batch()
    bodies = [_send_of(p, i) for i, p in enumerate(people)]
    batch.read_ahead(bodies)
    assert [batch.record(b) for b in bodies] == ["already recorded", "recorded sent"]
    assert ledger.event_reads == 2


def test_send_events_from_an_account_that_does_not_send_the_tenants_email_are_not_read_ahead():
    ledger = FakeLedger()
    ledger.record_queued("acme", "spring", ["ann@x.io"])
    batch = _recording(ledger, FakeStats(), account="999999999999").batch()
    batch.read_ahead([_event()])
    assert ledger.batch_reads == 0
    assert batch.record(_event()) == "untrusted"
    assert ledger.state("acme", "spring", "ann@x.io") == "queued"


def _sqs_records(bodies):
    return [{"messageId": f"m-{i}", "body": b} for i, b in enumerate(bodies)]


def test_a_batch_of_a_hundred_is_recorded_several_at_once_and_each_records_outcome_answered_by_its_id():
    """One after another, a hundred events outlast the batch's margin on a starved machine: they are handled
    LANES at a time, each record's outcome (or its error) answered for it alone, the counters written once."""
    import threading

    from chalicelib.feedback.ses_events import LANES

    class Overlapping(FakeLedger):
        """Holds each Send event's write until a second is in flight, so a batch in turn would time out."""

        def __init__(self):
            super().__init__()
            self.in_flight, self.most = 0, 0
            self.gate = threading.Condition()

        def record_sent_event(self, *args, **kwargs):
            with self.gate:
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
                self.gate.notify_all()
                self.gate.wait_for(lambda: self.most > 1, timeout=5)
            try:
                return super().record_sent_event(*args, **kwargs)
            finally:
                with self.gate:
                    self.in_flight -= 1

    ledger, stats = Overlapping(), FakeStats()
    people = [f"p{i}@x.io" for i in range(100)]
    ledger.record_queued("acme", "spring", people)
    bodies = [_send_of(p, i) for i, p in enumerate(people)] + ["{not json"]
    bodies[7] = _event("Bounce", bounce={"bounceType": "Permanent"})  # no message id match needed to count
    batch = _recording(ledger, stats).batch()
    batch.record_all([*_sqs_records(bodies), {"messageId": "m-boom", "body": "boom"}])
    assert 1 < ledger.most <= LANES
    assert batch.outcome("m-0") == "recorded sent" and batch.outcome("m-100") == "unreadable"
    batch.flush()
    assert [a[2].get("sent") for a in stats.adds] == [99]  # the hundred less the bounce, in one write
    assert {ledger.state("acme", "spring", p) for p in people if p != "p7@x.io"} == {"sent"}


def test_a_record_that_raises_in_a_lane_is_answered_as_its_own_failure_and_the_rest_are_recorded():
    class Unreachable(FakeLedger):
        def record_sent_event(self, user, campaign, email, message_id, *, read_first=True):
            if email == "bob@x.io":
                raise RuntimeError("the ledger is unreachable")
            return super().record_sent_event(user, campaign, email, message_id, read_first=read_first)

    ledger, stats = Unreachable(), FakeStats()
    ledger.record_queued("acme", "spring", ["ann@x.io", "bob@x.io"])
    batch = _recording(ledger, stats).batch()
    batch.record_all(_sqs_records([_send_of("ann@x.io", 0), _send_of("bob@x.io", 1)]))
    assert batch.outcome("m-0") == "recorded sent"
    with pytest.raises(RuntimeError, match="unreachable"):
        batch.outcome("m-1")


def test_no_event_of_a_batch_is_begun_with_too_little_time_left_whichever_lane_takes_it():
    from chalicelib.feedback.ses_events import STOP_WITH_MS, NotBegun

    ledger = FakeLedger()
    ledger.record_queued("acme", "spring", ["ann@x.io", "bob@x.io"])
    batch = _recording(ledger, FakeStats()).batch(lambda: STOP_WITH_MS - 1)
    batch.record_all(_sqs_records([_send_of("ann@x.io", 0), _send_of("bob@x.io", 1)]))
    for message_id in ("m-0", "m-1"):
        with pytest.raises(NotBegun):
            batch.outcome(message_id)
    assert ledger.batch_reads == 0 and ledger.state("acme", "spring", "ann@x.io") == "queued"


def _send_in(campaign: str, i: int) -> str:
    record = json.loads(_send_of(f"p{i}@x.io", i))
    for header in record["mail"]["headers"]:
        if header["name"].lower() == "x-moonsend-campaign":
            header["value"] = campaign
    return json.dumps(record)


def test_a_batch_about_many_campaigns_stops_beginning_events_earlier_to_leave_time_for_their_counts():
    """The flush writes each campaign's counts one after another: a batch of a hundred campaigns needs seconds
    more at its end than a batch of one, and Lambda stopping it first would give back every handled event."""
    from chalicelib.feedback.ses_events import FLUSH_MS_A_CAMPAIGN, STOP_WITH_MS, NotBegun

    left = STOP_WITH_MS + 10 * FLUSH_MS_A_CAMPAIGN  # enough for ten campaigns' counts, not for fifty
    for campaigns, begun in ((1, True), (10, True), (50, False)):
        ledger = FakeLedger()
        bodies = [_send_in(f"c{i % campaigns}", i) for i in range(50)]
        for i in range(50):
            ledger.record_queued("acme", f"c{i % campaigns}", [f"p{i}@x.io"])
        batch = _recording(ledger, FakeStats()).batch(lambda: left)
        batch.record_all(_sqs_records(bodies))
        if begun:
            assert {batch.outcome(f"m-{i}") for i in range(50)} == {"recorded sent"}, campaigns
        else:
            with pytest.raises(NotBegun):
                batch.outcome("m-0")
