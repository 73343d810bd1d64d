"""The ledger against the local stack's DynamoDB: conditions hold under concurrency."""

from concurrent.futures import ThreadPoolExecutor

from chalicelib import wiring
from chalicelib.stores.ledger_model import Claim, Entry


def test_of_many_concurrent_claims_on_one_recipient_exactly_one_wins(stack, uid):
    ledger = wiring.container().ledger
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: ledger.claim(f"u{uid}", "c1", "one@example.org", 300), range(32)))
    assert sum(isinstance(r, Claim) for r in results) == 1
    assert all(isinstance(r, Entry) for r in results if not isinstance(r, Claim))


def test_a_claim_is_retaken_only_after_it_expires_or_is_released(stack, uid):
    ledger = wiring.container().ledger
    first = ledger.claim(f"u{uid}", "c1", "a@example.org", 300)
    assert isinstance(first, Claim)
    assert isinstance(ledger.claim(f"u{uid}", "c1", "a@example.org", 300), Entry)
    ledger.unclaim(first)
    second = ledger.claim(f"u{uid}", "c1", "a@example.org", 0)  # a claim that expires at once
    assert isinstance(second, Claim)
    third = ledger.claim(f"u{uid}", "c1", "a@example.org", 300)  # the stale one is retaken
    assert isinstance(third, Claim)
    assert not ledger.finish(second, "sent", message_id="late")  # the stale holder lost its claim
    assert ledger.finish(third, "sent", message_id="m-1")
    again = ledger.claim(f"u{uid}", "c1", "a@example.org", 300)
    assert isinstance(again, Entry) and again.state == "sent" and again.message_id == "m-1"


def test_precompile_never_moves_a_sent_recipient_back_to_queued(stack, uid):
    ledger = wiring.container().ledger
    claim = ledger.claim(f"u{uid}", "c1", "fast@example.org", 300)
    ledger.finish(claim, "sent", message_id="m")
    assert ledger.record_queued(f"u{uid}", "c1", ["fast@example.org"]) == 0
    assert ledger.get(f"u{uid}", "c1", "fast@example.org").state == "sent"
    assert ledger.recorded(f"u{uid}", "c1", ["FAST@example.org", "other@example.org"]) == {"fast@example.org": "sent"}


def test_the_send_event_records_sent_only_when_no_outcome_is_recorded_and_writes_nothing_otherwise(
    stack, uid, monkeypatch
):
    ledger = wiring.container().ledger
    user = f"u{uid}"
    ledger.record_queued(user, "c1", ["died@example.org", "done@example.org"])
    claim = ledger.claim(user, "c1", "done@example.org", 300)
    ledger.finish(claim, "sent", message_id="m-done")
    # The sender died after SES accepted: the event records it.
    assert ledger.record_sent_event(user, "c1", "died@example.org", "m-died") is True
    assert ledger.get(user, "c1", "died@example.org").state == "sent"
    # The usual case: the outcome is there; a read answers it and no conditional write is spent.
    model = ledger._model
    writes = []
    real_update = model.update
    monkeypatch.setattr(model, "update", lambda self, *a, **k: writes.append(1) or real_update(self, *a, **k))
    assert ledger.record_sent_event(user, "c1", "done@example.org", "m-done") is False
    assert ledger.record_sent_event(user, "c1", "died@example.org", "m-died") is False
    assert writes == []
    assert ledger.get(user, "c1", "done@example.org").message_id == "m-done"
