"""A send is counted in the second SES was asked, not in the later second its ledger write ended in: the
campaign's busiest second, which its page shows beside its rate, is then what the rate allowed."""

from __future__ import annotations

from chalicelib.stores.ledger_model import FAILED, SENT
from chalicelib.stores.recorder import Recorder
from tests.fakes.ledger import FakeLedger
from tests.fakes.stats import FakeStats


def _claimed(ledger: FakeLedger, email: str):
    ledger.record_queued("u", "c", [email])
    return ledger.claim("u", "c", email, 30.0)


def test_a_send_counts_in_the_second_ses_was_asked():
    ledger, stats = FakeLedger(), FakeStats()
    recorder = Recorder(ledger, stats)
    assert recorder.finished(_claimed(ledger, "a@x.org"), "u", "c", "a@x.org", SENT, message_id="m1", sent_at_s=99.98)
    assert stats.seconds == [("u", "c", {99: 1})] and stats.total(SENT) == 1


def test_a_send_without_its_time_and_any_other_outcome_count_as_before():
    ledger, stats = FakeLedger(), FakeStats()
    recorder = Recorder(ledger, stats)
    assert recorder.finished(_claimed(ledger, "a@x.org"), "u", "c", "a@x.org", SENT, message_id="m1")
    assert recorder.finished(_claimed(ledger, "b@x.org"), "u", "c", "b@x.org", FAILED, reason="no", sent_at_s=5.0)
    assert stats.seconds == [] and (stats.total(SENT), stats.total(FAILED)) == (1, 1)
