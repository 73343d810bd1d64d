"""Retry the failed: queue a campaign's failed recipients again, each still sent at most once.

To send a failed email again its rendered form is needed, and the queue message is gone once its
failure is recorded. The drainer therefore keeps a copy of each email it records `failed` (the queued
JSON, in the payload bucket under `failed/`, 30 days), and retry-failed queues that copy again.

Per recipient: the ledger moves it from `failed` back to `queued` with a conditional write (so two
retries running at once queue it once), then the copy goes on the tenant's queue, and the drainer's
claim does the rest: a recipient that is sent is never sent again. If the retry dies between the two,
the recipient is left `queued` with nothing on the queue; the next retry (the client asking again after
the 502 its killed request got) takes such a recipient again, whatever its age: an extra copy is harmless,
for the same reason, and waiting would leave it `queued` for good when the client asked again at once.

Emails that failed before this copy existed, or whose failure came from SES's Reject event (the drainer
had already let the message go), have no copy: they are reported, not retried.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail
from chalicelib.core.routing import queue_for
from chalicelib.queueing.drain_starter import DrainStarter
from chalicelib.queueing.email_queue import EmailQueue
from chalicelib.queueing.enqueuer import Outgoing
from chalicelib.stores.failed_copies import FailedCopies
from chalicelib.stores.ledger_model import FAILED, QUEUED
from chalicelib.stores.ports.ledger import Entry, LedgerReads
from chalicelib.stores.recorder import Recorder

LANES = 16  # recipients read and reopened at once
LANE_PREFIX = "retry-lane"  # the lanes' thread names (bench/cost.py counts their requests as the functions')


@dataclass
class RetryResult:
    requeued: int = 0  # failed recipients queued again
    requeued_again: int = 0  # queued by an earlier retry and not sent yet: queued again (a copy may be extra)
    no_copy: list[str] = field(default_factory=list)  # failed, but no copy of their email was kept
    not_queued: list[str] = field(default_factory=list)  # reopened but the queue refused: next retry takes them
    matched: int = 0  # failed recipients matching the reason filter

    def as_dict(self) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "requeued": self.requeued,
            "requeuedAgain": self.requeued_again,
            "noCopyKept": len(self.no_copy),
            "notQueued": len(self.not_queued),
        }


class RetryFailed:
    def __init__(
        self,
        settings: Settings,
        ledger: LedgerReads,
        recorder: Recorder,
        copies: FailedCopies,
        email_queue: EmailQueue,
        drains: DrainStarter,
    ) -> None:
        self._settings = settings
        self._ledger = ledger
        self._recorder = recorder
        self._copies = copies
        self._email_queue = email_queue
        self._drains = drains

    def run(self, user_id: str, campaign_id: str, reason_contains: str | None = None) -> RetryResult:
        """Queue again the campaign's failed recipients (only those whose reason contains the text, if given)."""
        result = RetryResult()
        # One counter write per run, not per recipient: this run's counts, gathered and written at the end.
        recorder = self._recorder.gathering()
        try:
            self._requeue(user_id, campaign_id, reason_contains, recorder, result)
        finally:
            recorder.flush()
        log.info("retry-failed", user=user_id, campaign=campaign_id, **result.as_dict())
        return result

    def _requeue(
        self, user_id: str, campaign_id: str, reason_contains: str | None, recorder: Recorder, result: RetryResult
    ) -> None:
        needle = reason_contains.lower() if reason_contains else None
        taking: list[Entry] = []
        for entry in self._ledger.entries(user_id, campaign_id, states=(FAILED, QUEUED)):
            if entry.state == FAILED:
                if needle and needle not in (entry.reason or "").lower():
                    continue
            elif not (entry.state == QUEUED and entry.retries):  # a retry that may have died half-way
                continue
            result.matched += entry.state == FAILED
            taking.append(entry)
        # Each recipient is a read of its copy and a conditional write, two round trips: one after another,
        # the API's answer for a thousand failed would come after API Gateway stops waiting (29 s), and in the
        # soak 30 of them, beside a stack's whole load, did. LANES at a time.
        with ThreadPoolExecutor(max(1, min(LANES, len(taking))), thread_name_prefix=LANE_PREFIX) as lanes:
            reopened = list(lanes.map(lambda e: self._reopen(user_id, campaign_id, e.email, recorder), taking))
        by_queue: dict[str, list[Outgoing]] = {}
        again: set[str] = set()  # the recipients taken from `queued`, not from `failed`
        error: Exception | None = None
        for entry, got in zip(taking, reopened, strict=True):
            if isinstance(got, Exception):
                error = error or got  # raised once the others are queued: they are reopened already
                continue
            before, body = got
            if body is None:
                result.no_copy.append(entry.email)
                continue
            if before is None:
                continue  # another retry took it, or a drainer is sending it now
            if before == QUEUED:
                again.add(entry.email)
            queue = queue_for(self._settings.resources, user_id, QueuedEmail.from_json(body).plan)
            by_queue.setdefault(queue, []).append(Outgoing(key=entry.email, body=body))
        for queue, outgoing in by_queue.items():
            failures = self._email_queue.put(queue, user_id, campaign_id, outgoing)
            result.not_queued.extend(f.key for f in failures)
            refused = {f.key for f in failures}
            taken = [o.key for o in outgoing if o.key not in refused]
            result.requeued_again += sum(key in again for key in taken)
            result.requeued += sum(key not in again for key in taken)
            if taken:
                self._drains.ensure(queue)
        if error is not None:
            raise error

    def _reopen(
        self, user_id: str, campaign_id: str, email: str, recorder: Recorder
    ) -> tuple[str | None, str | None] | Exception:
        """The recipient's copy and the state it was moved back to `queued` from: (None, None) when no copy
        was kept (nothing reopened), (None, copy) when another retry or a drainer has it; or what the read or
        the write raised (this recipient's alone: the others are queued all the same)."""
        try:
            body = self._copies.load(user_id, campaign_id, email)
            if body is None:
                return None, None
            return recorder.reopened(user_id, campaign_id, email), body
        except Exception as exc:
            return exc
