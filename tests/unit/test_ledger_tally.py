"""The ledger's tally (chalicelib.stores.ledger_tally) and the stream's notes for the recount
(chalicelib.jobs.ledger_stream). That the tally moves as the recorder counts, transition by transition, is
proved on DynamoDB: tests/contract/test_recount.py."""

from __future__ import annotations

from typing import Any

from chalicelib.jobs.ledger_stream import LedgerStream, changed_campaigns
from chalicelib.stores.campaign_stats import COUNTERS
from chalicelib.stores.ledger_tally import STATED, tally


def test_the_tally_states_every_counter_a_campaign_has():
    assert sorted(STATED) == sorted(COUNTERS)


def test_a_row_counts_its_state_its_feedback_its_retries_and_its_entries():
    rows = [
        {"state": "sent", "queued_at": 1, "delivered_at": 5, "opened_at": 6, "updated_at": 6},
        {"state": "failed", "queued_at": 1, "kept_at": 0, "released_at": 2, "retries": 2, "updated_at": 9},
        {"state": "scheduled", "kept_at": 1, "updated_at": 1},
        {"state": "rejected", "updated_at": 3},
        {"bounced_at": 4, "updated_at": 4},  # feedback for a recipient with no state (yet)
    ]
    t = tally(rows)
    assert (t["sent"], t["failed"], t["rejected"], t["delivered"], t["opened"], t["bounced"]) == (1, 1, 1, 1, 1, 1)
    assert (t["queued"], t["scheduled"], t["released"], t["retried"]) == (2, 2, 1, 2)
    assert (t.rows, t.latest_ms) == (5, 9)
    assert t["cancelled"] == t["clicked"] == 0


def _record(name: str, pk: str, seq: str) -> dict[str, Any]:
    return {"eventName": name, "dynamodb": {"Keys": {"pk": {"S": pk}, "rcpt": {"S": "a"}}, "SequenceNumber": seq}}


def test_a_batch_notes_each_campaign_it_wrote_once_and_not_a_ttl_delete():
    records = [_record("INSERT", "u#c1", "1"), _record("MODIFY", "u#c1", "2"), _record("REMOVE", "u#old", "3")]
    records.append({"eventName": "MODIFY", "dynamodb": {}})  # not of the ledger's shape: the fanout logs it
    assert changed_campaigns(records) == {"u#c1"}


class _Fanout:
    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer

    def batch(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return self.answer


class _Notes:
    def __init__(self, fail: bool = False) -> None:
        self.fail, self.noted = fail, []

    def note(self, pks: Any, now_ms: int | None = None) -> None:
        if self.fail:
            raise ConnectionError("ProvisionedThroughputExceededException")
        self.noted.extend(sorted(pks))


def test_the_stream_answers_the_fanout_and_notes_the_batch():
    notes = _Notes()
    fanout = _Fanout({"batchItemFailures": [{"itemIdentifier": "2"}]})
    answer = LedgerStream(fanout, notes).batch([_record("INSERT", "u#c1", "1"), _record("MODIFY", "u#c2", "2")])
    assert answer == {"batchItemFailures": [{"itemIdentifier": "2"}]} and notes.noted == ["u#c1", "u#c2"]


def test_a_batch_whose_notes_cannot_be_written_comes_again_whole():
    # The note is what lets the recount restore a count a killed handler lost: the stream must not go past it.
    stream = LedgerStream(_Fanout({"batchItemFailures": []}), _Notes(fail=True))
    answer = stream.batch([_record("INSERT", "u#c1", "7"), _record("MODIFY", "u#c2", "8")])
    assert answer == {"batchItemFailures": [{"itemIdentifier": "7"}]}
