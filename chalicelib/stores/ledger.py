"""The per-recipient ledger: every recipient of a campaign ends in one recorded state.

One DynamoDB item per (tenant, campaign, lower-cased address), shared by precompile_email and
send_emails. It is what makes sending exactly-once although SNS, Lambda and SQS all deliver at least
once (the design of seed 001: a conditional-write ledger keyed by a business id, never a message id):

- precompile records `queued` after the email is on the queue, and `rejected` with the reason when it
  is not; a redelivered event finds the recipient recorded and queues nothing again. A crash between
  enqueue and record leaves the email queued with no record: the redelivered event queues it again,
  and the claim below makes the second copy a no-op;
- send_emails claims the recipient before calling SES (a conditional write: not sent or failed, and
  not claimed by someone else within the claim's lifetime), and records `sent` with SES's MessageId,
  or `failed` with the reason, after. A duplicate queue message for a recipient with an outcome is
  deleted without sending; a claim whose holder vanished expires and may be retaken.

The one ambiguous window: SES accepted the email and the drainer died before recording `sent`. SES's
Send event (chalicelib.feedback.ses_events) records it `sent`; the claim outlives the message's invisibility
(`Settings.claim_hold_s`, 30 min against 5 by default), so the redelivered message waits for that event
and is then dropped. It is sent again only if the event is more than 30 minutes late, or never comes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from typing import TypeVar

from pynamodb.constants import ALL_OLD
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action

from chalicelib.stores.ledger_model import (
    CANCELLED,
    EXPIRED,
    FAILED,
    FEEDBACK,
    FINAL,
    QUEUED,
    REJECTED,
    SCHEDULED,
    SENT,
    SUPPRESSED,
    LedgerModel,
    entry_of,
    open_condition,
    pk_of,
)
from chalicelib.stores.ledger_tally import READ, tally
from chalicelib.stores.ports.ledger import Claim, Entry, HitContext, Tally
from chalicelib.stores.tables import bound, condition_failed, warm
from chalicelib.stores.write_batch import Write, apply_all, apply_one

# A retry that was started (failed -> queued) but whose email never reached the queue (its runner died)
# is taken again by the next retry after this long; an extra copy is harmless (the claim sends one).
_HIT_CONTEXT = ("sent_at", "delivered_at", "ses_delivered_at", "clicked_at", "machine_clicked_at", "first_click")


def _ms_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None


RETENTION_S = 180 * 24 * 3600
T = TypeVar("T")
Recipient = tuple[str, str, str]  # (tenant, campaign, address)


def _mark(m: type[LedgerModel], name: str, now: int) -> Action:
    """Set the entry time `name` unless it is set (a recipient enters the queue once, whatever comes again)."""
    attribute = getattr(m, name)
    return attribute.set(attribute | now)  # if_not_exists


class Ledger:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(LedgerModel, table_name, region)

    def warm(self) -> None:
        """Create the DynamoDB client now, in one thread, rather than in many at first use."""
        warm(self._model)

    # --- precompile ------------------------------------------------------------------------------
    def recorded(self, user_id: str, campaign_id: str, emails: Iterable[str]) -> dict[str, str | None]:
        """The recipients of these addresses that the ledger knows, with their state."""
        pk = pk_of(user_id, campaign_id)
        keys = sorted({e.lower() for e in emails})
        out: dict[str, str | None] = {}
        for i in range(0, len(keys), 100):
            for item in self._model.batch_get([(pk, k) for k in keys[i : i + 100]]):
                out[item.rcpt] = item.state
        return out

    def record_queued(self, user_id: str, campaign_id: str, emails: list[str]) -> int:
        """Record recipients as queued, never over another state (the drainer may be faster).

        Returns how many were newly recorded."""
        m = self._model
        cond = m.state.does_not_exist()
        return self._apply(
            [self._write(user_id, campaign_id, e, QUEUED, None, cond, marks=("queued_at",)) for e in emails]
        )

    def record_rejected(self, user_id: str, campaign_id: str, rejected: list[tuple[str, str]]) -> int:
        """Record recipients as rejected with their reason, unless they already have a state."""
        m = self._model
        cond = m.state.does_not_exist()
        return self._apply([self._write(user_id, campaign_id, e, REJECTED, why, cond) for e, why in rejected])

    def record_suppressed(self, user_id: str, campaign_id: str, suppressed: list[tuple[str, str]]) -> int:
        """Record recipients as suppressed (not queued) with why, unless they already have a state."""
        m = self._model
        cond = m.state.does_not_exist()
        return self._apply([self._write(user_id, campaign_id, e, SUPPRESSED, why, cond) for e, why in suppressed])

    def record_scheduled(self, user_id: str, campaign_id: str, emails: list[str]) -> int:
        """Record recipients kept in the schedule store for later (not yet queued)."""
        cond = self._model.state.does_not_exist()
        return self._apply(
            [self._write(user_id, campaign_id, e, SCHEDULED, None, cond, marks=("kept_at",)) for e in emails]
        )

    def record_released(self, user_id: str, campaign_id: str, emails: list[str]) -> int:
        """Scheduled recipients now on their queue: `queued` (only over `scheduled`)."""
        cond = self._model.state == SCHEDULED
        marks = ("queued_at", "released_at")
        return self._apply([self._write(user_id, campaign_id, e, QUEUED, None, cond, marks=marks) for e in emails])

    def record_unsent(self, user_id: str, campaign_id: str, state: str, emails: list[str], reason: str) -> int:
        """`expired` or `cancelled` for recipients with no outcome yet, none of them claimed by a drainer.

        For email that never reached a drainer (still scheduled, or expired before it was sent)."""
        if state not in (EXPIRED, CANCELLED):
            raise ValueError(f"not an unsent state: {state}")
        m = self._model
        now = int(time.time() * 1000)
        cond = open_condition(m) & (m.claimed_until.does_not_exist() | (m.claimed_until < now))
        return self._apply([self._write(user_id, campaign_id, e, state, reason, cond) for e in emails])

    def reopen(self, user_id: str, campaign_id: str, email: str) -> str | None:
        """Retry-failed: a failed recipient becomes `queued` again (once per retry; never a sent one). Returns
        the state it was taken from (`failed`, or `queued` below), None if it was not taken.

        Also takes a recipient already queued again by an earlier retry and not claimed now: that retry may
        have died before its copy reached the queue (a killed request, answered 502, asked again at once),
        so the retry is done again, and the claim makes a second copy harmless. `retries` counts the failed
        recipients queued again (as the campaign's `retried` does), not a retry done again."""
        m = self._model
        now = int(time.time() * 1000)
        if self._reopen(user_id, campaign_id, email, now, m.state == FAILED):
            return FAILED
        unclaimed = (
            (m.state == QUEUED) & m.retried_at.exists() & (m.claimed_until.does_not_exist() | (m.claimed_until < now))
        )
        return QUEUED if self._reopen(user_id, campaign_id, email, now, unclaimed, again=True) else None

    def _reopen(
        self, user_id: str, campaign_id: str, email: str, now: int, condition: Condition, *, again: bool = False
    ) -> bool:
        m = self._model
        actions: list[Action] = [
            m.state.set(QUEUED),
            m.reason.remove(),
            m.retried_at.set(now),
            m.updated_at.set(now),
            m.expires_at.set(now // 1000 + RETENTION_S),
        ]
        if not again:
            actions.append(m.retries.add(1))
        try:
            m(pk_of(user_id, campaign_id), email.lower()).update(actions=actions, condition=condition)
            return True
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise

    def _write(
        self,
        user_id: str,
        campaign_id: str,
        email: str,
        state: str,
        reason: str | None,
        condition: Condition,
        *,
        marks: tuple[str, ...] = (),
    ) -> Write:
        """One recipient's conditional write of `state`; `marks` are the entry times it sets if not set (what the
        recount reads: the recipient entered the queue, was kept for later, was released)."""
        m = self._model
        now = int(time.time() * 1000)
        actions: list[Action] = [
            m.state.set(state),
            m.email.set(email),
            m.updated_at.set(now),
            m.expires_at.set(now // 1000 + RETENTION_S),
        ]
        actions += [_mark(m, name, now) for name in marks]
        if reason:
            actions.append(m.reason.set(reason[:1000]))
        return Write(m, pk_of(user_id, campaign_id), email.lower(), actions, condition)

    def _apply(self, writes: list[Write]) -> int:
        """How many of these conditional writes were made (several at once: chalicelib.stores.write_batch)."""
        return sum(apply_all(writes))

    # --- send_emails -------------------------------------------------------------------------------
    def claim(self, user_id: str, campaign_id: str, email: str, hold_s: float) -> Claim | Entry:
        """Take the right to send to this recipient, or say why not (the entry as it stands)."""
        m = self._model
        now = int(time.time() * 1000)
        token = uuid.uuid4().hex
        pk, rcpt = pk_of(user_id, campaign_id), email.lower()
        cond = open_condition(m) & (m.claimed_until.does_not_exist() | (m.claimed_until < now))
        actions = [
            m.claim_token.set(token),
            m.claimed_until.set(now + int(hold_s * 1000)),
            m.email.set(email),
            m.attempts.add(1),
            m.updated_at.set(now),
            m.expires_at.set(now // 1000 + RETENTION_S),
            _mark(m, "queued_at", now),  # a drainer faster than precompile's record: the email was on the queue
        ]
        if apply_one(Write(m, pk, rcpt, actions, cond)):
            return Claim(pk, rcpt, token)
        item = self._item(pk, rcpt)
        if item is not None and item.claim_token == token:
            # Ours: the SDK's retry of a claim that went through (its answer lost) found the claim taken.
            return Claim(pk, rcpt, token)
        return entry_of(item) if item is not None else Entry(email, None, None, None, None)

    def finish(self, claim: Claim, state: str, *, message_id: str | None = None, reason: str | None = None) -> bool:
        """Record the outcome of a claimed send.

        False if the claim was lost meanwhile, or SES's own Send event recorded the outcome first (then
        the event's write counted it, and this one must not count it again). True if this write made it, even
        when the SDK's retry of it was what answered."""
        m = self._model
        now = int(time.time() * 1000)
        actions = [m.state.set(state), m.updated_at.set(now), m.claimed_until.remove()]
        if state == SENT:
            actions.append(m.sent_at.set(now))
        if message_id:
            actions.append(m.message_id.set(message_id))
        if reason:
            actions.append(m.reason.set(reason[:1000]))
        condition = (m.claim_token == claim.token) & open_condition(m)
        if apply_one(Write(m, claim.pk, claim.rcpt, actions, condition)):
            return True
        # The SDK retries a write whose answer was lost, and the retry finds the outcome recorded: by this very
        # write (its claim released, its state and message id), or by SES's Send event (which leaves the claim).
        item = self._item(claim.pk, claim.rcpt)
        return (
            item is not None
            and item.claim_token == claim.token
            and item.state == state
            and item.claimed_until is None
            and (message_id is None or item.message_id == message_id)
        )

    def with_outcome(self, recipients: Iterable[Recipient]) -> set[Recipient]:
        """Of these (tenant, campaign, address), the ones whose outcome the ledger shows, read eventually
        consistent, a hundred to a request: what a batch of SES's Send events need not write."""
        wanted = list(recipients)
        keys = {(pk_of(u, c), e.lower()) for u, c, e in wanted}
        final = {
            (item.pk, item.rcpt)
            for item in self._model.batch_get(keys, attributes_to_get=["pk", "rcpt", "state"])
            if item.state in FINAL
        }
        return {r for r in wanted if (pk_of(r[0], r[1]), r[2].lower()) in final}

    def record_sent_event(
        self, user_id: str, campaign_id: str, email: str, message_id: str, *, read_first: bool = True
    ) -> bool:
        """SES says it accepted this email (its Send event): record `sent` unless an outcome is recorded.

        This closes the ambiguous window of a send: if the drainer died after SES accepted the email and
        before it recorded `sent`, the event records it, and the redelivered queue message, finding the
        recipient sent, is dropped instead of sent again. True if this call recorded it.

        Nearly always the drainer has recorded the outcome already, and a conditional write that fails still
        costs a write unit: a read (eventually consistent, a tenth of the price) comes first, unless the
        caller read it already (`read_first=False`: `with_outcome`), and the conditional write, which alone
        decides, only when the read does not show an outcome."""
        m = self._model
        if read_first:
            try:
                seen = m.get(pk_of(user_id, campaign_id), email.lower(), attributes_to_get=["state"])
                if seen.state in FINAL:
                    return False
            except DoesNotExist:
                pass
        now = int(time.time() * 1000)
        try:
            m(pk_of(user_id, campaign_id), email.lower()).update(
                actions=[
                    m.state.set(SENT),
                    m.message_id.set(message_id),
                    m.email.set(email),
                    m.reason.set("recorded from SES's Send event"),
                    m.updated_at.set(now),
                    m.sent_at.set(now),
                    m.expires_at.set(now // 1000 + RETENTION_S),
                ],
                condition=open_condition(m),
            )
            return True
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise

    def record_failed_event(
        self, user_id: str, campaign_id: str, email: str, message_id: str, reason: str
    ) -> str | None:
        """SES refused an email it had accepted (its Reject event): `failed`, over `sent` of that message.

        Returns the state it replaced (None: nothing recorded, the entry has another outcome)."""
        m = self._model
        now = int(time.time() * 1000)
        try:
            # The state replaced, from the write itself (ALL_OLD): read first, a Send event recorded between
            # the read and the write (the same batch's, in another lane) would be replaced uncounted.
            answer = m._get_connection().update_item(
                pk_of(user_id, campaign_id),
                email.lower(),
                actions=[m.state.set(FAILED), m.reason.set(reason[:1000]), m.updated_at.set(now)],
                condition=open_condition(m) | ((m.state == SENT) & (m.message_id == message_id)),
                return_values=ALL_OLD,
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return None
            raise
        old = answer.get("Attributes", {}).get("state", {}).get("S")
        return str(old) if old else QUEUED

    def record_feedback(
        self,
        user_id: str,
        campaign_id: str,
        email: str,
        kind: str,
        detail: str,
        message_id: str | None = None,
        evidence: str | None = None,
        happened_at_ms: int | None = None,
    ) -> bool:
        """What the receiving side said of a sent email (delivered, bounced, complained), once per kind.

        Kept beside the state (which stays `sent`: the email did go out) as `<kind>_at` and the latest
        `feedback` line. With `message_id` (SES's events), the entry must be that send's: an event is
        found by tenant, campaign and recipient, and matched to the ledger by SES's MessageId (an entry
        whose message id is not yet recorded is taken: the Send event or the drainer's record may still
        be on its way). True the first time this kind is recorded, so that it is counted once. A machine's open or
        click keeps what marked it (`evidence`); the first click of either keeps its link (`detail`), which the
        next click's judgement reads (chalicelib.ingest.machines); a delivery keeps SES's time of it
        (`happened_at_ms`) beside moonsend's."""
        if kind not in FEEDBACK:
            raise ValueError(f"unknown feedback {kind}")
        m = self._model
        attr = getattr(m, f"{kind}_at")
        now = int(time.time() * 1000)
        line = f"{kind}: {detail}"[:1000]
        # Delivery comes before anything else the receiving side says; handled after it (a batch's events run
        # several at once), it must not hide a bounce or complaint already shown: it is the line only if none is.
        feedback = m.feedback.set(m.feedback | line) if kind == "delivered" else m.feedback.set(line)
        actions = [attr.set(now), feedback, m.updated_at.set(now)]
        if kind in ("clicked", "machine_clicked"):
            actions.append(m.first_click.set(m.first_click | detail[:1000]))
        if evidence is not None:
            actions.append(m.machine_evidence.set(evidence[:1000]))
        if kind == "delivered" and happened_at_ms is not None:
            actions.append(m.ses_delivered_at.set(happened_at_ms))
        try:
            m(pk_of(user_id, campaign_id), email.lower()).update(
                actions=actions,
                condition=(
                    attr.does_not_exist() & (m.message_id.does_not_exist() | (m.message_id == message_id))
                    if message_id
                    else attr.does_not_exist()
                ),
            )
            return True
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise

    def unclaim(self, claim: Claim) -> None:
        """Give a claim back without an outcome (throttled, transient error): it may be retaken."""
        m = self._model
        try:
            m(claim.pk, claim.rcpt).update(actions=[m.claimed_until.set(0)], condition=m.claim_token == claim.token)
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    # --- reading -------------------------------------------------------------------------------------
    def hit_context(self, user_id: str, campaign_id: str, email: str) -> HitContext | None:
        """What an open or click of this recipient is judged against: when its send was recorded and its
        delivery, and its first click (None: no such recipient). Eventually consistent: half a read unit."""
        m = self._model
        try:
            item = m.get(pk_of(user_id, campaign_id), email.lower(), attributes_to_get=list(_HIT_CONTEXT))
        except DoesNotExist:
            return None
        clicks = [int(t) for t in (item.clicked_at, item.machine_clicked_at) if t is not None]
        return HitContext(
            sent_at=_ms_or_none(item.sent_at),
            delivered_at=_ms_or_none(item.ses_delivered_at if item.ses_delivered_at is not None else item.delivered_at),
            first_click_at=min(clicks, default=None),
            first_click=item.first_click,
        )

    def _item(self, pk: str, rcpt: str) -> LedgerModel | None:
        try:
            return self._model.get(pk, rcpt, consistent_read=True)
        except DoesNotExist:
            return None

    def get(self, user_id: str, campaign_id: str, email: str) -> Entry | None:
        try:
            item = self._model.get(pk_of(user_id, campaign_id), email.lower(), consistent_read=True)
        except DoesNotExist:
            return None
        return entry_of(item)

    def count(self, user_id: str, campaign_id: str) -> int:
        """The campaign's recipients: one row each. Queries of the whole partition (Select COUNT: no item is
        returned, every one is read and billed): for an operator's one-off, never for a request."""
        return self._model.count(pk_of(user_id, campaign_id))

    def tally(self, user_id: str, campaign_id: str) -> Tally:
        """The campaign's counters as its rows say (chalicelib.stores.ledger_tally). A Query of the whole
        partition, eventually consistent (the recount reads only rows settled long before): for the recount's
        job, never for a request."""
        m = self._model
        items = m.query(pk_of(user_id, campaign_id), attributes_to_get=list(READ))
        return tally({name: getattr(item, name) for name in READ} for item in items)

    def entries(
        self, user_id: str, campaign_id: str, state: str | None = None, *, states: tuple[str, ...] = ()
    ) -> Iterator[Entry]:
        m = self._model
        cond = (m.state == state) if state else (m.state.is_in(*states) if states else None)
        for item in m.query(pk_of(user_id, campaign_id), filter_condition=cond):
            yield entry_of(item)

    def page(
        self,
        user_id: str,
        campaign_id: str,
        *,
        state: str | None = None,
        limit: int = 100,
        after: str | None = None,
        prefix: str | None = None,
    ) -> tuple[list[Entry], str | None]:
        """The recipients among the next `limit` rows in address order after the address `after`, and the next
        page's cursor (None on the last page). `prefix` keeps the addresses that begin with it (any case): a
        key condition, so the rows read are those rows only (`after`, if given, must begin with it too).

        A page is one Query of at most `limit` rows, however large the campaign and whatever `state` asks
        for: DynamoDB applies the filter after it reads (its Limit counts rows read), so a filtered page may
        hold fewer than `limit`, even none, and still not be the last; its cursor goes on past every row it
        read. (pynamodb's own iteration would go on querying until `limit` rows matched: a whole million-row
        partition for a state no row has.)"""
        m = self._model
        pk = pk_of(user_id, campaign_id)
        cond = (m.state == state) if state else None
        start = {"pk": {"S": pk}, "rcpt": {"S": after.lower()}} if after else None
        key = m.rcpt.startswith(prefix.lower()) if prefix else None
        pages = m.query(pk, key, filter_condition=cond, last_evaluated_key=start, page_size=limit).page_iter
        page = next(pages, None) or {}
        entries = [entry_of(m.from_raw_data(item)) for item in page.get("Items", [])]
        last = pages.last_evaluated_key
        return entries, (last["rcpt"]["S"] if last else None)
