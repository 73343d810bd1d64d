"""Dead letters: a recipient whose message SQS gave up on ends recorded, never silently `queued`."""

from __future__ import annotations

import time
from typing import Any

import pytest

from chalicelib.core.contract import QueuedEmail
from chalicelib.jobs import dead_letters
from chalicelib.jobs.dead_letters import LATER_S, MIN_AGE_S, RECHECK_S, DeadLetters
from chalicelib.stores.failed_copies import FailedCopies
from chalicelib.stores.ledger_model import FAILED, QUEUED, SENT
from chalicelib.stores.recorder import Recorder
from tests.fakes import FakeLedger, FakeStats, failed_copies, payloads
from tests.unit.test_drainer import SETTINGS, queued


class DeadLetterQueue:
    """The dead-letter queue as SQS answers the reconciler: receive (hiding what it returns), re-hide."""

    def __init__(self, bodies: list[tuple[str, float]]) -> None:
        self.messages = [
            {
                "MessageId": f"m{i}",
                "ReceiptHandle": f"rh{i}",
                "Body": b,
                "Attributes": {"SentTimestamp": str(int(t * 1000))},
            }
            for i, (b, t) in enumerate(bodies)
        ]
        self.hidden: dict[str, int] = {}
        self.deleted: list[str] = []

    def get_queue_url(self, QueueName: str) -> dict[str, str]:
        return {"QueueUrl": f"https://sqs.example/1/{QueueName}"}

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int, VisibilityTimeout: int, **_: Any) -> dict:
        out = [m for m in self.messages if m["ReceiptHandle"] not in self.hidden][:MaxNumberOfMessages]
        for m in out:
            self.hidden[m["ReceiptHandle"]] = VisibilityTimeout
        return {"Messages": out} if out else {}

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int) -> None:
        self.hidden[ReceiptHandle] = VisibilityTimeout

    def delete_message(self, **_: Any) -> None:  # never called: dead letters stay for operators
        raise AssertionError("the reconciler must not delete dead letters")


def _reconciler(dlq: DeadLetterQueue, ledger: FakeLedger, stats: FakeStats, copies: FailedCopies | None = None):
    queue = SETTINGS.resources.dead_letter_queue.name
    dead = dead_letters.DeadLetterQueue(dlq, queue)  # type: ignore[arg-type]
    return DeadLetters(SETTINGS, dead, ledger, Recorder(ledger, stats), payloads(), copies or failed_copies())


OLD = time.time() - MIN_AGE_S - 60


def test_a_queued_recipient_whose_message_was_dead_lettered_is_recorded_failed_with_why_and_kept_for_retry():
    ledger, stats, copies = FakeLedger(), FakeStats(), failed_copies()
    ledger.record_queued("acme", "c1", ["a@example.org"])
    dlq = DeadLetterQueue([(queued("acme", "a@example.org"), OLD)])
    result = _reconciler(dlq, ledger, stats, copies).reconcile()
    row = ledger.rows[("acme#c1", "a@example.org")]
    assert row["state"] == FAILED and "dead-lettered" in row["reason"] and "5 receives" in row["reason"]
    assert stats.total("failed") == 1 and result.recorded_failed == 1
    kept = copies.load("acme", "c1", "a@example.org")  # retry-failed can queue it again
    assert kept is not None and QueuedEmail.from_json(kept).recipient_email == "a@example.org"
    assert dlq.hidden == {"rh0": RECHECK_S}  # kept in the DLQ, not looked at again for hours


def test_a_run_that_dies_with_dead_letters_in_hand_leaves_them_to_the_next_run_not_hidden_for_hours():
    """The fault explorer's reconcile_dead_letters scenario found it: received for RECHECK_S, the dead letters
    of a run killed before settling them kept their recipients `queued` for six hours."""
    ledger, stats = FakeLedger(), FakeStats()
    ledger.record_queued("acme", "c1", ["a@example.org"])
    dlq = DeadLetterQueue([(queued("acme", "a@example.org"), OLD)])

    def killed(*_: Any, **__: Any) -> None:
        raise TimeoutError("Task timed out")

    ledger.get = killed  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        _reconciler(dlq, ledger, stats).reconcile()
    assert dlq.hidden == {"rh0": LATER_S} and LATER_S < 15 * 60  # the next run, 15 minutes on, settles it
    assert ledger.rows[("acme#c1", "a@example.org")]["state"] == QUEUED


def test_a_recipient_with_an_outcome_is_left_as_it_is_and_not_counted_again():
    ledger, stats = FakeLedger(), FakeStats()
    claim = ledger.claim("acme", "c1", "a@example.org", 60)
    ledger.finish(claim, SENT, message_id="ses-1")
    result = _reconciler(DeadLetterQueue([(queued("acme", "a@example.org"), OLD)]), ledger, stats).reconcile()
    assert ledger.rows[("acme#c1", "a@example.org")]["state"] == SENT
    assert stats.adds == [] and result.had_outcome == 1


