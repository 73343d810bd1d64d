"""SES's sending events (event publishing through the configuration set), recorded in the ledger.

SES publishes one JSON record per event to the events topic: `{"eventType": "Send", "mail": {...},
"send": {}}`. The email is matched by the headers moonsend puts on every message (tenant, campaign) and
its one recipient (`mail.destination`), so no lookup table is needed.

- `Send`: SES accepted the email. Recorded as sent with SES's message id unless an outcome is already
  recorded. This is what closes the one ambiguous window of a send (SES accepted it; the drainer died
  before recording it): the record appears anyway, and the redelivered queue message is dropped.
- `Reject`: SES accepted the call but refused the email (a virus): recorded as failed with the reason.
- `Delivery`, `Bounce`, `Complaint`: recorded beside the recipient's state and counted once each. A
  permanent bounce suppresses the address for every tenant (it does not exist), a complaint for the
  tenant it complained about; transient bounces are only counted.

Events are trusted only from an SES account that sends the tenant's email: the platform's own (the free
plan), or an account the tenant's registered keys belong to (learned with STS when each key version is
registered; keys of another account are refused, chalicelib.stores.tenants).
The events topic accepts SES events from any account through a configuration set of the stage's name,
so an account that is not the tenant's could otherwise mark the tenant's recipients sent or suppressed.

SES publishes to the events topic, whose one subscriber is an SQS queue (raw delivery: each message is
one event); Lambda's poller gives ses_events up to a hundred at a time (5 s to gather them), handled
LANES at a time. One batch
costs one invocation, one request reading the ledger for all its Send events (`read_ahead`; billed by the
item as reads one by one are, but one round trip and one request's CPU: nearly always the drainer recorded
the outcome first, and the event writes nothing), and one counter write per campaign,
against two invocations and two counter writes per email when each event invoked the function through
SNS. A record that raises is reported back alone
(`batchItemFailures`), so the rest of its batch is not handled again; it returns after the queue's
visibility timeout and goes to the events' dead-letter queue after five tries.

Events of emails that did not come from moonsend (no tenant header) are ignored. A malformed record is
logged and dropped: it carries no recipient to record anything against, and a redelivery would not
change that.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from chalicelib.core import log
from chalicelib.core.contract import CAMPAIGN_HEADER, TENANT_HEADER
from chalicelib.core.fields import is_email, is_id
from chalicelib.feedback.reputation import verdict
from chalicelib.stores.pauses import GUARD, SES
from chalicelib.stores.ports.sending import ReputationCounts, SesTenantRecords
from chalicelib.stores.ports.suppression import BOUNCE, COMPLAINT, SuppressionList
from chalicelib.stores.ports.tenants import TenantRecords
from chalicelib.stores.recorder import Recorder

# A batch's events in flight at once: each is one or two DynamoDB round trips, so that a batch of 100 takes
# the time of ten in turn, and its counters are written once for the hundred.
LANES = 10

# No event is begun with less of the invocation's time left than this, and FLUSH_MS_A_CAMPAIGN more for each
# campaign the batch's events are about (ses_events' timeout is 30 s). An event with a bounce's side effects
# under a throttled table may take several seconds; the counters' flush then writes each campaign's counts
# and its minute, one after another: two requests, about 40 ms at 256 MB (a sixth of a vCPU signing them), so
# up to 4 s more for a batch of 100 campaigns. Lambda stopping a batch before its flush would give every event
# back, the handled ones too, and their counts would be left to the recount.
STOP_WITH_MS = 8_000
FLUSH_MS_A_CAMPAIGN = 40


LANE_PREFIX = "event-lane"  # the lanes' thread names (bench/cost.py attributes their requests to ses_events)


class NotBegun(Exception):
    """An event left for later: its batch's time is nearly up (answered as failed, it comes back)."""


@dataclass(frozen=True)
class ReadAhead:
    """What one read told a batch of the ledger: the Send events' recipients it read (`read`), and those of
    them with an outcome recorded (`with_outcome`), keyed (tenant, campaign, address)."""

    read: frozenset[tuple[str, str, str]] = frozenset()
    with_outcome: frozenset[tuple[str, str, str]] = frozenset()
    campaigns: int = 0  # the campaigns the batch's trusted events are about: each a counter write at its flush

    def outcome_known(self, key: tuple[str, str, str]) -> bool | None:
        """True: an outcome was recorded; False: none was when read; None: not read."""
        return None if key not in self.read else key in self.with_outcome


NOTHING_READ = ReadAhead()


@dataclass(frozen=True)
class SesEvent:
    event_type: str
    message_id: str
    user_id: str | None
    campaign_id: str | None
    recipients: tuple[str, ...]
    detail: dict[str, Any]
    sending_account: str | None = None


