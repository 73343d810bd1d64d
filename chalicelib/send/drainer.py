"""send_emails' work: drain one queue through SES at its tenant's rate.

The loop: receive up to 10 messages at a time, running ahead of sending so that the rate limiter, not
the receive-send-delete round trip, sets the pace; hand each message to a Delivery (read → claim → gate
→ pace → SES → record, in a pool of workers); collect the decisions as they finish and carry out each one's
Action on its message (chalicelib.send.outcomes); delete recorded messages in batches. It stops before the
Lambda's time runs out and says so, so the handler can hand on to a fresh invocation; two empty long
polls in a row mean the queue is drained.
"""

from __future__ import annotations

import math
import queue
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.core import log
from chalicelib.core.aws import NO_SUCH_QUEUE
from chalicelib.core.config import Settings
from chalicelib.core.contract import QueuedEmail
from chalicelib.core.errors import MessageInvalid
from chalicelib.core.resources import SEND_VISIBILITY_TIMEOUT_S
from chalicelib.core.routing import is_free_queue
from chalicelib.queueing.drain_starter import EMPTY_POLLS_TO_FINISH, RECENTLY_S, DrainStarter
from chalicelib.send.delivery import Delivery, Suppressed
from chalicelib.send.drain_report import DrainResult, report_drain
from chalicelib.send.message_actions import THROTTLES_ATTRIBUTE
from chalicelib.send.outcomes import STOP_REASONS, Action, Decision, Outcome
from chalicelib.send.sides import DrainQueues, GateReads, QueueRef, SendState

# Past its due time, email put back is looked for this long before the drain takes it as taken elsewhere.
PUT_BACK_GRACE_S = 2.0
# Another copy's business: the drain did not handle this tenant's email (its metrics dimension).
_NOT_CLAIMED = frozenset({Outcome.DUPLICATE, Outcome.IN_FLIGHT, Outcome.ORPHANED, Outcome.FEWER_DRAINERS})
# A claim outlives its message's invisibility six times over. If its holder dies after SES accepted the
# email and before recording it, the message comes back after the visibility timeout (5 min) but finds
# the claim still held, and waits: SES's Send event, which records the email sent, has 30 minutes to
# arrive before the email is sent again. (With claim and visibility expiring together, the soak test
# sent two emails twice when its events ran more than 5 minutes late.) An email whose holder died before
# calling SES waits as long; a dead drainer is rare, a duplicate is what we promise never to send.
# (`Settings.claim_hold_s`, MOONSEND_CLAIM_HOLD_S, defaults to this.)
CLAIM_HOLD_S = 6 * SEND_VISIBILITY_TIMEOUT_S
# Sends run concurrently, each paced by the limiter, so that a 50 ms SES call does not cap a tenant
# at 20 per second; at most MAX_AHEAD received messages wait for their slot.
SEND_WORKERS = 48
MAX_AHEAD = 200
RECEIVE_BATCH = 10  # SQS's most per ReceiveMessage
_ToPark = tuple[dict[str, Any], Decision]  # a paused email's message and decision, parked once per collect


@dataclass
class _Drain:
    """One drain's moving parts (a container's Drainer may run several drains at once, one per queue it was
    started for)."""

    ref: QueueRef
    result: DrainResult
    inflight: dict[Future[Decision], dict[str, Any]] = field(default_factory=dict)
    finished: queue.SimpleQueue[Future[Decision]] = field(default_factory=queue.SimpleQueue)
    to_delete: list[dict[str, Any]] = field(default_factory=list)
    backlog_read_at: float = float("-inf")  # slot 0: when it last read the queue's depth for helpers
    short_receive_at: float = float("-inf")  # when a receive last found less than a batch
    due_back: list[float] = field(default_factory=list)  # when email this drain put back comes due (monotonic)
    wait_s: int | None = None  # the next empty receive's wait, when waiting for email put back

    def put_back(self, delay_s: int | None) -> None:
        if delay_s is not None:
            self.due_back.append(time.monotonic() + delay_s)

    def due_back_in(self, stay_s: float) -> float | None:
        """Seconds until the soonest email this drain put back comes due, if within `stay_s`."""
        now = time.monotonic()
        self.due_back = [t for t in self.due_back if t > now - PUT_BACK_GRACE_S]
        soonest = min(self.due_back, default=None)
        if soonest is None or soonest - now > stay_s:
            return None
        return max(0.0, soonest - now)


