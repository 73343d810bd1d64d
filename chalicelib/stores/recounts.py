"""The campaigns whose ledger changed since their counters were last recounted from it.

The ledger's stream consumer (app.webhook_events) notes each campaign its batch changed, with the time; the
recount job (chalicelib.jobs.recount) takes those whose last change has settled, recounts them and removes
the note, unless a change came meanwhile (then it is noted later, and stays). The stream carries every
ledger write, whatever happened to the writer after it, so a campaign whose count was lost by a killed
handler is noted all the same.

One small item per campaign with recent changes; the job scans them all (there are as many as campaigns
changed in the last quarter hour or so). Kept at most a month: a note nobody takes is dropped by TTL.

A process notes a campaign again only once its own last note of it is `NOTE_AGAIN_AFTER_S` old (or a tenth
of the recount's settle time, if that is less: the local stage's tests shorten it): a stream
batch is a hundred changes, and writing each campaign's note for each batch cost 0.4 write units an email
(issue 53). A note may so be up to that much older than the change it stands for, far less than the recount's
settle time; the recount reads when each campaign's rows last changed before it counts (a campaign changed
meanwhile waits), and a note it takes was written more than its settle time ago, so no process holds it back
when the next change comes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError
from pynamodb.models import Model

from chalicelib.stores.ports.events import RecountNote
from chalicelib.stores.tables import bound, condition_failed, warm

NOTE_RETENTION_S = 31 * 24 * 3600
NOTE_AGAIN_AFTER_S = 60.0
_NOTED_MAX = 10_000


class RecountModel(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)  # "<userId>#<campaignId>", as the ledger's
    changed_ms = NumberAttribute()  # when a stream batch last saw its ledger change (epoch ms)
    expires_at = NumberAttribute(null=True)  # epoch seconds, DynamoDB TTL


class Recounts:
    def __init__(self, table_name: str, region: str, settle_s: float, clock: Any = time.time) -> None:
        """`settle_s`: the recount's (chalicelib.jobs.recount): a note is written again well within it. `clock`:
        the wall clock, as the recount's settle time is (a sandbox frozen and thawed keeps no monotonic pace)."""
        self._model = bound(RecountModel, table_name, region)
        self._again_after_s = min(NOTE_AGAIN_AFTER_S, settle_s / 10)
        self._clock = clock
        self._noted: dict[str, float] = {}  # campaign (ledger pk) -> when this process last wrote its note

    def warm(self) -> None:
        warm(self._model)

    def note(self, pks: Iterable[str], now_ms: int | None = None) -> None:
        """Note these campaigns (ledger partition keys) changed now: one write each, however many changes, and
        none for a campaign this process noted less than `again_after_s` ago."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        at = self._clock()
        due = sorted(pk for pk in set(pks) if at - self._noted.get(pk, -self._again_after_s) >= self._again_after_s)
        if not due:
            return
        with self._model.batch_write() as batch:
            for pk in due:
                batch.save(self._model(pk, changed_ms=now, expires_at=now // 1000 + NOTE_RETENTION_S))
        if len(self._noted) >= _NOTED_MAX:
            self._noted.clear()
        self._noted.update(dict.fromkeys(due, at))

    def settled(self, before_ms: int) -> Iterator[RecountNote]:
        """The noted campaigns whose last change was before `before_ms` (consistent: a note just made counts)."""
        m = self._model
        for item in m.scan(m.changed_ms < before_ms, consistent_read=True):
            user_id, _, campaign_id = item.pk.partition("#")
            yield RecountNote(user_id, campaign_id, int(item.changed_ms))

    def done(self, note: RecountNote) -> bool:
        """Remove the note, unless the campaign changed again since it was read (False: it stays for later)."""
        m = self._model
        try:
            m(f"{note.user_id}#{note.campaign_id}").delete(condition=m.changed_ms == note.changed_ms)
        except DeleteError as exc:
            if condition_failed(exc):
                return False
            raise
        return True