def test_a_live_claim_or_a_young_dead_letter_waits_for_a_later_look():
    """A sender at work, or a twin copy still on its way through the send queue, settles it first."""
    ledger, stats = FakeLedger(), FakeStats()
    ledger.record_queued("acme", "c1", ["held@example.org", "young@example.org"])
    ledger.claim("acme", "c1", "held@example.org", 600)
    dlq = DeadLetterQueue(
        [(queued("acme", "held@example.org"), OLD), (queued("acme", "young@example.org"), time.time() - 60)]
    )
    result = _reconciler(dlq, ledger, stats).reconcile()
    assert result.later == 2 and result.recorded_failed == 0 and stats.adds == []
    assert dlq.hidden == {"rh0": LATER_S, "rh1": LATER_S}
    assert ledger.rows[("acme#c1", "young@example.org")]["state"] == QUEUED


def test_an_unreadable_dead_letter_is_recorded_once_under_unattributed():
    ledger, stats = FakeLedger(), FakeStats()
    dlq = DeadLetterQueue([("{not json", OLD)])
    first = _reconciler(dlq, ledger, stats).reconcile()
    dlq.hidden.clear()  # hours later, it is looked at again
    second = _reconciler(dlq, ledger, stats).reconcile()
    assert first.unreadable == second.unreadable == 1
    assert stats.total("rejected") == 1  # recorded and counted once
    assert [r["state"] for k, r in ledger.rows.items() if k[0].startswith("_unattributed")] == ["rejected"]


def test_reconcile_stops_when_its_time_runs_out():
    ledger, stats = FakeLedger(), FakeStats()
    dlq = DeadLetterQueue([(queued("acme", f"r{i}@example.org"), OLD) for i in range(30)])
    result = _reconciler(dlq, ledger, stats).reconcile(remaining_ms=lambda: 5_000)
    assert result.looked == 0 and dlq.hidden == {}


def test_dead_letters_through_the_local_stack_end_recorded(stack, uid):
    """The real queue and ledger: a message dead-lettered with its recipient still `queued` ends `failed`."""
    from chalicelib import wiring

    c = wiring.container()
    user = f"dl{uid}"
    c.ledger.record_queued(user, "c1", ["a@example.org"])
    sqs = stack.client("sqs")
    name = f"dlq-{uid}"  # its own, so that the stage's dead letters of other tests stay visible to them
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=queued(user, "a@example.org"))
    an_hour_on = DeadLetters(
        c.settings,
        dead_letters.DeadLetterQueue(sqs, name),
        c.ledger,
        c.recorder,
        c.payloads,
        c.failed_copies,
        clock=lambda: time.time() + MIN_AGE_S + 60,
    )
    result = an_hour_on.reconcile()
    assert result.looked == 1 and result.recorded_failed == 1
    entry = c.ledger.get(user, "c1", "a@example.org")
    assert entry is not None and entry.state == FAILED and name in (entry.reason or "")
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # kept, hidden until its next look
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
    assert attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "1"


def test_a_recipient_queued_again_by_retry_failed_after_its_dead_letter_is_left_to_its_retried_copy():
    # Failed, dead-lettered, then queued again by retry-failed: its retried copy waits behind a backlog. The
    # dead letter is as old as the first message (SQS keeps its SentTimestamp): it must not record the
    # recipient failed, which would drop the retried copy unsent after the API answered `requeued: 1`.
    ledger, stats = FakeLedger(), FakeStats()
    claim = ledger.claim("acme", "c1", "a@example.org", 60)
    ledger.finish(claim, FAILED, reason="550 mailbox unavailable")
    assert ledger.reopen("acme", "c1", "a@example.org")
    result = _reconciler(DeadLetterQueue([(queued("acme", "a@example.org"), OLD)]), ledger, stats).reconcile()
    assert ledger.rows[("acme#c1", "a@example.org")]["state"] == QUEUED and result.superseded == 1
    assert result.recorded_failed == 0 and stats.adds == []
    # The dead letter of a message sent after the retry (the retried copy itself died) is recorded as before.
    ledger.rows[("acme#c1", "a@example.org")]["retried_at"] = int((OLD - 10) * 1000)
    result = _reconciler(DeadLetterQueue([(queued("acme", "a@example.org"), OLD)]), ledger, stats).reconcile()
    row = ledger.rows[("acme#c1", "a@example.org")]
    assert row["state"] == FAILED and "dead-lettered" in row["reason"] and result.recorded_failed == 1
