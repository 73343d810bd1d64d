"""The DynamoDB ledger's own costs. Its behaviour, the same for FakeLedger: tests/contract/test_ledger_contract.py."""

from chalicelib import wiring
from chalicelib.stores.ledger_model import LedgerModel
from chalicelib.stores.ports.ledger import Claim
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


def _answer_lost(monkeypatch):
    """Each write is made, and then answered as its SDK retry would be: refused, the write found done."""
    from chalicelib.stores import ledger as ledger_module

    real = ledger_module.apply_one

    def made_then_refused(write):
        real(write)
        return False

    monkeypatch.setattr(ledger_module, "apply_one", made_then_refused)


def test_a_claim_whose_answer_was_lost_is_still_ours(stack, uid, monkeypatch):
    """No client request token on a single UpdateItem: botocore's retry of a claim that went through meets
    its own claim. Taken for another's, the recipient would wait out the claim's hold (30 minutes)."""
    ledger = wiring.container().ledger
    user = f"u{uid}"
    ledger.record_queued(user, "c1", ["a@example.org"])
    _answer_lost(monkeypatch)
    claim = ledger.claim(user, "c1", "a@example.org", 300)
    assert isinstance(claim, Claim)
    assert ledger.finish(claim, "sent", message_id="m-a") is True  # its answer lost too: still this write's
    monkeypatch.undo()
    assert not isinstance(ledger.claim(user, "c1", "a@example.org", 300), Claim)  # sent: nobody claims it again


def test_an_outcome_recorded_first_by_ses_s_send_event_is_not_the_drainers(stack, uid, monkeypatch):
    ledger = wiring.container().ledger
    user = f"u{uid}"
    ledger.record_queued(user, "c1", ["b@example.org"])
    claim = ledger.claim(user, "c1", "b@example.org", 300)
    assert isinstance(claim, Claim)
    assert ledger.record_sent_event(user, "c1", "b@example.org", "m-b") is True  # the event came first
    assert ledger.finish(claim, "sent", message_id="m-b") is False  # counted by the event, not again here
    other = ledger.claim(user, "c1", "c@example.org", 300)  # a claim taken by another drainer meanwhile
    assert isinstance(other, Claim)
    _answer_lost(monkeypatch)
    assert not isinstance(ledger.claim(user, "c1", "c@example.org", 300), Claim)
