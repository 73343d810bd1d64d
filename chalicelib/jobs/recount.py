"""recount_campaigns: each campaign's counters made equal to what its ledger says, once its changes settle.

The recorder counts as it records (chalicelib.stores.recorder), so progress shows within a second; but a
count is lost if its handler is killed between the ledger's write and the counters' (a timeout, a lost
sandbox, a write throttled past its retries), and the retry counts nothing, finding the transition
recorded. The ledger's stream carries every write all the same: its consumer notes the campaign
(chalicelib.stores.recounts), and this job, every few minutes, recounts each noted campaign whose last
change is `settle_s` old and adds what the counters lack (or take what they have too many: an `ADD` the SDK
sent twice) to them.

Why a correction never counts twice: a count lands within BufferedStats' STALE_S of its change or not at all
(older ones are dropped: chalicelib.stores.campaign_stats), and `settle_s` is longer than that and than any
function's timeout. So once every row is `settle_s` old (the tally says when the latest changed), every
count of them that will ever land has landed, and the counters read before the tally are final for them;
the correction is conditioned on the counters read, so a count of a later change landing meanwhile makes it
wait for the next run. A change after the tally is counted by its own writer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chalicelib.core import log
from chalicelib.stores.ledger_tally import ENTRIES, STATED
from chalicelib.stores.ports.campaigns import CampaignCounts, CounterCorrections
from chalicelib.stores.ports.events import RecountNote, RecountNotes
from chalicelib.stores.ports.ledger import LedgerPages

# Stop taking campaigns with this much of the invocation left (a tally of a large campaign takes seconds).
STOP_WITH_MS = 30_000


@dataclass
class RecountResult:
    recounted: int = 0  # campaigns whose counters were compared with their ledger
    corrected: int = 0  # of those, the ones whose counters differed, and were corrected
    waiting: int = 0  # changed again, or counted meanwhile: recounted by a later run
    left: int = 0  # not reached before the invocation's time ran short
    drift: dict[str, int] = field(default_factory=dict)  # what was added to each counter, all campaigns


class Recount:
    def __init__(
        self,
        notes: RecountNotes,
        ledger: LedgerPages,
        counters: CounterCorrections,
        settle_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._notes = notes
        self._ledger = ledger
        self._counters = counters
        self._settle_ms = int(settle_s * 1000)
        self._clock = clock

    def run(self, remaining_ms: Callable[[], int]) -> RecountResult:
        result = RecountResult()
        now_ms = int(self._clock() * 1000)
        for note in self._notes.settled(now_ms - self._settle_ms):
            if remaining_ms() < STOP_WITH_MS:
                result.left += 1
                continue
            self._recount(note, now_ms, result)
        log.info(
            "recounted",
            campaigns=result.recounted,
            corrected=result.corrected,
            waiting=result.waiting,
            left=result.left,
            drift=result.drift or None,
        )
        return result

    def _recount(self, note: RecountNote, now_ms: int, result: RecountResult) -> None:
        user_id, campaign_id = note.user_id, note.campaign_id
        read = self._counters.read(user_id, campaign_id) or CampaignCounts(user_id, campaign_id)
        tally = self._ledger.tally(user_id, campaign_id)
        if tally.latest_ms > now_ms - self._settle_ms:
            result.waiting += 1  # a row changed after its note was read: its count may still be on its way
            return
        result.recounted += 1
        # A campaign begun before the ledger kept its rows' entry times: those three counters it cannot state.
        names = STATED if read.entries_marked else tuple(n for n in STATED if n not in ENTRIES)
        drift = {name: tally[name] - read[name] for name in names}
        if any(drift.values()):
            if not self._counters.correct(read, drift):
                result.waiting += 1
                return
            result.corrected += 1
            moved = {name: delta for name, delta in drift.items() if delta}
            for name, delta in moved.items():
                result.drift[name] = result.drift.get(name, 0) + delta
            # Not an error of the tenant's: a handler was killed, or a write failed past its retries, and its
            # count was lost. Seen often, it says which stage loses counts.
            log.warning("counters corrected from the ledger", user=user_id, campaign=campaign_id, drift=moved)
        if not self._notes.done(note):
            result.waiting += 1