def parse_event(raw: str | dict[str, Any]) -> SesEvent:
    """Raise ValueError when the record is not an SES event."""
    d = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    if d.get("Type") == "Notification" and isinstance(d.get("Message"), str):
        # An SNS envelope: the queue's subscription without raw delivery (set by hand, or an older stack).
        return parse_event(d["Message"])
    event_type = d.get("eventType") or d.get("notificationType")
    mail = d.get("mail")
    if not isinstance(event_type, str) or not isinstance(mail, dict) or not mail.get("messageId"):
        raise ValueError("no eventType, mail or mail.messageId")
    headers = {
        str(h.get("name", "")).lower(): str(h.get("value", "")) for h in mail.get("headers", []) if isinstance(h, dict)
    }
    detail = d.get(event_type[:1].lower() + event_type[1:].replace(" ", ""), {})
    return SesEvent(
        event_type=event_type,
        message_id=str(mail["messageId"]),
        user_id=headers.get(TENANT_HEADER.lower()),
        campaign_id=headers.get(CAMPAIGN_HEADER.lower()),
        recipients=tuple(str(a) for a in mail.get("destination", []) if isinstance(a, str)),
        detail=detail if isinstance(detail, dict) else {},
        sending_account=str(mail["sendingAccountId"]) if mail.get("sendingAccountId") else None,
    )


