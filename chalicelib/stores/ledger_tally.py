"""What a campaign's ledger says its counters are: the recount's side of "the counters follow the ledger".

The recorder (chalicelib.stores.recorder) counts each transition as it records it, which is fast but not
exact: a handler killed between its ledger write and its counters' write, or a counter write that fails past
its retries, loses the count, and the retry finds the transition recorded and counts nothing. The ledger
is the record of truth, and every counter is a function of its rows:

- an outcome (`sent`, `failed`, `rejected`, `suppressed`, `cancelled`, `expired`): the rows in that state
  (a Reject moves a row from sent to failed, retry-failed from failed to queued: the counters move alike);
- a kind of feedback (`delivered` ... `clicked`): the rows with its `<kind>_at`, recorded once per row;
- `retried`: the rows' `retries` (failed recipients queued again);
- `queued`, `scheduled`, `released`: the rows with `queued_at`, `kept_at`, `released_at`, the times each
  entered the queue, the schedule store, and left it (chalicelib.stores.ledger). Rows written before those
  times were kept have none, so for a campaign begun before (its counters item says: `entries_marked`)
  these three are not recounted.

Pure: chalicelib.stores.ledger reads the rows, chalicelib.jobs.recount compares and corrects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chalicelib.stores.ledger_model import CANCELLED, EXPIRED, FAILED, FEEDBACK, REJECTED, SENT, SUPPRESSED
from chalicelib.stores.ports.ledger import Tally

OUTCOMES = (SENT, FAILED, REJECTED, SUPPRESSED, CANCELLED, EXPIRED)
ENTRIES = {"queued": "queued_at", "scheduled": "kept_at", "released": "released_at"}
# Every counter the ledger states (chalicelib.stores.campaign_stats.COUNTERS, in another order).
STATED = (*OUTCOMES, *FEEDBACK, "retried", *ENTRIES)
# The attributes a tally reads of each row (`updated_at`: every write that moves a counter sets it).
READ = ("state", "retries", "updated_at", *(f"{k}_at" for k in FEEDBACK), *ENTRIES.values())


def tally(rows: Iterable[Mapping[str, Any]]) -> Tally:
    """The counters of these rows (each a mapping of the READ attributes it has)."""
    counts = dict.fromkeys(STATED, 0)
    n, latest = 0, 0
    for row in rows:
        n += 1
        state = row.get("state")
        if state in OUTCOMES:
            counts[state] += 1
        for kind in FEEDBACK:
            if row.get(f"{kind}_at") is not None:
                counts[kind] += 1
        for name, attribute in ENTRIES.items():
            if row.get(attribute) is not None:
                counts[name] += 1
        counts["retried"] += int(row.get("retries") or 0)
        latest = max(latest, int(row.get("updated_at") or 0))
    return Tally(counts, n, latest)
