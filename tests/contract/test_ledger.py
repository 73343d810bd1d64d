"""The DynamoDB ledger's own costs. Its behaviour, the same for FakeLedger: tests/contract/test_ledger_contract.py."""

from chalicelib import wiring
from chalicelib.stores.ledger_model import Claim, LedgerModel
from chalicelib.stores.tables import bound


def test_a_send_event_for_a_recipient_with_an_outcome_spends_no_conditional_write(stack, uid, monkeypatch):
    ledger = wiring.container().ledger
    user = f"u{uid}"
    ledger.record_queued(user, "c1", ["died@example.org", "done@example.org", "open@example.org"])
    claim = ledger.claim(user, "c1", "done@example.org", 300)
    assert isinstance(claim, Claim)
    ledger.finish(claim, "sent", message_id="m-done")
    assert ledger.record_sent_event(user, "c1", "died@example.org", "m-died") is True
    # The usual case: the outcome is there; a read answers it and no conditional write is spent.
    settings = wiring.container().settings
    model = bound(LedgerModel, settings.resources.ledger_table.name, settings.region)  # the store's own (one a table)
    writes = []
    real_update = model.update
    monkeypatch.setattr(model, "update", lambda self, *a, **k: writes.append(1) or real_update(self, *a, **k))
    assert ledger.record_sent_event(user, "c1", "done@example.org", "m-done") is False
    assert ledger.record_sent_event(user, "c1", "died@example.org", "m-died") is False
    assert writes == []
    # ...and the count sees the store's writes: a recipient still open spends its one.
    assert ledger.record_sent_event(user, "c1", "open@example.org", "m-open") is True
    assert writes == [1]
    assert ledger.get(user, "c1", "done@example.org").message_id == "m-done"
    assert ledger.get(user, "c1", "died@example.org").state == "sent"
