"""The recount (chalicelib.jobs.recount) on the local stack's DynamoDB: the ledger's tally states every counter
the recorder keeps, and a count the recorder lost comes back once the campaign settles, exactly once."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator

import pytest

from chalicelib import wiring
from chalicelib.core import aws
from chalicelib.jobs.recount import Recount
from chalicelib.stores.campaign_stats import COUNTERS
from chalicelib.stores.ledger_model import CANCELLED, EXPIRED, FAILED, FEEDBACK, MACHINE_OF, SENT
from chalicelib.stores.ledger_tally import ENTRIES, STATED
from chalicelib.stores.ports.events import RecountNote
from chalicelib.stores.ports.ledger import Claim
from chalicelib.stores.recounts import NOTE_AGAIN_AFTER_S, Recounts

SETTLE_S = 900.0
pytestmark = pytest.mark.usefixtures("stack")


def _later(s: float = SETTLE_S + 60) -> float:
    return time.time() + s


class OnlyOf:
    """The notes of one test's tenant: a recount with its clock moved must not take another test's campaign,
    whose counts may well be on their way."""

    def __init__(self, notes: Recounts, user: str) -> None:
        self._notes, self._user = notes, user

    def settled(self, before_ms: int) -> Iterator[RecountNote]:
        return (n for n in self._notes.settled(before_ms) if n.user_id == self._user)

    def done(self, note: RecountNote) -> bool:
        return self._notes.done(note)


def _recount(clock_s: float, user: str) -> Recount:
    c = wiring.container()
    return Recount(OnlyOf(c.recounts, user), c.ledger, c.stats, SETTLE_S, clock=lambda: clock_s)


MACHINE_KINDS = tuple(MACHINE_OF.values())


def _counters(user: str, campaign: str) -> dict[str, int]:
    read = wiring.container().stats.read(user, campaign)
    return {name: read[name] if read else 0 for name in COUNTERS}


def _fix_sender(user: str, campaign: str) -> None:
    """The campaign's first message: its sender fixed, which marks it as one whose rows carry entry times."""
    from chalicelib.stores.ports.campaigns import SenderSnapshot

    c = wiring.container()
    snapshot = SenderSnapshot("paid", "news@example.org", "News", "us-east-1", 10.0, None, None)
    c.campaign_senders.fix(user, campaign, snapshot, "Hello")


