"""SES's sending events recorded in the ledger (with the JSON shape SES publishes to SNS)."""

import json

from chalicelib.ses_events import SesEvents, parse_event
from infra.local.ses import send_event
from tests.fakes import FakeLedger
from tests.test_drainer import FakeStats

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
    events = SesEvents(ledger, stats)
    assert events.handle(_event()) == "recorded sent"
    assert events.handle(_event()) == "already recorded"  # SNS redelivers
    assert ledger.state("acme", "spring", "ann@x.io") == "sent"
    assert ledger.rows[("acme#spring", "ann@x.io")]["message_id"] == "ses-msg-1"
    assert stats.total("sent") == 1


def test_a_sender_that_recorded_first_is_not_counted_again_by_the_event():
    ledger, stats = FakeLedger(), FakeStats()
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    assert ledger.finish(claim, "sent", message_id="ses-msg-1")
    assert SesEvents(ledger, stats).handle(_event()) == "already recorded"
    assert stats.total("sent") == 0


def test_the_sender_does_not_count_what_the_event_recorded_first():
    ledger = FakeLedger()
    claim = ledger.claim("acme", "spring", "ann@x.io", 300)
    SesEvents(ledger, FakeStats()).handle(_event())  # the event is faster than the sender's record
    assert ledger.finish(claim, "sent", message_id="ses-msg-1") is False


def test_events_of_other_mail_and_unreadable_records_are_dropped_without_error():
    events = SesEvents(FakeLedger(), FakeStats())
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
    assert SesEvents(ledger, stats).handle(reject) == "recorded failed"
    assert ledger.state("acme", "spring", "ann@x.io") == "failed"
    assert ledger.rows[("acme#spring", "ann@x.io")]["reason"] == "rejected by SES: Bad content"
    assert (stats.total("sent"), stats.total("failed")) == (-1, 1)
