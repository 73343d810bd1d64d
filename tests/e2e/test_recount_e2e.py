"""Counts lost with the handlers that held them come back from the ledger, through the stack's own stream.

Every count of one tenant's campaign is dropped on its way to the counters, as if each handler that held
one (precompile's, the drainer's, SES's events') were killed before its flush; a retry would count
nothing, the transitions being recorded. The ledger's stream consumer (webhook_events, as deployed) notes
the campaign, and the recount, with its clock moved past the settling time rather than waited for, makes
the counters what the ledger says, once.
"""

from __future__ import annotations

import time

import pytest

from chalicelib import wiring
from chalicelib.jobs.recount import Recount
from chalicelib.stores.campaign_stats import BufferedStats
from tests.contract.test_recount import OnlyOf
from tests.e2e.test_feedback_e2e import OK, _campaign
from tests.e2e.test_pipeline_e2e import _tenant

pytestmark = pytest.mark.e2e


def _eventually(check, within_s: float = 30.0) -> bool:
    deadline = time.time() + within_s
    while not check():
        if time.time() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_campaign_whose_every_count_died_with_its_handlers_is_counted_once_by_the_recount(stack, monkeypatch, uid):
    user, c = f"tenant-{uid}", wiring.container()
    sender = _tenant(stack, uid, rate=50, ses_rate=50)
    real_flush = BufferedStats.flush

    def killed_before_writing(self: BufferedStats) -> None:
        with self._lock:  # this tenant's counts go with the process; every other tenant's are written
            self._pending = {k: v for k, v in self._pending.items() if k[0] != user}
        real_flush(self)

    monkeypatch.setattr(BufferedStats, "flush", killed_before_writing)
    people = [OK.replace("success@", f"success+{i}@") for i in range(20)]
    _campaign(stack, user, sender, "lost", people)
    assert _eventually(lambda: c.ledger.tally(user, "lost")["delivered"] == 20)
    counters = c.stats.read(user, "lost")
    assert counters is not None and (counters["queued"], counters["sent"], counters["delivered"]) == (0, 0, 0)
    # Noted by the deployed stream consumer, from the ledger's own changes.
    notes = OnlyOf(c.recounts, user)
    assert _eventually(lambda: any(n.campaign_id == "lost" for n in notes.settled(10**15)))
    monkeypatch.setattr(BufferedStats, "flush", real_flush)

    settle_s = stack.settings.recount_settle_s
    assert settle_s >= 900  # the deployed setting: the recount below moves its clock past it
    moved = time.time() + settle_s + 60
    result = Recount(notes, c.ledger, c.stats, settle_s, clock=lambda: moved).run(lambda: 300_000)
    counters = c.stats.read(user, "lost")
    assert counters is not None
    assert (counters["queued"], counters["sent"], counters["delivered"]) == (20, 20, 20)
    assert result.drift == {"queued": 20, "sent": 20, "delivered": 20}
    # Once: the stream notes the campaign again for any later change, and a second recount adds nothing.
    c.recounts.note([f"{user}#lost"])
    Recount(notes, c.ledger, c.stats, settle_s, clock=lambda: moved + 1).run(lambda: 300_000)
    again = c.stats.read(user, "lost")
    assert again is not None and (again["queued"], again["sent"], again["delivered"]) == (20, 20, 20)
