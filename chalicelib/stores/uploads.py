"""Uploads, the campaigns published from them, and the requests that asked for those campaigns: one table,
keyed by tenant, three kinds of row (`sk`):

- `upload#<id>`: an upload of recipients, from the presigned upload to its report (`waiting`, `reading`,
  `read`, or `refused` with why); kept UPLOAD_KEEP_DAYS, as its files are.
- `send#<campaign id>`: a campaign being published to PrecompileEmail by upload_jobs (chalicelib.produce.
  fanout): the message every batch shares, and how far into the recipients' file it got (`offset`, in
  bytes, at a recipient's line). Each step is written on the condition that the step is the one read, so of
  two invocations of one publication only one goes on.
- `request#<sha256 of the Idempotency-Key>`: a `POST /campaigns` request already taken, its fingerprint
  and the campaign it made, kept REQUEST_KEPT_S: the same request again answers the same campaign.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, PutError
from pynamodb.models import Model

from chalicelib.core.resources import UPLOAD_KEEP_DAYS
from chalicelib.stores.tables import bound, condition_failed, update_if

WAITING, READING, READ, REFUSED = "waiting", "reading", "read", "refused"
PUBLISHING, PUBLISHED, PAUSED, CANCELLED = "publishing", "published", "paused", "cancelled"
KEPT_S = UPLOAD_KEEP_DAYS * 86400
REQUEST_KEPT_S = 24 * 3600
UPLOADS_LISTED = 50
# Past a reading's three tries (15 minutes each, Lambda's retries a minute and two after): a reading still
# `reading` then has died, and no try of it is left to write its files over a new reading's.
READ_STALE_S = 60 * 60


class UploadRow(Model):
    class Meta:
        table_name = "unbound"

    user_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    state = UnicodeAttribute(null=True)
    format = UnicodeAttribute(null=True)
    filename = UnicodeAttribute(null=True)
    address_column = UnicodeAttribute(null=True)
    report = UnicodeAttribute(null=True)  # JSON: the upload's counts
    problem = UnicodeAttribute(null=True)
    upload_id = UnicodeAttribute(null=True)
    envelope = UnicodeAttribute(null=True)  # JSON: a send's message without its recipients
    offset = NumberAttribute(null=True)
    published = NumberAttribute(null=True)
    total = NumberAttribute(null=True)
    step = NumberAttribute(null=True)
    holder = UnicodeAttribute(null=True)  # the invocation publishing a send
    held_until = NumberAttribute(null=True)
    fingerprint = UnicodeAttribute(null=True)
    campaign_id = UnicodeAttribute(null=True)
    created_at = NumberAttribute(null=True)
    updated_at = NumberAttribute(null=True)
    expires_at = NumberAttribute()  # DynamoDB TTL


@dataclass(frozen=True)
class Upload:
    user_id: str
    upload_id: str
    state: str
    format: str
    filename: str
    address_column: str | None
    created_at: float
    updated_at: float
    report: dict[str, Any] | None = None
    problem: str | None = None

    @property
    def expires_at(self) -> float:
        return self.created_at + KEPT_S


@dataclass(frozen=True)
class Send:
    """A campaign's publication from a file of recipients (an upload's, or the request's own)."""

    user_id: str
    campaign_id: str
    upload_id: str
    state: str
    envelope: dict[str, Any]
    offset: int
    published: int
    total: int
    step: int
    created_at: float
    updated_at: float


