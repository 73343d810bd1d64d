"""Dead letters: every message SQS gave up on ends with its recipient's outcome recorded.

SQS moves a send queue's message to the dead-letter queue after `MAX_RECEIVE_COUNT` receives. The
drainer records an outcome before that in every case it sees: a send that keeps failing is recorded
`failed` on its last try, an unreadable message under `_unattributed`, a copy waiting behind another
sender's live claim goes back as a fresh copy. One path is silent: a message received that many times by drains that
died before doing anything with it (a Lambda killed or timed out on every try: an outage, a poison
message). Its recipient stays `queued` and nothing says why; a user who asks sees an email that never
ends.

`reconcile_dead_letters` (every 15 minutes) reads the dead-letter queue. A recipient with no outcome
and no live claim is recorded `failed` with the reason, through the ledger's own claim and outcome
writes: it never overwrites an outcome, a drainer at work wins, and a recipient that retry-failed queued
again after the dead letter's message was sent is left to its retried copy. `retry-failed` can queue it again.
Messages stay in the dead-letter queue for operators (14 days), hidden for `RECHECK_S` after each look.
A message younger than `MIN_AGE_S` is left for a later look: a twin copy of it (SQS delivers at least
once) may still be on its way through the send queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail
from chalicelib.core.errors import MessageInvalid
from chalicelib.core.ports import SqsDeadLetters
from chalicelib.core.resources import MAX_RECEIVE_COUNT
from chalicelib.stores.failed_copies import FailedCopies
from chalicelib.stores.ledger_model import FAILED, FINAL
from chalicelib.stores.payloads import PayloadStore
from chalicelib.stores.ports.ledger import Entry, LedgerClaims
from chalicelib.stores.recorder import Recorder

RECHECK_S = 6 * 3600  # a dead letter already looked at is looked at again after this
# ... or after this, when its recipient could not be settled yet, or while a run looks at it: less than the
# 15 minutes between runs, so that the next run sees what a run that died had in hand.
LATER_S = 600
MIN_AGE_S = 3600  # younger dead letters wait: a twin of the message may still be sending
CLAIM_S = 60  # the reconciler's own claim, held just for its write
REASON = "dead-lettered: SQS gave up after {n} receives with no outcome recorded (its drains died); kept in {q}"


@dataclass
class ReconcileResult:
    looked: int = 0
    recorded_failed: int = 0
    had_outcome: int = 0
    later: int = 0  # too young, or a live claim: looked at again in LATER_S
    superseded: int = 0  # queued again by retry-failed since: its retried copy is the live one
    unreadable: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DeadLetterQueue:
    """The queue the job reads: the stage's dead-letter queue, by name, and the client that reaches it."""

    sqs: SqsDeadLetters
    name: str


class DeadLetters:
    def __init__(
        self,
        settings: Settings,
        queue: DeadLetterQueue,
        ledger: LedgerClaims,
        recorder: Recorder,
        payloads: PayloadStore,
        failed_copies: FailedCopies,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._queue_name = queue.name
        self._failed_copies = failed_copies
        self._sqs = queue.sqs
        self._ledger = ledger
        self._recorder = recorder
        self._payloads = payloads
        self._clock = clock

    def reconcile(
        self, remaining_ms: Callable[[], int] = lambda: 60_000, max_messages: int = 10_000
    ) -> ReconcileResult:
        """Look at the dead letters not looked at lately; record an outcome for each recipient without one."""
        name = self._queue_name
        url = self._sqs.get_queue_url(QueueName=name)["QueueUrl"]
        result = ReconcileResult()
        while result.looked < max_messages and remaining_ms() > 10_000:
            # Hidden for LATER_S only until settled: a run killed with them in hand leaves them to the next
            # run, not hidden for RECHECK_S with their recipients still waiting.
            got = self._sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=LATER_S,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["SentTimestamp", "ApproximateReceiveCount"],
            ).get("Messages", [])
            if not got:
                break
            for message in got:
                result.looked += 1
                if self._settle(name, message, result):
                    self._sqs.change_message_visibility(
                        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=RECHECK_S
                    )
                else:
                    result.later += 1
        if result.recorded_failed or result.later:
            log.warning("dead letters reconciled", queue=name, **result.as_dict())
        return result

    def _retried_since(self, email: QueuedEmail, sent_ms: int) -> bool:
        """Whether retry-failed queued the recipient again after this dead letter's message was sent: its
        retried copy is the live one (waiting behind a backlog, a pause, a slow rate), and recording this
        old copy `failed` would drop it unsent. SQS keeps a message's SentTimestamp when it moves it to the
        dead-letter queue, so the dead letter's age says nothing of the retry: the ledger's time does."""
        entry = self._ledger.get(email.user_id, email.campaign_id, email.recipient_email)
        return entry is not None and entry.retried_at is not None and entry.retried_at >= sent_ms

    def _settle(self, queue_name: str, message: dict[str, Any], result: ReconcileResult) -> bool:
        """Whether this dead letter's recipient has an outcome now (False: look again later)."""
        attributes = message.get("Attributes", {})
        sent_ms = int(attributes.get("SentTimestamp", "0"))
        if self._clock() * 1000 - sent_ms < MIN_AGE_S * 1000:
            return False
        body = message["Body"]
        try:
            body = self._payloads.unwrap(body)
        except Exception as exc:  # S3 unreachable, or the payload expired: try again later
            log.warning("dead letter's payload unavailable", error=type(exc).__name__)
            return False
        try:
            email = QueuedEmail.from_json(body)
        except MessageInvalid as exc:
            # The drainer recorded it under `_unattributed` when it read it; recording again is a no-op.
            result.unreadable += 1
            self._recorder.unattributed(body, f"unreadable queued message in {queue_name}: {exc}")
            return True
        if self._retried_since(email, sent_ms):
            result.superseded += 1
            return True
        claim = self._ledger.claim(email.user_id, email.campaign_id, email.recipient_email, CLAIM_S)
        if isinstance(claim, Entry):
            if claim.state in FINAL:
                result.had_outcome += 1
                return True
            return False  # a live claim: a drainer (or its Send event) settles it, or its claim expires
        reason = REASON.format(n=MAX_RECEIVE_COUNT, q=self._queue_name)
        try:  # kept first, so that retry-failed finds its email
            self._failed_copies.save(email)
        except Exception as exc:  # recorded all the same; only its retry is not possible
            log.warning("failed email not kept for retry", user=email.user_id, error=type(exc).__name__)
        address = email.recipient_email
        if self._recorder.finished(claim, email.user_id, email.campaign_id, address, FAILED, reason=reason):
            result.recorded_failed += 1
        return True