class SesEvents:
    def __init__(
        self,
        recorder: Recorder,
        suppressions: SuppressionList,
        tenants: TenantRecords,
        platform_account: str,
        reputation: ReputationCounts,
        ses_tenants: SesTenantRecords,
        region: str,
    ) -> None:
        self._recorder = recorder
        self._suppressions = suppressions
        self._tenants = tenants
        self._platform_account = platform_account
        self._reputation = reputation
        self._ses_tenants = ses_tenants
        self._region = region  # the platform's

    def _trusted(self, event: SesEvent, *, read_again: bool = True) -> bool:
        """Whether the event comes from an SES account that sends this tenant's email: the platform's (the
        free plan's), or one its registered keys belong to (learned when each key version was registered).
        `read_again`: an account the cached tenant does not list is looked for in a fresh read too."""
        if not event.sending_account:
            return False
        if event.sending_account == self._platform_account:
            return self._tenants.get(event.user_id or "") is not None
        for fresh in (False, True) if read_again else (False,):  # a key version registered since the cached read
            tenant = self._tenants.get(event.user_id or "", fresh=fresh)
            if tenant is None:
                return False
            if event.sending_account in tenant.accounts:
                return True
        return False

    def handle(self, raw: str) -> str:
        """Record one event, its counters written at once; returns what was done (for logs and tests)."""
        return self.record(raw, self._recorder)

    def batch(self, remaining_ms: Callable[[], int] = lambda: 10**9) -> EventBatch:
        """A batch of events from the queue, recorded LANES at a time, their counters written at its end, no
        event begun with too little of the invocation's time left (`remaining_ms`: EventBatch)."""
        return EventBatch(self, self._recorder.gathering(), remaining_ms)

    def read_ahead(self, bodies: Iterable[str], rec: Recorder) -> ReadAhead:
        """The ledger read once for a batch's Send events, not once each (their recipients a hundred to a
        request): nearly always the drainer recorded the outcome before SES's event came, and the event then
        writes nothing. Only keys moonsend could have written (ids and an address as the contract takes them)
        of events trusted by the cached tenant are read, so that no event another account forged, nor a key
        DynamoDB refuses, fails the read for the batch's others; a read that fails leaves each event to read
        its own."""
        keys: set[tuple[str, str, str]] = set()
        campaigns: set[tuple[str, str]] = set()
        try:
            for raw in bodies:
                email = self._trusted_email(raw)
                if email is None:
                    continue
                campaigns.add(email[:2])
                if email[3] == "Send" and is_email(email[2]):
                    keys.add(email[:3])
            with_outcome = frozenset(rec.with_outcome(keys)) if keys else frozenset()
            return ReadAhead(frozenset(keys), with_outcome, len(campaigns))
        except Exception as exc:
            log.warning("SES's Send events not read ahead; each reads its own", error=repr(exc))
            return ReadAhead(campaigns=len(campaigns))

    def _trusted_email(self, raw: str) -> tuple[str, str, str, str] | None:
        """(tenant, campaign, recipient, event type) of an event the cached tenant trusts; None for others."""
        try:
            event = parse_event(raw)
        except Exception:  # whatever an unreadable record raises, record() answers it alone
            return None
        email = _email_of(event)
        # Ids as moonsend writes them first: a forged one past DynamoDB's key size would fail the tenant's read.
        if email is None or not (is_id(email[0]) and is_id(email[1])) or not self._trusted(event, read_again=False):
            return None
        return (*email, event.event_type)

    def record(self, raw: str, rec: Recorder, ahead: ReadAhead = NOTHING_READ) -> str:
        """Record one event through `rec`; raises only when a store does (the event is then retried)."""
        try:
            event = parse_event(raw)
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("SES event unreadable, dropped", reason=str(exc))
            return "unreadable"
        email = _email_of(event)
        if email is None:
            log.info("SES event not about a moonsend email", event=event.event_type, message_id=event.message_id)
            return "ignored"
        user, campaign, to = email
        if not self._trusted(event):
            log.warning(
                "SES event from an account that did not send this tenant's email, dropped",
                user=user,
                account=event.sending_account,
                event=event.event_type,
            )
            return "untrusted"
        if event.event_type == "Send":
            return self._on_send(rec, event, user, campaign, to, ahead.outcome_known(email))
        on = {
            "Reject": self._on_reject,
            "Delivery": self._on_delivery,
            "Bounce": self._on_bounce,
            "Complaint": self._on_complaint,
        }.get(event.event_type)
        if on is None:  # Open, Click (tracked by our own links), DeliveryDelay, Rendering Failure: logged
            log.info("SES event", event=event.event_type, user=user, campaign=campaign, message_id=event.message_id)
            return "logged"
        return on(rec, event, user, campaign, to)

    def _on_send(self, rec: Recorder, event: SesEvent, user: str, campaign: str, to: str, known: bool | None) -> str:
        if known:  # read ahead: the outcome is recorded, and the conditional write would only be refused
            return "already recorded"
        recorded = rec.sent_event(user, campaign, to, event.message_id, read_first=known is None)
        return "recorded sent" if recorded else "already recorded"

    def _on_reject(self, rec: Recorder, event: SesEvent, user: str, campaign: str, to: str) -> str:
        reason = f"rejected by SES: {event.detail.get('reason', 'unknown reason')}"
        if not rec.failed_event(user, campaign, to, event.message_id, reason):
            return "already recorded"
        return "recorded failed"

    def _on_delivery(self, rec: Recorder, event: SesEvent, user: str, campaign: str, to: str) -> str:
        """Recorded with SES's own time of the delivery, which the tracking routes time a machine's hit by (its
        event may be handled minutes later)."""
        smtp = str(event.detail.get("smtpResponse", ""))
        at = _epoch_ms(event.detail.get("timestamp"))
        if rec.feedback(user, campaign, to, "delivered", smtp, event.message_id, happened_at_ms=at):
            return "recorded delivered"
        return "already recorded"

    def _on_bounce(self, rec: Recorder, event: SesEvent, user: str, campaign: str, to: str) -> str:
        """Recorded; a permanent one also suppresses the address everywhere and counts for the guard."""
        kind = str(event.detail.get("bounceType", "Undetermined"))
        diagnostic = _bounce_diagnostic(event.detail, to)
        outcome = _feedback(rec, user, campaign, to, "bounced", f"{kind}: {diagnostic}", event.message_id)
        if kind == "Permanent":
            reason = f"permanent bounce: {diagnostic}"
            self._suppressions.add(None, to, BOUNCE, reason)
            self._suppressions.add(user, to, BOUNCE, reason)  # on the tenant's own list: it met the address
            self._guard(user, campaign, to, event, "bounced")
        return outcome

    def _on_complaint(self, rec: Recorder, event: SesEvent, user: str, campaign: str, to: str) -> str:
        """Recorded; the address suppressed for this tenant, and counted for the guard."""
        kind = str(event.detail.get("complaintFeedbackType", "complaint"))
        outcome = _feedback(rec, user, campaign, to, "complained", kind, event.message_id)
        self._suppressions.add(user, to, COMPLAINT, f"complaint ({kind}) about campaign {campaign}")
        self._guard(user, campaign, to, event, "complained")
        return outcome

    def _guard(self, user: str, campaign: str, to: str, event: SesEvent, kind: str) -> None:
        """Count it against the tenant's rolling window (once per recipient, in a transaction with a mark on
        its ledger entry), and pause the tenant if that is now too high; on the platform's account, also if
        SES has paused its SES tenant (read at most once a minute).

        Every try of the event gets here, not only the one that recorded it: a try that failed after its
        record (the suppression write, the count, the window's read, the pause) is redelivered, finds the
        feedback recorded, and must still count it and judge the window, or the complaint is hidden."""
        self._reputation.count_feedback(user, campaign, to, kind)
        why = verdict(self._reputation.window(user), self._reputation.limits)
        if why and self._tenants.pause(user, GUARD, f"reputation guard: {why}"):
            log.warning("tenant paused by the reputation guard", user=user, reason=why)
        if why or event.sending_account != self._platform_account:
            return
        tenant = self._tenants.get(user)
        region = (tenant.sender.region if tenant else None) or self._region
        try:
            status = self._ses_tenants.status(user, region)
            if status is not None and status.paused:  # a cached pause, read again: SES may have lifted it since
                status = self._ses_tenants.status(user, region, max_age_s=0)
        except Exception as exc:  # the event is recorded; the drainer finds SES's pause at its next send
            log.warning("SES tenant status unknown", user=user, error=type(exc).__name__)
            return
        if status is not None and status.paused and self._tenants.pause(user, SES, status.reason):
            log.warning("tenant paused by SES", user=user, reason=status.reason)