class Uploads:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(UploadRow, table_name, region)

    # --- uploads -----------------------------------------------------------------------------------
    def add(self, upload: Upload) -> None:
        m = self._model
        m(
            upload.user_id,
            _upload_sk(upload.upload_id),
            state=upload.state,
            format=upload.format,
            filename=upload.filename,
            address_column=upload.address_column,
            created_at=upload.created_at,
            updated_at=upload.updated_at,
            expires_at=int(upload.expires_at),
        ).save(condition=m.sk.does_not_exist())

    def upload(self, user_id: str, upload_id: str) -> Upload | None:
        try:
            return _upload(self._model.get(user_id, _upload_sk(upload_id), consistent_read=True))
        except DoesNotExist:
            return None

    def uploads(self, user_id: str) -> list[Upload]:
        """The tenant's uploads still kept, newest first (at most UPLOADS_LISTED)."""
        m = self._model
        rows = m.query(user_id, m.sk.startswith("upload#"), consistent_read=True)
        found = sorted((_upload(r) for r in rows), key=lambda u: u.created_at, reverse=True)
        return found[:UPLOADS_LISTED]

    def start_reading(self, upload: Upload, address_column: str | None, now: float) -> bool:
        """Mark the upload as being read; False when it is being read or was read (asked twice). A reading not
        heard of for READ_STALE_S (its invocations failed every retry) may be started again."""
        m = self._model
        actions = [m.state.set(READING), m.updated_at.set(now)]
        if address_column is not None:
            actions.append(m.address_column.set(address_column))
        row = m(upload.user_id, _upload_sk(upload.upload_id))
        stalled = (m.state == READING) & (m.updated_at < now - READ_STALE_S)
        return update_if(row, actions, m.state.is_in(WAITING, REFUSED) | stalled)

    def finish_reading(self, upload: Upload, report: dict[str, Any] | None, problem: str | None, now: float) -> None:
        m = self._model
        state = REFUSED if problem is not None else READ
        actions = [m.state.set(state), m.updated_at.set(now)]
        actions.append(m.report.set(json.dumps(report)) if report is not None else m.report.remove())
        actions.append(m.problem.set(problem[:1000]) if problem is not None else m.problem.remove())
        update_if(m(upload.user_id, _upload_sk(upload.upload_id)), actions, m.state == READING)

    # --- sends -------------------------------------------------------------------------------------
    def start_send(self, send: Send) -> bool:
        """Record a campaign's publication; False when the campaign has one already."""
        m = self._model
        try:
            m(
                send.user_id,
                _send_sk(send.campaign_id),
                state=send.state,
                upload_id=send.upload_id,
                envelope=json.dumps(send.envelope, separators=(",", ":")),
                offset=send.offset,
                published=send.published,
                total=send.total,
                step=send.step,
                created_at=send.created_at,
                updated_at=send.updated_at,
                expires_at=int(send.created_at) + KEPT_S,
            ).save(condition=m.sk.does_not_exist())
            return True
        except PutError as exc:
            if condition_failed(exc):
                return False
            raise

    def send(self, user_id: str, campaign_id: str) -> Send | None:
        try:
            return _send(self._model.get(user_id, _send_sk(campaign_id), consistent_read=True))
        except DoesNotExist:
            return None

    def hold(self, send: Send, holder: str, now: float, lease_s: float) -> bool:
        """Take the send's lease for `holder` (an invocation), unless another holds it still; False then."""
        m = self._model
        free = m.held_until.does_not_exist() | (m.held_until < now) | (m.holder == holder)
        actions = [m.holder.set(holder), m.held_until.set(now + lease_s)]
        return update_if(m(send.user_id, _send_sk(send.campaign_id)), actions, (m.state == PUBLISHING) & free)

    def release(self, send: Send, holder: str) -> None:
        """Give the lease up (an invocation handing the send on, or stopping at a pause)."""
        m = self._model
        update_if(m(send.user_id, _send_sk(send.campaign_id)), [m.held_until.set(0)], m.holder == holder)

    def advance(
        self, send: Send, offset: int, published: int, finished: bool, now: float, holder: str, lease_s: float
    ) -> Send | None:
        """Record a step of the publication (recipients published up to `offset`) and renew the lease: the send
        as it is now, or None when the step is not the holder's to record (another took the lease, or recorded
        the step), or the send was paused or cancelled."""
        m = self._model
        state = PUBLISHED if finished else PUBLISHING
        actions = [
            m.offset.set(offset),
            m.published.add(published),
            m.step.add(1),
            m.updated_at.set(now),
            m.state.set(state),
            m.held_until.set(now + lease_s),
        ]
        condition = (m.step == send.step) & (m.state == PUBLISHING) & (m.holder == holder)
        if not update_if(m(send.user_id, _send_sk(send.campaign_id)), actions, condition):
            return None
        return replace(
            send, offset=offset, published=send.published + published, step=send.step + 1, updated_at=now, state=state
        )

    def set_send_state(self, user_id: str, campaign_id: str, state: str, now: float) -> Send | None:
        """Pause, cancel or resume a publication not done yet; the send as it is then (None: it has none)."""
        m = self._model
        allowed = {PAUSED: (PUBLISHING,), CANCELLED: (PUBLISHING, PAUSED), PUBLISHING: (PAUSED,)}[state]
        row = m(user_id, _send_sk(campaign_id))
        update_if(row, [m.state.set(state), m.step.add(1), m.updated_at.set(now)], m.state.is_in(*allowed))
        return self.send(user_id, campaign_id)

    # --- requests ----------------------------------------------------------------------------------
    def claim_request(self, user_id: str, key_digest: str, fingerprint: str, campaign_id: str, now: float) -> bool:
        """Take a request's Idempotency-Key for a campaign; False when the key was taken already."""
        m = self._model
        try:
            m(
                user_id,
                f"request#{key_digest}",
                fingerprint=fingerprint,
                campaign_id=campaign_id,
                created_at=now,
                expires_at=int(now) + REQUEST_KEPT_S,
            ).save(condition=m.sk.does_not_exist() | (m.expires_at < int(now)))
            return True
        except PutError as exc:
            if condition_failed(exc):
                return False
            raise

    def request(self, user_id: str, key_digest: str) -> tuple[str, str] | None:
        """(fingerprint, campaign id) of a request already taken under this key."""
        try:
            row = self._model.get(user_id, f"request#{key_digest}", consistent_read=True)
        except DoesNotExist:
            return None
        return str(row.fingerprint), str(row.campaign_id)


def _upload_sk(upload_id: str) -> str:
    return f"upload#{upload_id}"


def _send_sk(campaign_id: str) -> str:
    return f"send#{campaign_id}"


def _upload(row: UploadRow) -> Upload:
    return Upload(
        row.user_id,
        row.sk.partition("#")[2],
        str(row.state),
        str(row.format),
        str(row.filename or ""),
        row.address_column,
        float(row.created_at or 0),
        float(row.updated_at or 0),
        json.loads(row.report) if row.report else None,
        row.problem,
    )


def _send(row: UploadRow) -> Send:
    return Send(
        row.user_id,
        row.sk.partition("#")[2],
        str(row.upload_id),
        str(row.state),
        json.loads(row.envelope or "{}"),
        int(row.offset or 0),
        int(row.published or 0),
        int(row.total or 0),
        int(row.step or 0),
        float(row.created_at or 0),
        float(row.updated_at or 0),
    )