class Drainer:
    def __init__(
        self,
        settings: Settings,
        queues: DrainQueues,
        delivery: Delivery,
        state: SendState,
        gate: GateReads,
        drains: DrainStarter,
    ) -> None:
        self._settings = settings
        self._sqs = queues.sqs
        self._actions = queues.actions
        self._parking = queues.parking
        self._delivery = delivery
        self._state = state
        self._gate = gate
        self._drains = drains
        self._owners: dict[str, str] = {}  # tenant queue -> its tenant (the queue's tag)

    def drain(self, queue_name: str, remaining_ms: Callable[[], int], slot: int = 0) -> DrainResult:
        """Drain until the queue is empty, the deadline nears, or SES says stop for today.

        `slot`: which of the queue's drainers this is, when its rate needs several; each sends its own
        share of the rate, and slot 0 starts the others (chalicelib.core.drainer_shares)."""
        result = DrainResult(queue_name, slot=slot)
        try:
            url = self._sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in NO_SUCH_QUEUE:
                raise
            # Removed for idleness after this start was asked for (chalicelib.jobs.idle_queues): nothing to send.
            result.stopped_reason = "the queue does not exist"
            log.info("drain skipped", queue=queue_name, reason=result.stopped_reason)
            return result
        paused = self._paused_owner(queue_name, url)
        if paused:
            # Before receiving anything: receiving would count against the messages' redelivery budget.
            result.stopped_reason = paused
            log.info("drain skipped", queue=queue_name, reason=paused)
            return result
        d = _Drain(QueueRef(queue_name, url, slot, is_free_queue(self._settings.resources, queue_name)), result)
        # Also when an error escapes (a throttled receive; the chain then hands the drain on): what was
        # started is finished, recorded and acted on (left undone, each sent email's message would come back
        # only after its visibility timeout), what was recorded leaves the queue, what was counted is kept.
        # Not when the process dies (a BaseException here): nothing runs after that on Lambda either.
        try:
            with ThreadPoolExecutor(max_workers=SEND_WORKERS, thread_name_prefix="send") as pool:
                try:
                    self._loop(d, pool, remaining_ms)
                except Exception:
                    self._finish_inflight(d)
                    raise
                self._finish_inflight(d)
        except Exception:
            self._wind_down(url, d)
            raise
        self._wind_down(url, d)
        result.quiet_from_ms = self._state.pacings.of(queue_name, slot).quiet_from_ms()
        report_drain(self._settings, result)
        return result

    def _finish_inflight(self, d: _Drain) -> None:
        """Whatever was started is finished and recorded before the drain hands on or ends."""
        while d.inflight:
            self._collect(d, wait=True)

    def _wind_down(self, url: str, d: _Drain) -> None:
        """Recorded messages deleted, the counts flushed, the guard's counts ahead given back."""
        self._actions.delete(url, d.to_delete)
        self._state.recorder.flush()
        self._state.sent_ahead.settle()

    def _loop(self, d: _Drain, pool: ThreadPoolExecutor, remaining_ms: Callable[[], int]) -> None:
        empty_polls = 0
        while True:
            self._collect(d, wait=False)
            if len(d.to_delete) >= 10:
                self._actions.delete(d.ref.url, d.to_delete)
            if d.result.stopped_reason:
                return
            if remaining_ms() < self._settings.deadline_margin_ms:
                d.result.unfinished = True
                return
            room = self._ahead(d) - len(d.inflight)
            # Receive whole batches: topping up one message per finished send, or asking a queue that is
            # filled as fast as it drains again after each email, cost a ReceiveMessage (billed, and ~2 ms
            # of CPU) per email. While email is in flight, the next receive waits for room for a batch
            # and, after a short receive, until about a batch has been sent. With nothing in flight it
            # asks at once: email is not kept waiting, and a drain with nothing left ends without delay.
            gather_s = d.short_receive_at + min(1.0, RECEIVE_BATCH / self._rate(d)) - time.monotonic()
            if d.inflight and (room < RECEIVE_BATCH or gather_s > 0):
                self._collect(d, wait=True)  # what is in flight keeps the sends going meanwhile
                continue
            asked = min(RECEIVE_BATCH, room)
            messages = self._receive(d, asked)
            d.short_receive_at = time.monotonic() if len(messages) < asked else float("-inf")
            if messages:
                empty_polls = 0
                d.wait_s = None
                suppressed = self._suppressed_in(messages)
                for m in messages:
                    future = pool.submit(self._delivery.deliver, d.ref, m, suppressed)
                    d.inflight[future] = m
                    future.add_done_callback(d.finished.put)
            elif d.inflight:
                self._collect(d, wait=True)
            else:
                empty_polls += 1
                if empty_polls >= EMPTY_POLLS_TO_FINISH:
                    # Stay for email put back for later: with no not-empty alarm (Settings.queue_alarms),
                    # nothing would start a drain for it before the sweeper's next minute.
                    due_in = d.due_back_in(self._settings.put_back_stay_s)
                    if due_in is None:
                        return
                    # Stay: the next receives wait (a long poll, at most SQS's 20 s) until it is due, within
                    # half the time left before the deadline's margin (the chain hands on after that).
                    spare_s = (remaining_ms() - self._settings.deadline_margin_ms) // 2000
                    d.wait_s = max(1, min(20, math.ceil(due_in), spare_s))
                    empty_polls = EMPTY_POLLS_TO_FINISH - 1

    def _receive(self, d: _Drain, asked: int) -> list[dict[str, Any]]:
        return self._sqs.receive_message(
            QueueUrl=d.ref.url,
            MaxNumberOfMessages=asked,
            WaitTimeSeconds=0 if d.inflight else (d.wait_s or self._settings.long_poll_seconds),
            MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
            MessageAttributeNames=[THROTTLES_ATTRIBUTE],
        ).get("Messages", [])

    def _ahead(self, d: _Drain) -> int:
        """How many messages to hold: a second and a half of this drainer's sends, at least two batches, but
        no more than it sends in half its deadline margin.

        Each message spends the ledger claim, its slot, the SES call and the ledger record in flight;
        holding fewer than that round trip's worth caps the rate below the tenant's. What is held when the
        deadline comes is sent before the drain hands on, so it must fit in the margin: a 0.5/s drain
        holding 20 needed 40 s, past the 20 s margin, and Lambda would stop it mid-send (its claims then
        hold those recipients back for the claim's lifetime). Until the first send gives the pace, a
        drain holds one batch."""
        paced = self._state.pacings.rate(d.ref.name, d.ref.slot)
        if not paced:
            return RECEIVE_BATCH
        wanted = max(20, min(MAX_AHEAD, math.ceil(paced * 1.5) + 10))
        return max(1, min(wanted, math.floor(paced * self._settings.deadline_margin_ms / 2000)))

    def _rate(self, d: _Drain) -> float:
        """This drainer's rate as paced so far (10 a second until its first send)."""
        return self._state.pacings.rate(d.ref.name, d.ref.slot) or 10.0

    def _collect(self, d: _Drain, *, wait: bool) -> None:
        """Act on every decision that has come in (waiting up to 0.2 s for the first, if asked to)."""
        if not d.inflight:
            return
        done: list[Future[Decision]] = []
        try:
            # Finished sends announce themselves on a queue, so collecting costs nothing per send still
            # running (scanning up to MAX_AHEAD futures after every receive cost a third of a core at 500/s).
            done.append(d.finished.get(timeout=0.2) if wait else d.finished.get_nowait())
            while True:
                done.append(d.finished.get_nowait())
        except queue.Empty:
            pass
        to_park: list[_ToPark] = []
        drainers = 1
        for i, future in enumerate(done):
            m = d.inflight.pop(future)
            try:
                decision = future.result()
                self._count(d.result, decision)
                drainers = max(drainers, decision.drainers)
                self._act(d, m, decision, to_park)
            except Exception:
                # Taken off the queue with it, still to be acted on: left off it, `_finish_inflight` would
                # wait for them until the Lambda is killed (an action's SQS call throttled past the SDK's
                # retries raises here), with no wind-down and no hand-on.
                for rest in done[i + 1 :]:
                    d.finished.put(rest)
                raise
        if to_park:
            d.to_delete.extend(self._parking.park(d.ref, to_park))
        if d.ref.slot == 0 and drainers > 1:
            self._start_helpers(d, drainers)

    def _start_helpers(self, d: _Drain, drainers: int) -> None:
        """The queue's first drainer starts the others the rate of the email it is sending needs, when more
        email waits than it holds ahead itself.

        Asked from the email just sent, not once at the start: a campaign at a higher rate may come after a
        slower one, and a helper that died is started again (the starter asks for each slot at most every
        few seconds, and the lease makes a second start of a live slot harmless). Without a backlog a
        helper finds the queue empty, ends, and is started again a few seconds later: the cost bench's
        small campaigns made 0.29 invocations per email that way, against 0.01 with one drainer."""
        now = time.monotonic()
        if now - d.backlog_read_at < RECENTLY_S:
            return
        d.backlog_read_at = now
        try:
            attributes = self._sqs.get_queue_attributes(
                QueueUrl=d.ref.url, AttributeNames=["ApproximateNumberOfMessages"]
            ).get("Attributes", {})
            waiting = int(attributes.get("ApproximateNumberOfMessages", "0"))
        except Exception as exc:  # no helpers this time: this drainer goes on at its band
            log.warning("queue depth unknown", queue=d.ref.name, error=type(exc).__name__)
            return
        if waiting <= self._ahead(d):
            return
        for slot in range(1, drainers):
            self._drains.ensure(d.ref.name, slot=slot)

    @staticmethod
    def _count(result: DrainResult, decision: Decision) -> None:
        count = decision.outcome.count
        if count:
            setattr(result, count, getattr(result, count) + 1)
        if decision.email is not None and decision.outcome not in _NOT_CLAIMED:
            result.tenants.add(decision.email.user_id)  # the tenants whose email this drain handled
        if decision.lag_ms is not None:
            result.lag.add(decision.lag_ms)

    def _act(self, d: _Drain, m: dict[str, Any], decision: Decision, to_park: list[_ToPark]) -> None:
        """The decision's Action on its SQS message: the one part of a decision the drain carries out, on its
        own thread, because deletes go ten to a request and parked email one batch per paused campaign."""
        url = d.ref.url
        match decision.action:
            case Action.DELETE:
                d.to_delete.append(m)
            case Action.REQUEUE_LATER:
                d.put_back(self._actions.requeue_later(url, m))
            case Action.BACK_OFF:
                d.put_back(self._actions.back_off(url, m))
            case Action.WAIT_FOR_CLAIM:
                d.put_back(self._actions.wait_for_claim(url, m, decision))
            case Action.TO_DEAD_LETTER:
                self._actions.visible_now(url, m)
            case Action.PARK:
                to_park.append((m, decision))
            case Action.PARK_OR_STOP if d.ref.free:  # the shared queue goes on for the other free tenants
                to_park.append((m, decision))
            case Action.PARK_OR_STOP:  # a paused tenant's own queue stops (later drains check before receiving)
                self._actions.visible_now(url, m)
                d.result.stopped_reason = STOP_REASONS[Action.PARK_OR_STOP]
            case Action.HAND_BACK:
                self._actions.hand_back(url, m)
                self._drains.ensure(d.ref.name)  # slot 0 may have ended while this one held the email
                d.result.stopped_reason = STOP_REASONS[Action.HAND_BACK]
            case Action.STOP:
                d.result.stopped_reason = STOP_REASONS[Action.STOP]

    def _suppressed_in(self, messages: list[dict[str, Any]]) -> Suppressed:
        """One look-up per receive batch: which of these recipients were suppressed since queued."""
        by_user: dict[str, list[str]] = {}
        for m in messages:
            try:
                email = QueuedEmail.from_json(m["Body"])
            except MessageInvalid:
                continue  # an S3 pointer (checked alone when sent) or unreadable (recorded when sent)
            by_user.setdefault(email.user_id, []).append(email.recipient_email)
        found: dict[tuple[str, str], str] = {}
        for user, emails in by_user.items():
            for address, why in self._gate.suppressions.check(user, emails).items():
                found[(user, address)] = why
        return found

    def _paused_owner(self, queue_name: str, url: str) -> str | None:
        """`tenant paused: <why>` when a tenant queue's owner is paused (from the queue's tenant tag)."""
        if is_free_queue(self._settings.resources, queue_name):
            return None
        owner = self._owners.get(queue_name)
        if owner is None:
            try:
                tags = self._sqs.list_queue_tags(QueueUrl=url).get("Tags", {})
            except Exception as exc:  # cannot tell: drain, and check each message instead
                log.warning("queue owner unknown", queue=queue_name, error=type(exc).__name__)
                return None
            owner = tags.get("moonsend:tenant", "")
            self._owners[queue_name] = owner
        why = self._gate.tenants.pause_of(owner) if owner else None
        return f"tenant paused: {why}" if why else None
