"""The ledger in memory, with the same conditions as the DynamoDB one, and DynamoDB's key sizes: a key over
them is refused as the table refuses it (a ValidationException), so code that lets one reach the ledger
fails its unit tests too, not only on the stricter local stack."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.stores.ledger_model import FAILED, FINAL, QUEUED, REJECTED, SCHEDULED
from chalicelib.stores.ports.ledger import Claim, Entry, HitContext
from infra.local.dynamodb_limits import HASH_KEY_MAX_BYTES, HASH_TOO_LONG, RANGE_KEY_MAX_BYTES, RANGE_TOO_LONG

OPEN = (None, QUEUED, SCHEDULED)


class FakeLedger:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.batch_reads = 0  # with_outcome's calls: one per batch of SES's events that read ahead
        self.event_reads = 0  # record_sent_event's own reads (those the batch did not read ahead)

    @staticmethod
    def _key(user: str, campaign: str, email: str) -> tuple[str, str]:
        """(pk, rcpt) as the table keys a recipient, refused as DynamoDB refuses a key over its size."""
        pk, rcpt = f"{user}#{campaign}", email.lower()
        for value, limit, message in (
            (pk, HASH_KEY_MAX_BYTES, HASH_TOO_LONG),
            (rcpt, RANGE_KEY_MAX_BYTES, RANGE_TOO_LONG),
        ):
            if len(value.encode("utf-8")) > limit:
                error = {"Error": {"Code": "ValidationException", "Message": message}}
                raise ClientError(error, "BatchGetItem")
        return pk, rcpt

    def _row(self, user: str, campaign: str, email: str) -> dict[str, Any]:
        return self.rows.setdefault(self._key(user, campaign, email), {"email": email})

    def recorded(self, user: str, campaign: str, emails: Iterable[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for e in emails:
            row = self.rows.get(self._key(user, campaign, e))
            if row is not None:
                out[e.lower()] = row.get("state")
        return out

    def _record(self, user: str, campaign: str, email: str, state: str, reason: str | None = None) -> bool:
        with self.lock:
            row = self._row(user, campaign, email)
            if row.get("state"):
                return False
            row.update(state=state, reason=reason)
            return True

    def record_queued(self, user: str, campaign: str, emails: list[str]) -> int:
        return sum(self._record(user, campaign, e, QUEUED) for e in emails)

    def record_rejected(self, user: str, campaign: str, rejected: list[tuple[str, str]]) -> int:
        return sum(self._record(user, campaign, e, REJECTED, r) for e, r in rejected)

    def record_scheduled(self, user: str, campaign: str, emails: list[str]) -> int:
        return sum(self._record(user, campaign, e, SCHEDULED) for e in emails)

    def record_released(self, user: str, campaign: str, emails: list[str]) -> int:
        n = 0
        with self.lock:
            for e in emails:
                row = self.rows.get(self._key(user, campaign, e), {})
                if row.get("state") == SCHEDULED:
                    row.update(state=QUEUED, reason=None)
                    n += 1
        return n

    def reopen(self, user: str, campaign: str, email: str) -> str | None:
        """A failed recipient queued again; one an earlier retry queued, not claimed now, taken again."""
        with self.lock:
            row = self._row(user, campaign, email)
            now = int(time.time() * 1000)
            if row.get("state") == FAILED:
                row.update(state=QUEUED, reason=None, retried_at=now, retries=row.get("retries", 0) + 1)
                return FAILED
            if row.get("state") == QUEUED and row.get("retried_at") and row.get("claimed_until", 0) < time.time():
                row.update(retried_at=now)
                return QUEUED
            return None

    def record_unsent(self, user: str, campaign: str, state: str, emails: list[str], reason: str) -> int:
        n = 0
        with self.lock:
            for e in emails:
                row = self._row(user, campaign, e)
                if row.get("state") in OPEN and row.get("claimed_until", 0) < time.time():
                    row.update(state=state, reason=reason)
                    n += 1
        return n

    def record_suppressed(self, user: str, campaign: str, suppressed: list[tuple[str, str]]) -> int:
        return sum(self._record(user, campaign, e, "suppressed", r) for e, r in suppressed)

    def record_feedback(
        self,
        user: str,
        campaign: str,
        email: str,
        kind: str,
        detail: str,
        message_id: str | None = None,
        evidence: str | None = None,
        happened_at_ms: int | None = None,
    ) -> bool:
        with self.lock:
            row = self._row(user, campaign, email)
            if row.get(f"{kind}_at"):
                return False
            if message_id and row.get("message_id") not in (None, message_id):
                return False
            row[f"{kind}_at"] = int(time.time() * 1000)
            if kind != "delivered" or not row.get("feedback"):  # a late Delivery hides nothing said after it
                row["feedback"] = f"{kind}: {detail}"
            if kind in ("clicked", "machine_clicked"):
                row.setdefault("first_click", detail)
            if evidence is not None:
                row["machine_evidence"] = evidence
            if kind == "delivered" and happened_at_ms is not None:
                row["ses_delivered_at"] = happened_at_ms
            return True

    def hit_context(self, user: str, campaign: str, email: str) -> HitContext | None:
        row = self.rows.get(self._key(user, campaign, email))
        if row is None:
            return None
        clicks = [t for t in (row.get("clicked_at"), row.get("machine_clicked_at")) if t]
        first = min(clicks, default=None)
        delivered = row.get("ses_delivered_at") or row.get("delivered_at")
        return HitContext(row.get("sent_at"), delivered, first, row.get("first_click"))

    def claim(self, user: str, campaign: str, email: str, hold_s: float) -> Claim | Entry:
        now = time.time()
        with self.lock:
            row = self._row(user, campaign, email)
            if row.get("state") in OPEN and row.get("claimed_until", 0) < now:
                token = uuid.uuid4().hex
                row.update(claim_token=token, claimed_until=now + hold_s, updated_at=int(now * 1000))
                return Claim(f"{user}#{campaign}", email.lower(), token)
            until = row.get("claimed_until")
            return Entry(
                email,
                row.get("state"),
                row.get("reason"),
                row.get("message_id"),
                row.get("updated_at"),
                claimed_until=int(until * 1000) if until else None,
            )

    def finish(self, claim: Claim, state: str, *, message_id: str | None = None, reason: str | None = None) -> bool:
        with self.lock:
            row = self.rows[(claim.pk, claim.rcpt)]
            if row.get("claim_token") != claim.token or row.get("state") not in OPEN:
                return False
            row.update(state=state, message_id=message_id, reason=reason, claimed_until=0)
            if state == "sent":
                row["sent_at"] = int(time.time() * 1000)
            return True

    def with_outcome(self, recipients: Iterable[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        self.batch_reads += 1
        with self.lock:
            return {(u, c, e) for u, c, e in recipients if self.rows.get(self._key(u, c, e), {}).get("state") in FINAL}

    def record_sent_event(
        self, user: str, campaign: str, email: str, message_id: str, *, read_first: bool = True
    ) -> bool:
        self.event_reads += read_first  # the read the DynamoDB ledger makes before its conditional write
        with self.lock:
            row = self._row(user, campaign, email)
            if row.get("state") not in OPEN:
                return False
            row.update(state="sent", message_id=message_id, reason="recorded from SES's Send event")
            row["sent_at"] = int(time.time() * 1000)
            return True

    def record_failed_event(self, user: str, campaign: str, email: str, message_id: str, reason: str) -> str | None:
        with self.lock:
            row = self._row(user, campaign, email)
            before = row.get("state")
            if before not in OPEN and not (before == "sent" and row.get("message_id") == message_id):
                return None
            row.update(state="failed", reason=reason)
            return str(before or QUEUED)

    def entries(
        self, user: str, campaign: str, state: str | None = None, *, states: tuple[str, ...] = ()
    ) -> Iterator[Entry]:
        wanted = (state,) if state else states
        for (pk, _rcpt), row in sorted(self.rows.items()):
            if pk == f"{user}#{campaign}" and (not wanted or row.get("state") in wanted):
                until = row.get("claimed_until")
                yield Entry(
                    row["email"],
                    row.get("state"),
                    row.get("reason"),
                    row.get("message_id"),
                    row.get("updated_at"),
                    feedback=row.get("feedback"),
                    claimed_until=int(until * 1000) if until else None,
                    retried_at=row.get("retried_at"),
                    retries=row.get("retries", 0),
                )

    def get(self, user: str, campaign: str, email: str) -> Entry | None:
        return next((e for e in self.entries(user, campaign) if e.email.lower() == email.lower()), None)

    def unclaim(self, claim: Claim) -> None:
        with self.lock:
            row = self.rows[(claim.pk, claim.rcpt)]
            if row.get("claim_token") == claim.token:
                row["claimed_until"] = 0

    def state(self, user: str, campaign: str, email: str) -> str | None:
        state = self.rows.get(self._key(user, campaign, email), {}).get("state")
        return None if state is None else str(state)

    def final_count(self) -> int:
        return sum(1 for r in self.rows.values() if r.get("state") in FINAL)
