"""The ledger in memory, with the same conditions as the DynamoDB one, and DynamoDB's key sizes: a key over
them is refused as the table refuses it (a ValidationException), so code that lets one reach the ledger
fails its unit tests too, not only on the stricter local stack."""

from __future__ import annotations

import threading
import time
import uuid

from botocore.exceptions import ClientError

from chalicelib.stores.ledger_model import FINAL, QUEUED, REJECTED, SCHEDULED, Claim, Entry
from infra.local.dynamodb_limits import HASH_KEY_MAX_BYTES, HASH_TOO_LONG, RANGE_KEY_MAX_BYTES, RANGE_TOO_LONG

OPEN = (None, QUEUED, SCHEDULED)


class FakeLedger:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict] = {}
        self.lock = threading.Lock()

    @staticmethod
    def _key(user, campaign, email):
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

    def _row(self, user, campaign, email):
        return self.rows.setdefault(self._key(user, campaign, email), {"email": email})

    def recorded(self, user, campaign, emails):
        out = {}
        for e in emails:
            row = self.rows.get(self._key(user, campaign, e))
            if row is not None:
                out[e.lower()] = row.get("state")
        return out

    def _record(self, user, campaign, email, state, reason=None):
        with self.lock:
            row = self._row(user, campaign, email)
            if row.get("state"):
                return False
            row.update(state=state, reason=reason)
            return True

    def record_queued(self, user, campaign, emails):
        return sum(self._record(user, campaign, e, QUEUED) for e in emails)

    def record_rejected(self, user, campaign, rejected):
        return sum(self._record(user, campaign, e, REJECTED, r) for e, r in rejected)

    def record_scheduled(self, user, campaign, emails):
        return sum(self._record(user, campaign, e, SCHEDULED) for e in emails)

    def record_unsent(self, user, campaign, state, emails, reason):
        n = 0
        with self.lock:
            for e in emails:
                row = self._row(user, campaign, e)
                if row.get("state") in OPEN and row.get("claimed_until", 0) < time.time():
                    row.update(state=state, reason=reason)
                    n += 1
        return n

    def record_suppressed(self, user, campaign, suppressed):
        return sum(self._record(user, campaign, e, "suppressed", r) for e, r in suppressed)

    def record_feedback(self, user, campaign, email, kind, detail, message_id=None):
        with self.lock:
            row = self._row(user, campaign, email)
            if row.get(f"{kind}_at"):
                return False
            if message_id and row.get("message_id") not in (None, message_id):
                return False
            row[f"{kind}_at"] = 1
            row["feedback"] = f"{kind}: {detail}"
            return True

    def claim(self, user, campaign, email, hold_s):
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

    def finish(self, claim, state, *, message_id=None, reason=None):
        with self.lock:
            row = self.rows[(claim.pk, claim.rcpt)]
            if row.get("claim_token") != claim.token or row.get("state") not in OPEN:
                return False
            row.update(state=state, message_id=message_id, reason=reason, claimed_until=0)
            return True

    def record_sent_event(self, user, campaign, email, message_id):
        with self.lock:
            row = self._row(user, campaign, email)
            if row.get("state") not in OPEN:
                return False
            row.update(state="sent", message_id=message_id, reason="recorded from SES's Send event")
            return True

    def record_failed_event(self, user, campaign, email, message_id, reason):
        with self.lock:
            row = self._row(user, campaign, email)
            before = row.get("state")
            if before not in OPEN and not (before == "sent" and row.get("message_id") == message_id):
                return None
            row.update(state="failed", reason=reason)
            return before or QUEUED

    def unclaim(self, claim):
        with self.lock:
            row = self.rows[(claim.pk, claim.rcpt)]
            if row.get("claim_token") == claim.token:
                row["claimed_until"] = 0

    def state(self, user, campaign, email):
        return self.rows.get(self._key(user, campaign, email), {}).get("state")

    def final_count(self):
        return sum(1 for r in self.rows.values() if r.get("state") in FINAL)
