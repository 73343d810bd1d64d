"""Recording what happened to a recipient: the ledger's transition, its counter and its log line, in one call.

The ledger is the record of truth and the campaign's counters follow it: a counter moves only when its
transition was new, so a redelivered event or a second copy of an email never counts twice. Every stage
records through here, so no stage can write a state and forget its count (or count a state it did not
write). The counter of a state has the state's name (`sent`, `failed`, ...: chalicelib.stores.campaign_stats).

`counts` is the campaign counters' writer: CampaignStats writes each call, BufferedStats gathers them
(the drainer's, one write per campaign every two seconds; precompile's, one write per message).

One Recorder is built, in chalicelib.wiring, over the container's ledger and counters, and handed to every
stage that records; a stage that gathers its counts (one write per message, per batch) asks it for its
`gathering()` twin. tests/unit/test_one_place_per_job.py holds every other module to that.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from chalicelib.core import log
from chalicelib.stores.campaign_stats import BufferedStats
from chalicelib.stores.ledger_model import (
    EXPIRED,
    FAILED,
    REJECTED,
    SENT,
    SUPPRESSED,
    UNATTRIBUTED,
    message_key,
    unattributed_day,
)
from chalicelib.stores.ports.campaigns import Counts
from chalicelib.stores.ports.ledger import Claim, LedgerRecords

# The states whose reason becomes the campaign's `lastError` (what went wrong): a cancel, a suppression found
# when queueing, a send, are not errors.
_ERRORS = frozenset({FAILED, REJECTED, EXPIRED, SUPPRESSED})


class Recorder:
    def __init__(self, ledger: LedgerRecords, counts: Counts) -> None:
        self._ledger = ledger
        self._counts = counts

    def gathering(self, interval_s: float = math.inf) -> Recorder:
        """A recorder over the same ledger whose counts are gathered and written at most once per `interval_s`
        (by default only when flushed): one message's (precompile), one batch's (SES's events), one run's
        (retry-failed), and not another invocation's sharing the container."""
        return Recorder(self._ledger, BufferedStats(self._counts, interval_s=interval_s))

    def finished(
        self,
        claim: Claim,
        user_id: str,
        campaign_id: str,
        address: str,
        state: str,
        *,
        reason: str | None = None,
        message_id: str | None = None,
        sent_at_s: float | None = None,
    ) -> bool:
        """A claimed recipient's outcome (sent, failed, suppressed, cancelled, expired). False when it had one:
        SES's Send event was faster, or the claim expired and another copy's drainer recorded it. A send is
        counted in the second SES was asked (`sent_at_s`), not the later one its ledger write ended in: the
        timeline's busiest second is then what the rate allowed."""
        if not self._ledger.finish(claim, state, message_id=message_id, reason=reason):
            log.debug("outcome already recorded", user=user_id, campaign=campaign_id, recipient=address, state=state)
            return False
        error = reason if state in _ERRORS else None
        if state == SENT and sent_at_s is not None:
            self._counts.add_counts(user_id, campaign_id, {SENT: 1}, error=error, sent_seconds={int(sent_at_s): 1})
        else:
            self._counts.add(user_id, campaign_id, error=error, **{state: 1})
        # A line per email at INFO would cost CPU at high rates and log ingestion on every email (a cancelled
        # campaign's every recipient): the ledger is the per-email record, and each drain logs a summary. A
        # failure is the exception worth a line of its own.
        level = log.info if state == FAILED else log.debug
        level(state, user=user_id, campaign=campaign_id, recipient=address, reason=reason, message_id=message_id)
        return True

    def unattributed(self, body: str, reason: str) -> bool:
        """A message with no recipient to record it against: rejected under `_unattributed` and the UTC day,
        by its digest (once, however often it comes back), where `moonsend status` counts it."""
        day = unattributed_day()
        return self.rejected(UNATTRIBUTED, day, [(message_key(body), reason)]) > 0

    def rejected(self, user_id: str, campaign_id: str, records: list[tuple[str, str]]) -> int:
        """Recipients (or message digests) refused with their reasons; one log line each for a small batch."""
        new = self._ledger.record_rejected(user_id, campaign_id, records)
        if new:
            self._counts.add(user_id, campaign_id, error=records[-1][1], **{REJECTED: new})
        if len(records) <= 20:
            for key, reason in records:
                log.info("rejected", user=user_id, campaign=campaign_id, recipient=key, reason=reason)
        elif records:
            log.info("rejected", user=user_id, campaign=campaign_id, recipients=len(records), reason=records[-1][1])
        return new

    def note_error(self, user_id: str, campaign_id: str, reason: str) -> None:
        """Something went wrong with the campaign that no recipient's record says: its last error."""
        self._counts.add(user_id, campaign_id, error=reason)

    def unsent(self, user_id: str, campaign_id: str, state: str, emails: list[str], reason: str) -> int:
        """Unclaimed recipients that will not be sent (cancelled, expired) with the reason."""
        n = self._ledger.record_unsent(user_id, campaign_id, state, emails, reason)
        if n:
            self._counts.add(user_id, campaign_id, error=reason if state in _ERRORS else None, **{state: n})
            log.info(state, user=user_id, campaign=campaign_id, recipients=n, reason=reason)
        return n

    def queued(self, user_id: str, campaign_id: str, emails: list[str]) -> int:
        """Recipients whose email is on the queue. Counted all, recorded where the drainer was not faster
        (its outcome is then already there, and `queued` would only go back in time)."""
        self._ledger.record_queued(user_id, campaign_id, emails)
        self._counts.add(user_id, campaign_id, queued=len(emails))  # 0 too: precompile's count of the message
        return len(emails)

    def released(self, user_id: str, campaign_id: str, emails: list[str]) -> int:
        """Scheduled recipients whose email is now on the queue."""
        n = self._ledger.record_released(user_id, campaign_id, emails)
        if n:
            self._counts.add(user_id, campaign_id, queued=n, released=n)
        return n

    def scheduled(self, user_id: str, campaign_id: str, emails: list[str]) -> int:
        n = self._ledger.record_scheduled(user_id, campaign_id, emails)
        if n:
            self._counts.add(user_id, campaign_id, scheduled=n)
        return n

    def suppressed(self, user_id: str, campaign_id: str, records: list[tuple[str, str]]) -> int:
        """Recipients on the suppression list when their email was to be queued, with why (an address the
        tenant's list excludes is not the campaign's error)."""
        n = self._ledger.record_suppressed(user_id, campaign_id, records)
        if n:
            self._counts.add(user_id, campaign_id, suppressed=n)
        return n

    def with_outcome(self, recipients: Iterable[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        """Of these (tenant, campaign, address), those with an outcome recorded: read for a batch of SES's
        Send events at once, so that each need not read its own (`sent_event(read_first=False)`)."""
        return self._ledger.with_outcome(recipients)

    def sent_event(
        self, user_id: str, campaign_id: str, address: str, message_id: str, *, read_first: bool = True
    ) -> bool:
        """SES's Send event: `sent`, if the drainer has not recorded it (it died, or is not there yet).
        SES's event often beats the drainer's own record: expected, so DEBUG, not a warning."""
        if not self._ledger.record_sent_event(user_id, campaign_id, address, message_id, read_first=read_first):
            return False
        self._counts.add(user_id, campaign_id, sent=1)
        log.debug("sent, from SES's Send event", user=user_id, campaign=campaign_id, recipient=address)
        return True

    def failed_event(self, user_id: str, campaign_id: str, address: str, message_id: str, reason: str) -> bool:
        """SES's Reject event: `failed`, replacing the `sent` the drainer recorded for that very message."""
        before = self._ledger.record_failed_event(user_id, campaign_id, address, message_id, reason)
        if before is None:
            return False
        self._counts.add(user_id, campaign_id, error=reason, **{FAILED: 1, SENT: -1 if before == SENT else 0})
        log.info("failed", user=user_id, campaign=campaign_id, recipient=address, reason=reason)
        return True

    def reopened(self, user_id: str, campaign_id: str, address: str) -> str | None:
        """A recipient queued again by retry-failed: taken off `failed` (and counted `retried`) if it was failed,
        or retaken after an earlier retry that may have died half-way (counted then). The state it was taken
        from, None when it was not taken."""
        before = self._ledger.reopen(user_id, campaign_id, address)
        if before == FAILED:
            self._counts.add(user_id, campaign_id, failed=-1, retried=1)
        return before  # None: another retry took it, or a drainer is sending it now

    def flush(self) -> None:
        """Write the counts gathered so far (a no-op where each is written at once)."""
        self._counts.flush()

    def feedback(
        self,
        user_id: str,
        campaign_id: str,
        address: str,
        kind: str,
        detail: str,
        message_id: str | None = None,
        evidence: str | None = None,
        happened_at_ms: int | None = None,
    ) -> bool:
        """What happened after sending (delivered, bounced, complained, opened, clicked, unsubscribed; a
        machine's open or click, with what marked it): the first of each kind per recipient. `happened_at_ms`:
        when SES says a delivery happened (kept beside when moonsend recorded it)."""
        if not self._ledger.record_feedback(
            user_id, campaign_id, address, kind, detail, message_id, evidence, happened_at_ms
        ):
            return False
        self._counts.add(user_id, campaign_id, error=None, **{kind: 1})
        log.debug(kind, user=user_id, campaign=campaign_id, recipient=address)
        return True