class TestTheTallyStatesEveryCounter:
    def test_every_transition_the_recorder_counts_moves_the_tally_alike(self, uid: str) -> None:
        # Every way a recipient's row moves, in a random order over a few recipients: after each step the
        # ledger's tally equals the counters the recorder wrote, counter by counter (all sixteen).
        c = wiring.container()
        user, campaign = f"u{uid}", "c1"
        _fix_sender(user, campaign)
        recorder, ledger = c.recorder, c.ledger
        rng = random.Random(7)  # the same walk every run
        people = [f"p{i}@example.org" for i in range(40)]
        claims: dict[str, Claim] = {}

        def fresh(who: str) -> bool:
            """Precompile queues or keeps only recipients the ledger does not know yet (chalicelib.ingest)."""
            return not ledger.recorded(user, campaign, [who])

        def step(kind: str, who: str) -> None:
            if kind == "queued" and fresh(who):
                recorder.queued(user, campaign, [who])
            elif kind == "drainer faster" and fresh(who):  # sent before precompile recorded it queued
                claim = ledger.claim(user, campaign, who, 60)
                assert isinstance(claim, Claim)
                recorder.finished(claim, user, campaign, who, SENT, message_id=f"m-{who}")
                recorder.queued(user, campaign, [who])
            elif kind == "scheduled" and fresh(who):
                recorder.scheduled(user, campaign, [who])
            elif kind == "released":
                recorder.released(user, campaign, [who])
            elif kind == "rejected":
                recorder.rejected(user, campaign, [(who, "address: not an address")])
            elif kind == "suppressed":
                recorder.suppressed(user, campaign, [(who, "suppressed: bounced")])
            elif kind in (CANCELLED, EXPIRED):
                recorder.unsent(user, campaign, kind, [who], f"{kind} by a test")
            elif kind == "claim" and ledger.recorded(user, campaign, [who]).get(who) == "queued":  # on the queue
                claim = ledger.claim(user, campaign, who, 0.001)
                if isinstance(claim, Claim):
                    claims[who] = claim
            elif kind in (SENT, FAILED) and who in claims:
                recorder.finished(
                    claims.pop(who), user, campaign, who, kind, reason="550 no" if kind == FAILED else None
                )
            elif kind == "send event":
                recorder.sent_event(user, campaign, who, f"m-{who}")
            elif kind == "reject event":
                recorder.failed_event(user, campaign, who, f"m-{who}", "Rejected: virus")
            elif kind == "retry":
                recorder.reopened(user, campaign, who)
            elif kind in FEEDBACK:
                recorder.feedback(user, campaign, who, kind, "said so")

        kinds = [
            "queued",
            "drainer faster",
            "scheduled",
            "released",
            "rejected",
            "suppressed",
            CANCELLED,
            EXPIRED,
            "claim",
            SENT,
        ]
        # The walk as it was before machines' opens and clicks were counted (their kinds would change its choices:
        # the note of session 40 says what another walk found); they follow it, on recipients it reached.
        kinds += [FAILED, "send event", "reject event", "retry", *(k for k in FEEDBACK if k not in MACHINE_KINDS)]
        seen = dict.fromkeys(STATED, 0)

        def check(n: int | str) -> None:
            nonlocal seen
            tally = ledger.tally(user, campaign)
            counters = _counters(user, campaign)
            assert {n: tally[n] for n in STATED} == {n: counters[n] for n in STATED}, f"step {n}"
            seen = {name: max(seen[name], tally[name]) for name in STATED}

        for n in range(400):
            step(rng.choice(kinds), rng.choice(people))
            check(n)
        for i, who in enumerate(people[:12]):
            step(MACHINE_KINDS[i % 2], who)
            check(f"{MACHINE_KINDS[i % 2]} {who}")
        assert [name for name, most in seen.items() if most == 0] == []  # the walk moved every counter


