"""The ledger's contract (chalicelib.stores.ports.ledger: LedgerRecords, LedgerClaims, LedgerReads), on FakeLedger
and on the DynamoDB ledger: the conditions that make sending exactly-once."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import pytest

from chalicelib.stores.ledger import Ledger
from chalicelib.stores.ports.ledger import Claim, Entry, LedgerClaims, LedgerReads, LedgerRecords
from tests.contract.conftest import real_container
from tests.fakes.ledger import FakeLedger


class LedgerPort(LedgerClaims, LedgerRecords, LedgerReads, Protocol):
    """Every ledger port at once: what both sides must be."""


def fake() -> LedgerPort:
    return FakeLedger()


def real(ledger: Ledger) -> LedgerPort:
    return ledger


@pytest.fixture
def ledger(side: str, request: pytest.FixtureRequest) -> LedgerPort:
    return fake() if side == "fake" else real(real_container(request).ledger)


class TestLedgerContract:
    def test_of_many_concurrent_claims_on_one_recipient_exactly_one_wins(self, ledger: LedgerPort, uid: str) -> None:
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda _: ledger.claim(f"u{uid}", "c1", "one@example.org", 300), range(32)))
        assert sum(isinstance(r, Claim) for r in results) == 1
        assert all(isinstance(r, Entry) for r in results if not isinstance(r, Claim))

    def test_a_claim_is_retaken_only_after_it_expires_or_is_released(self, ledger: LedgerPort, uid: str) -> None:
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

    def test_precompile_never_moves_a_sent_recipient_back_to_queued(self, ledger: LedgerPort, uid: str) -> None:
        claim = ledger.claim(f"u{uid}", "c1", "fast@example.org", 300)
        assert isinstance(claim, Claim)
        ledger.finish(claim, "sent", message_id="m")
        assert ledger.record_queued(f"u{uid}", "c1", ["fast@example.org"]) == 0
        assert ledger.recorded(f"u{uid}", "c1", ["fast@example.org"]) == {"fast@example.org": "sent"}
        assert ledger.recorded(f"u{uid}", "c1", ["FAST@example.org", "other@example.org"]) == {
            "fast@example.org": "sent"
        }

    def test_the_send_event_records_sent_only_when_no_outcome_is_recorded(self, ledger: LedgerPort, uid: str) -> None:
        user = f"u{uid}"
        ledger.record_queued(user, "c1", ["died@example.org", "done@example.org"])
        claim = ledger.claim(user, "c1", "done@example.org", 300)
        assert isinstance(claim, Claim)
        ledger.finish(claim, "sent", message_id="m-done")
        # The sender died after SES accepted: the event records it.
        assert ledger.record_sent_event(user, "c1", "died@example.org", "m-died") is True
        assert ledger.recorded(user, "c1", ["died@example.org"]) == {"died@example.org": "sent"}
        assert ledger.record_sent_event(user, "c1", "done@example.org", "m-done") is False
        assert ledger.record_sent_event(user, "c1", "died@example.org", "m-died") is False
        again = ledger.claim(user, "c1", "done@example.org", 300)
        assert isinstance(again, Entry) and again.message_id == "m-done"

    def test_recorded_answers_by_lower_cased_address_and_only_for_known_recipients(
        self, ledger: LedgerPort, uid: str
    ) -> None:
        user = f"u{uid}"
        assert ledger.recorded(user, "c1", ["Nobody@Example.org"]) == {}
        assert ledger.record_queued(user, "c1", ["Mixed@Example.org"]) == 1
        assert ledger.record_rejected(user, "c1", [("bad@example.org", "no sender")]) == 1
        assert ledger.record_suppressed(user, "c1", [("gone@example.org", "bounced")]) == 1
        assert ledger.recorded(user, "c1", ["mixed@example.org", "BAD@example.org", "gone@example.org"]) == {
            "mixed@example.org": "queued",
            "bad@example.org": "rejected",
            "gone@example.org": "suppressed",
        }

    def test_a_state_is_recorded_once_and_never_over_another(self, ledger: LedgerPort, uid: str) -> None:
        user = f"u{uid}"
        assert ledger.record_scheduled(user, "c1", ["s@example.org"]) == 1
        assert ledger.record_queued(user, "c1", ["s@example.org", "q@example.org"]) == 1
        assert ledger.record_rejected(user, "c1", [("q@example.org", "late")]) == 0
        assert ledger.recorded(user, "c1", ["s@example.org", "q@example.org"]) == {
            "s@example.org": "scheduled",
            "q@example.org": "queued",
        }

    def test_released_moves_only_scheduled_recipients_to_queued(self, ledger: LedgerPort, uid: str) -> None:
        user = f"u{uid}"
        ledger.record_scheduled(user, "c1", ["s@example.org"])
        ledger.record_rejected(user, "c1", [("r@example.org", "no")])
        assert ledger.record_released(user, "c1", ["s@example.org", "r@example.org", "new@example.org"]) == 1
        assert ledger.recorded(user, "c1", ["s@example.org", "r@example.org", "new@example.org"]) == {
            "s@example.org": "queued",
            "r@example.org": "rejected",
        }

    def test_unsent_takes_open_unclaimed_recipients_only(self, ledger: LedgerPort, uid: str) -> None:
        user = f"u{uid}"
        ledger.record_queued(user, "c1", ["open@example.org", "held@example.org", "done@example.org"])
        assert isinstance(ledger.claim(user, "c1", "held@example.org", 300), Claim)
        done = ledger.claim(user, "c1", "done@example.org", 300)
        assert isinstance(done, Claim) and ledger.finish(done, "sent", message_id="m")
        emails = ["open@example.org", "held@example.org", "done@example.org"]
        assert ledger.record_unsent(user, "c1", "cancelled", emails, "cancelled by the tenant") == 1
        assert ledger.recorded(user, "c1", emails) == {
            "open@example.org": "cancelled",
            "held@example.org": "queued",
            "done@example.org": "sent",
        }

    def test_a_failed_recipient_is_reopened_then_retaken_until_claimed_and_a_sent_one_never(
        self, ledger: LedgerPort, uid: str
    ) -> None:
        user = f"u{uid}"
        for address, state in (("f@example.org", "failed"), ("s@example.org", "sent")):
            claim = ledger.claim(user, "c1", address, 300)
            assert isinstance(claim, Claim) and ledger.finish(claim, state, reason="why")
        assert ledger.reopen(user, "c1", "f@example.org") == "failed"
        # Asked again (the first request may have died before its copy reached the queue): taken again, at
        # once, and counted once; once a drainer claims it, no longer.
        assert ledger.reopen(user, "c1", "f@example.org") == "queued"
        assert ledger.reopen(user, "c1", "s@example.org") is None
        assert ledger.recorded(user, "c1", ["f@example.org", "s@example.org"]) == {
            "f@example.org": "queued",
            "s@example.org": "sent",
        }
        (entry,) = ledger.entries(user, "c1", states=("failed", "queued"))
        assert (entry.email, entry.retries) == ("f@example.org", 1)
        assert isinstance(ledger.claim(user, "c1", "f@example.org", 300), Claim)
        assert ledger.reopen(user, "c1", "f@example.org") is None  # a drainer is sending it

    def test_a_reject_event_fails_that_send_only_and_says_what_it_replaced(self, ledger: LedgerPort, uid: str) -> None:
        user = f"u{uid}"
        claim = ledger.claim(user, "c1", "a@example.org", 300)
        assert isinstance(claim, Claim) and ledger.finish(claim, "sent", message_id="m-1")
        assert ledger.record_failed_event(user, "c1", "a@example.org", "m-other", "rejected") is None
        assert ledger.record_failed_event(user, "c1", "a@example.org", "m-1", "rejected") == "sent"
        assert ledger.recorded(user, "c1", ["a@example.org"]) == {"a@example.org": "failed"}

    def test_feedback_is_recorded_once_per_kind_and_only_for_its_send(self, ledger: LedgerPort, uid: str) -> None:
        user = f"u{uid}"
        claim = ledger.claim(user, "c1", "a@example.org", 300)
        assert isinstance(claim, Claim) and ledger.finish(claim, "sent", message_id="m-1")
        assert ledger.record_feedback(user, "c1", "a@example.org", "delivered", "ok", "m-other") is False
        assert ledger.record_feedback(user, "c1", "a@example.org", "delivered", "ok", "m-1") is True
        assert ledger.record_feedback(user, "c1", "a@example.org", "delivered", "ok", "m-1") is False
        assert ledger.recorded(user, "c1", ["a@example.org"]) == {"a@example.org": "sent"}

    def test_a_delivery_handled_after_a_complaint_leaves_the_complaint_shown(
        self, ledger: LedgerPort, uid: str
    ) -> None:
        """A batch's events run several at once: SES's Delivery may be recorded after its Complaint."""
        user = f"u{uid}"
        claim = ledger.claim(user, "c1", "a@example.org", 300)
        assert isinstance(claim, Claim) and ledger.finish(claim, "sent", message_id="m-1")
        assert ledger.record_feedback(user, "c1", "a@example.org", "complained", "abuse", "m-1") is True
        assert ledger.record_feedback(user, "c1", "a@example.org", "delivered", "ok", "m-1") is True
        assert [e.feedback for e in ledger.entries(user, "c1")] == ["complained: abuse"]

    def test_an_open_or_clicks_context_is_its_send_its_delivery_and_its_first_click(
        self, ledger: LedgerPort, uid: str
    ) -> None:
        """What chalicelib.ingest.machines judges a hit against, as the ledger keeps it on both sides."""
        user = f"u{uid}"
        assert ledger.hit_context(user, "c1", "a@example.org") is None  # no such recipient
        before = int(time.time() * 1000)
        claim = ledger.claim(user, "c1", "A@example.org", 300)
        assert isinstance(claim, Claim) and ledger.finish(claim, "sent", message_id="m-1")
        context = ledger.hit_context(user, "c1", "a@example.org")
        assert context is not None and context.sent_at is not None and before <= context.sent_at <= before + 60_000
        assert (context.delivered_at, context.first_click_at, context.first_click) == (None, None, None)
        ses_time = before - 1234  # SES's own time of the delivery, before moonsend handled its event
        assert ledger.record_feedback(user, "c1", "a@example.org", "delivered", "ok", "m-1", happened_at_ms=ses_time)
        url = "https://shop.example/a"
        assert ledger.record_feedback(user, "c1", "a@example.org", "machine_clicked", url, evidence="a HEAD request")
        assert ledger.record_feedback(user, "c1", "a@example.org", "clicked", "https://shop.example/b")
        context = ledger.hit_context(user, "c1", "a@example.org")
        assert context is not None and context.delivered_at == ses_time and context.first_click_at is not None
        assert context.first_click == url  # the first click's link, whoever's it was
        # The machine's is recorded once, apart from the person's.
        assert not ledger.record_feedback(user, "c1", "a@example.org", "machine_clicked", url, evidence="again")

    def test_a_send_recorded_from_ses_s_send_event_is_timed_too(self, ledger: LedgerPort, uid: str) -> None:
        user = f"u{uid}"
        ledger.record_queued(user, "c1", ["a@example.org"])
        assert ledger.record_sent_event(user, "c1", "a@example.org", "m-1")
        context = ledger.hit_context(user, "c1", "a@example.org")
        assert context is not None and context.sent_at is not None

    def test_outcomes_are_read_for_many_campaigns_at_once_past_a_requests_hundred_keys(
        self, ledger: LedgerPort, uid: str
    ) -> None:
        """A batch of SES's Send events reads its recipients together: across tenants and campaigns, more than
        one BatchGetItem's hundred keys, the same recipient twice, an address in another case."""
        user, other = f"u{uid}", f"v{uid}"
        people = [f"p{i}@example.org" for i in range(130)]
        ledger.record_queued(user, "c1", people)
        for person in people[:120]:
            claim = ledger.claim(user, "c1", person, 300)
            assert isinstance(claim, Claim) and ledger.finish(claim, "sent", message_id=f"m-{person}")
        claim = ledger.claim(other, "c2", "q@example.org", 300)
        assert isinstance(claim, Claim) and ledger.finish(claim, "failed", reason="refused")
        ledger.claim(other, "c2", "held@example.org", 300)  # claimed, no outcome yet
        asked = [(user, "c1", p) for p in people]
        asked += [(user, "c1", "P0@Example.org"), (user, "c1", people[0]), (other, "c2", "q@example.org")]
        asked += [(other, "c2", "held@example.org"), (other, "c2", "nobody@example.org")]
        found = ledger.with_outcome(asked)
        # What the read found decides nothing alone: the write after it does (`read_first=False`).
        assert ledger.record_sent_event(user, "c1", people[0], "m-late", read_first=False) is False
        assert ledger.record_sent_event(user, "c1", people[125], "m-125", read_first=False) is True
        expected = {(user, "c1", p) for p in people[:120]}
        expected |= {(user, "c1", "P0@Example.org"), (other, "c2", "q@example.org")}
        assert found == expected
        assert ledger.with_outcome([]) == set()