class EventBatch:
    """One invocation's events. Counters are gathered over the batch and written once per campaign when it
    is flushed. A failed flush is logged, not retried through the events: their transitions are in the
    ledger (the record of truth), handling them again would find them recorded and count nothing, and the
    recount restores the counts from the ledger (chalicelib.jobs.recount).

    A bounce or a complaint costs several requests (suppressions, the reputation guard's counts, a pause):
    under a storm of them and a throttled table, a batch (chalicelib.core.resources.EVENTS_BATCH_SIZE) could
    outlast the function's time, and Lambda would stop it before
    its counters were written and give every event back, the handled ones too. So an event is begun only
    with STOP_WITH_MS left, and FLUSH_MS_A_CAMPAIGN more for each campaign the batch is about; those not
    begun are answered as failed and come back after the queue's visibility timeout."""

    def __init__(self, events: SesEvents, recorder: Recorder, remaining_ms: Callable[[], int]) -> None:
        self._events = events
        self._recorder = recorder  # its counts gathered
        self._remaining_ms = remaining_ms
        self._ahead = NOTHING_READ
        self._outcomes: dict[str, str | Exception] = {}

    def record_all(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Record a batch as Lambda gives it (SQS records): its Send events read ahead, then every event,
        LANES at a time. Each record's outcome, by its messageId, is kept for `outcome`."""
        bodies = [str(r.get("body", "")) for r in records]
        self.read_ahead(bodies)
        with ThreadPoolExecutor(max(1, min(LANES, len(bodies))), thread_name_prefix=LANE_PREFIX) as lanes:
            outcomes = list(lanes.map(self._outcome_of, bodies))
        self._outcomes = {str(r.get("messageId", "")): o for r, o in zip(records, outcomes, strict=True)}

    def outcome(self, message_id: str) -> str:
        """What recording the record did (`record_all`), or the error it raised, raised again."""
        found = self._outcomes[message_id]
        if isinstance(found, Exception):
            raise found
        return found

    def _outcome_of(self, body: str) -> str | Exception:
        try:
            return self.record(body)
        except Exception as exc:  # the record's own failure: answered for it alone
            return exc

    def read_ahead(self, bodies: Iterable[str]) -> None:
        """Read the ledger for the batch's Send events at once (SesEvents.read_ahead), before recording any;
        not with too little time left to begin an event."""
        if self._remaining_ms() >= STOP_WITH_MS:
            self._ahead = self._events.read_ahead(bodies, self._recorder)

    def record(self, body: str) -> str:
        if self._remaining_ms() < STOP_WITH_MS + FLUSH_MS_A_CAMPAIGN * self._ahead.campaigns:
            raise NotBegun("too little of the invocation's time left: the event comes back")
        return self._events.record(body, self._recorder, self._ahead)

    def flush(self) -> None:
        try:
            self._recorder.flush()
        except Exception as exc:
            log.error("SES events recorded, their campaign counters not written", error=repr(exc))


def _email_of(event: SesEvent) -> tuple[str, str, str] | None:
    """The moonsend email the event is about, (tenant, campaign, recipient), from its headers and its one
    recipient; None for other mail."""
    if not event.user_id or not event.campaign_id or len(event.recipients) != 1:
        return None
    return (event.user_id, event.campaign_id, event.recipients[0])


def _feedback(rec: Recorder, user: str, campaign: str, to: str, kind: str, detail: str, message_id: str) -> str:
    if rec.feedback(user, campaign, to, kind, detail, message_id):
        return f"recorded {kind}"
    return "already recorded"


def _epoch_ms(timestamp: Any) -> int | None:
    """SES's ISO 8601 timestamp (`2016-10-19T23:21:04.133Z`) in epoch ms; None for anything else."""
    try:
        return int(datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp() * 1000)
    except (TypeError, ValueError, OverflowError):
        return None


def _bounce_diagnostic(bounce: dict[str, Any], to: str) -> str:
    for r in bounce.get("bouncedRecipients", []):
        if isinstance(r, dict) and str(r.get("emailAddress", "")).lower() == to.lower():
            return str(r.get("diagnosticCode") or r.get("status") or bounce.get("bounceSubType", ""))
    return str(bounce.get("bounceSubType", ""))