class TestTheRecount:
    def test_a_count_lost_before_its_flush_is_restored_once_the_campaign_settles(self, uid: str) -> None:
        # A handler killed after its ledger writes and before its counters' flush: the counts are gone, and a
        # retry finds the transitions recorded and counts nothing. The stream noted the campaign.
        c = wiring.container()
        user, campaign = f"u{uid}", "c1"
        _fix_sender(user, campaign)
        killed = c.recorder.gathering()  # counts kept in memory until a flush that never comes
        killed.queued(user, campaign, ["a@example.org", "b@example.org"])
        claim = c.ledger.claim(user, campaign, "a@example.org", 60)
        assert isinstance(claim, Claim)
        killed.finished(claim, user, campaign, "a@example.org", SENT, message_id="m-a")
        killed.feedback(user, campaign, "a@example.org", "bounced", "550 gone")
        assert _counters(user, campaign)["sent"] == 0
        c.recounts.note([f"{user}#{campaign}"])

        early = _recount(time.time() + 5, user).run(lambda: 300_000)  # not settled: nothing read, nothing written
        assert early.recounted == 0 and _counters(user, campaign)["sent"] == 0
        result = _recount(_later(), user).run(lambda: 300_000)
        counters = _counters(user, campaign)
        assert (counters["queued"], counters["sent"], counters["bounced"]) == (2, 1, 1)
        assert result.corrected >= 1 and result.drift.get("sent", 0) >= 1
        # Once: the note is gone, and a second run (or the same counts found again) adds nothing.
        assert f"{user}#{campaign}" not in {f"{n.user_id}#{n.campaign_id}" for n in c.recounts.settled(10**15)}
        c.recounts.note([f"{user}#{campaign}"])
        _recount(_later(), user).run(lambda: 300_000)
        assert _counters(user, campaign) == counters

    def test_a_message_precompiled_twice_at_once_counts_its_recipients_queued_once_after_the_recount(
        self, uid: str
    ) -> None:
        # SNS delivers a message twice, to two containers at once: each finds the recipients new, queues them
        # (the claim makes the second copy harmless) and counts them queued. The ledger has one row each.
        c = wiring.container()
        user, campaign = f"u{uid}", "c1"
        _fix_sender(user, campaign)
        both = ["a@example.org", "b@example.org"]
        c.recorder.queued(user, campaign, both)
        c.recorder.queued(user, campaign, both)
        assert _counters(user, campaign)["queued"] == 4
        c.recounts.note([f"{user}#{campaign}"])
        result = _recount(_later(), user).run(lambda: 300_000)
        assert _counters(user, campaign)["queued"] == 2 and result.drift == {"queued": -2}

    def test_a_recipient_sent_before_its_killed_precompile_recorded_it_is_counted_queued_by_the_recount(
        self, uid: str
    ) -> None:
        # Precompile put the email on the queue and was killed before its record; a drainer claimed and sent
        # it; the redelivered message finds the recipient known and queues (and counts) nothing.
        c = wiring.container()
        user, campaign = f"u{uid}", "c1"
        _fix_sender(user, campaign)
        claim = c.ledger.claim(user, campaign, "a@example.org", 60)
        assert isinstance(claim, Claim)
        c.recorder.finished(claim, user, campaign, "a@example.org", SENT, message_id="m-a")
        assert c.ledger.recorded(user, campaign, ["a@example.org"]) == {"a@example.org": "sent"}  # not fresh
        assert _counters(user, campaign)["queued"] == 0
        c.recounts.note([f"{user}#{campaign}"])
        _recount(_later(), user).run(lambda: 300_000)
        assert (_counters(user, campaign)["queued"], _counters(user, campaign)["sent"]) == (1, 1)

    def test_a_count_added_twice_is_taken_back(self, uid: str) -> None:
        # DynamoDB's ADD retried by the SDK after a read timeout counts one bounce twice.
        c = wiring.container()
        user, campaign = f"u{uid}", "c1"
        _fix_sender(user, campaign)
        c.recorder.queued(user, campaign, ["a@example.org"])
        c.recorder.feedback(user, campaign, "a@example.org", "bounced", "550 gone")
        c.stats.add(user, campaign, bounced=1)  # the SDK's second copy of the same ADD
        c.recounts.note([f"{user}#{campaign}"])
        result = _recount(_later(), user).run(lambda: 300_000)
        assert _counters(user, campaign)["bounced"] == 1 and result.drift.get("bounced") == -1

    def test_a_campaign_changed_after_its_note_waits_for_a_later_run(self, uid: str) -> None:
        c = wiring.container()
        user, campaign = f"u{uid}", "c1"
        _fix_sender(user, campaign)
        c.recounts.note([f"{user}#{campaign}"], now_ms=int(time.time() * 1000) - int(SETTLE_S * 1000) - 60_000)
        c.recorder.gathering().queued(user, campaign, ["late@example.org"])  # a change now, its count in flight
        result = _recount(time.time(), user).run(lambda: 300_000)
        assert result.waiting == 1 and result.recounted == 0
        assert _counters(user, campaign)["queued"] == 0  # not counted here: its writer may still count it

    def test_a_correction_is_not_written_over_counters_that_moved_since_they_were_read(self, uid: str) -> None:
        c = wiring.container()
        user, campaign = f"u{uid}", "c1"
        _fix_sender(user, campaign)
        read = c.stats.read(user, campaign)
        assert read is not None
        c.stats.add(user, campaign, sent=1)  # a count landing between the read and the correction
        assert c.stats.correct(read, {"sent": 5}) is False
        assert _counters(user, campaign)["sent"] == 1

    def test_a_campaign_begun_before_rows_kept_their_entry_times_keeps_its_entry_counters(self, uid: str) -> None:
        # Its rows have no queued_at: a tally would say 0 queued. Only what the rows do state is recounted.
        c = wiring.container()
        user, campaign = f"u{uid}", "old"
        c.stats.add(user, campaign, queued=3)
        claim = c.ledger.claim(user, campaign, "a@example.org", 60)
        assert isinstance(claim, Claim)
        c.ledger.finish(claim, SENT, message_id="m")  # its count lost
        c.recounts.note([f"{user}#{campaign}"])
        _recount(_later(), user).run(lambda: 300_000)
        counters = _counters(user, campaign)
        assert counters["queued"] == 3 and counters["sent"] == 1
        assert set(ENTRIES) <= set(COUNTERS)

    def test_notes_of_a_batch_are_one_per_campaign_and_a_later_change_keeps_the_note(self, uid: str) -> None:
        now = [0.0]
        notes = _notes(lambda: now[0])
        pk = f"u{uid}#c1"
        notes.note([pk, pk, f"u{uid}#c2"], now_ms=1_000)
        mine = [n for n in notes.settled(2_000) if n.user_id == f"u{uid}"]
        assert sorted(n.campaign_id for n in mine) == ["c1", "c2"]
        first = next(n for n in mine if n.campaign_id == "c1")
        now[0] += NOTE_AGAIN_AFTER_S
        notes.note([pk], now_ms=1_500)  # the campaign changed again after the job read its note
        assert notes.done(first) is False
        assert [n.changed_ms for n in notes.settled(2_000) if n.user_id == f"u{uid}" and n.campaign_id == "c1"] == [
            1_500
        ]

    def test_a_process_notes_a_campaign_again_only_a_minute_after_its_last_note(self, uid: str) -> None:
        now, writes = [0.0], []
        notes = _notes(lambda: now[0])
        client = _recounts_client()

        def seen(params, **_):
            writes.append(len(json.loads(params["body"])["RequestItems"][notes_table()]))

        client.meta.events.register("before-call.dynamodb.BatchWriteItem", seen)
        try:
            pk = f"u{uid}#c1"
            notes.note([pk], now_ms=1_000)
            now[0] += NOTE_AGAIN_AFTER_S - 1
            notes.note([pk, f"u{uid}#c2"], now_ms=1_100)  # c1 noted by this process a moment ago: c2 only
            now[0] += 1
            notes.note([pk], now_ms=1_200)
        finally:
            client.meta.events.unregister("before-call.dynamodb.BatchWriteItem", seen)
        assert writes == [1, 1, 1]
        mine = {n.campaign_id: n.changed_ms for n in notes.settled(2_000) if n.user_id == f"u{uid}"}
        assert mine == {"c1": 1_200, "c2": 1_100}

    def test_a_short_settle_time_notes_again_within_a_tenth_of_it(self, uid: str) -> None:
        now = [0.0]
        notes = _notes(lambda: now[0], settle_s=10.0)
        pk = f"u{uid}#c1"
        notes.note([pk], now_ms=1_000)
        now[0] += 1.0
        notes.note([pk], now_ms=1_100)
        assert [n.changed_ms for n in notes.settled(2_000) if n.user_id == f"u{uid}"] == [1_100]


def notes_table() -> str:
    return wiring.container().settings.resources.recounts_table.name


def _recounts_client():
    settings = wiring.container().settings
    return aws.table_client(settings.region, notes_table())


def _notes(clock, settle_s: float = SETTLE_S) -> Recounts:
    """A process of its own (its own memory of what it noted), on the stage's table, with its clock."""
    settings = wiring.container().settings
    return Recounts(notes_table(), settings.region, settle_s, clock=clock)
