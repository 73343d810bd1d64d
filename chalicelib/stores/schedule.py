"""The schedule store: rendered email kept until its campaign's `scheduledAt`.

Seed 004's lesson: keep scheduled email where "what is due now" is one cheap query. Here that is a
DynamoDB table whose partition key is the UTC minute a batch is due (`2026-12-01T08:00`): one item per
stored batch (the rendered emails of one PrecompileEmail message, up to 1,000), so releasing a minute is
one Query of one partition however many campaigns are scheduled in the others. The emails themselves
are gzipped JSON in the payload bucket under `scheduled/` (S3 costs a PUT per batch; the same bytes in
DynamoDB would cost a write unit per KiB of every email). The releaser (chalicelib.jobs.releaser) keeps a
cursor item in the same table: the minute it has released up to, so a releaser that was down for an
hour goes through that hour's partitions when it comes back.

A batch's key is the digest of its tenant, campaign and addresses: a precompile retried after a crash
stores the same batch over itself, never a second copy.
"""

from __future__ import annotations

import calendar
import contextlib
import gzip
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import quote

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from chalicelib.core.contract import iso_ms
from chalicelib.core.ports import S3Objects
from chalicelib.core.resources import PARKED_PREFIX, SCHEDULED_PREFIX
from chalicelib.stores.ports.schedule import StoredBatch
from chalicelib.stores.tables import bound, warm

CURSOR_BUCKET, CURSOR_ITEM = "cursor", "releaser"
# Batches the releaser could not release, tried again at each run (ScheduleStore.set_aside).
RETRY_BUCKET = "retry"
# Partitions read again behind the cursor on every run: a batch stored while the releaser was moving
# past its minute (a precompile slower than the store's margin) is still found.
RESCAN_MINUTES = 5
# A releaser with no cursor yet (first run) starts this far back.
FIRST_RUN_MINUTES = 60


class ScheduleModel(Model):
    class Meta:
        table_name = "unbound"

    bucket = UnicodeAttribute(hash_key=True)  # the UTC minute it is due, or "cursor"
    item = UnicodeAttribute(range_key=True)  # "<userId>#<campaignId>#<digest>"
    user_id = UnicodeAttribute(null=True)
    campaign_id = UnicodeAttribute(null=True)
    plan = UnicodeAttribute(null=True)
    queue = UnicodeAttribute(null=True)
    due_ms = NumberAttribute(null=True)
    deadline_ms = NumberAttribute(null=True)
    # Stored as "count"; named otherwise in Python, where `count` is the Model's own query method.
    recipients = NumberAttribute(null=True, attr_name="count")
    body_key = UnicodeAttribute(null=True)
    cursor = UnicodeAttribute(null=True)  # on the cursor item: the minute released up to


class BodyGone(Exception):
    """A stored batch whose emails are no longer in S3 (released by a twin of it, or past the lifecycle)."""


class BatchMoved(Exception):
    """A batch was moved (or released) by someone else between its read and a move of it."""


def minute_of(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M", time.gmtime(epoch_ms // 1000))


def _minute_ms(bucket: str) -> int:
    return calendar.timegm(time.strptime(bucket, "%Y-%m-%dT%H:%M")) * 1000


class ScheduleStore:
    def __init__(self, table_name: str, region: str, s3: S3Objects, bucket_name: str) -> None:
        self._model = bound(ScheduleModel, table_name, region)
        self._s3 = s3
        self._bucket_name = bucket_name

    def warm(self) -> None:
        warm(self._model)

    def put(
        self,
        *,
        user_id: str,
        campaign_id: str,
        plan: str,
        queue: str,
        due_ms: int,
        deadline_ms: int | None,
        emails: list[tuple[str, str]],
        bucket: str | None = None,
    ) -> StoredBatch:
        """Store one batch of rendered emails ((address, queued JSON) pairs) until `due_ms`.

        With `bucket`, in that partition instead of the due minute's, and its body where nothing expires it
        (parked email, kept however long the pause: chalicelib.queueing.parked_email)."""
        prefix = PARKED_PREFIX if bucket else SCHEDULED_PREFIX
        batch = replace(
            self._body(user_id, campaign_id, emails, prefix),
            bucket=bucket or minute_of(due_ms),
            plan=plan,
            queue=queue,
            due_ms=due_ms,
            deadline_ms=deadline_ms,
        )
        self._row(batch).save()
        return batch

    def _body(
        self, user_id: str, campaign_id: str, emails: list[tuple[str, str]], prefix: str = SCHEDULED_PREFIX
    ) -> StoredBatch:
        """The batch's emails written to S3, under a key of its tenant, campaign and addresses; the batch
        with its item and body (its place and times are the caller's)."""
        digest = hashlib.sha256(
            "\n".join([user_id, campaign_id, *sorted(e.lower() for e, _ in emails)]).encode("utf-8")
        ).hexdigest()[:32]
        key = f"{prefix}{quote(user_id, safe='')}/{quote(campaign_id, safe='')}/{digest}.json.gz"
        data = gzip.compress(json.dumps(emails, ensure_ascii=False).encode("utf-8"), compresslevel=6)
        self._s3.put_object(
            Bucket=self._bucket_name,
            Key=key,
            Body=data,
            ServerSideEncryption="AES256",
            ContentType="application/json",
            ContentEncoding="gzip",
        )
        return StoredBatch(
            bucket="",
            item=f"{user_id}#{campaign_id}#{digest}",
            user_id=user_id,
            campaign_id=campaign_id,
            plan="",
            queue="",
            due_ms=0,
            deadline_ms=None,
            count=len(emails),
            body_key=key,
        )

    def _row(self, batch: StoredBatch) -> ScheduleModel:
        fields = ("user_id", "campaign_id", "plan", "queue", "due_ms", "deadline_ms", "body_key")
        return self._model(batch.bucket, batch.item, recipients=batch.count, **{f: getattr(batch, f) for f in fields})

    def due(self, up_to_ms: int) -> Iterator[StoredBatch]:
        """Every stored batch due at or before `up_to_ms`: those set aside to be tried again (`set_aside`),
        then those of each minute from the cursor's (less the rescan) on."""
        yield from (_batch(i) for i in self._model.query(RETRY_BUCKET) if int(i.due_ms) <= up_to_ms)
        cursor = self.cursor()
        start = (_minute_ms(cursor) if cursor else up_to_ms - FIRST_RUN_MINUTES * 60_000) - RESCAN_MINUTES * 60_000
        minute = start - start % 60_000
        while minute <= up_to_ms:
            for item in self._model.query(minute_of(minute)):
                if int(item.due_ms) <= up_to_ms:
                    yield _batch(item)
            minute += 60_000

    def emails(self, batch: StoredBatch) -> list[tuple[str, str]]:
        """The batch's emails; BodyGone when S3 has no body under its key."""
        try:
            obj = self._s3.get_object(Bucket=self._bucket_name, Key=batch.body_key)
        except Exception as exc:
            code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                raise BodyGone(f"batch {batch.item}: no body at {batch.body_key}") from exc
            raise
        return [(str(e), str(b)) for e, b in json.loads(gzip.decompress(obj["Body"].read()))]

    def remove(self, batch: StoredBatch, *, keep_body: bool = False) -> None:
        """Forget a released batch: its item first (the S3 object alone is harmless and expires)."""
        self._model(batch.bucket, batch.item).delete()
        if keep_body:
            return
        with contextlib.suppress(Exception):  # left behind, the bucket's lifecycle removes it
            self._s3.delete_object(Bucket=self._bucket_name, Key=batch.body_key)

    def cursor(self) -> str | None:
        try:
            return self._model.get(CURSOR_BUCKET, CURSOR_ITEM, consistent_read=True).cursor
        except DoesNotExist:
            return None

    def advance(self, up_to_ms: int) -> None:
        """The releaser has released every batch due at or before `up_to_ms`."""
        self._model(CURSOR_BUCKET, CURSOR_ITEM, cursor=minute_of(up_to_ms)).save()

    def of_campaign(self, user_id: str, campaign_id: str, buckets: list[str]) -> list[StoredBatch]:
        """A campaign's batches still stored in the given minutes (its campaign item lists them)."""
        m = self._model
        prefix = f"{user_id}#{campaign_id}#"
        return [_batch(i) for b in buckets for i in m.query(b, m.item.startswith(prefix))]

    def move(self, batch: StoredBatch, due_ms: int, deadline_ms: int | None) -> StoredBatch:
        """The same batch due at another time (a rescheduled campaign); its emails are rewritten when
        the deadline they carry changes.

        One transaction: the row at its new minute written and the one read deleted, on condition that the
        one read is still there. Two reschedules at once (a double click, a client's retry) both read the
        batch; without the condition each wrote it at its own minute, one batch stored twice over one S3
        body, and a move killed between its two writes left it at both. BatchMoved: another move or the
        release took it meanwhile (read the campaign's batches again)."""
        emails = self.emails(batch)
        if deadline_ms is not None:
            emails = [(e, _with_deadline(body, deadline_ms)) for e, body in emails]
        # Same addresses, same S3 key: the body written now is the moved batch's (and, until the
        # transaction, still the one read's, carrying the new deadline: a release meanwhile sends it once).
        moved = replace(self._body(batch.user_id, batch.campaign_id, emails), due_ms=due_ms, deadline_ms=deadline_ms)
        moved = replace(moved, bucket=minute_of(due_ms), plan=batch.plan, queue=batch.queue)
        self._replace(batch, moved)
        return moved

    def set_aside(self, batch: StoredBatch) -> None:
        """A batch the releaser could not release, moved out of its minute to be tried again at each run:
        the cursor goes on past it, so no one batch holds the releaser (and every tenant's schedule) back."""
        if batch.bucket != RETRY_BUCKET:
            self._replace(batch, replace(batch, bucket=RETRY_BUCKET))

    def _replace(self, old: StoredBatch, new: StoredBatch) -> None:
        m = self._model
        tx = TransactWrite(connection=m._get_connection().connection, client_request_token=uuid.uuid4().hex)
        try:
            with tx:
                if (old.bucket, old.item) == (new.bucket, new.item):
                    tx.save(self._row(new), condition=m.item.exists())
                else:
                    tx.delete(m(old.bucket, old.item), condition=m.item.exists())
                    tx.save(self._row(new))
        except TransactWriteError as exc:
            reasons = getattr(exc, "cancellation_reasons", None) or []
            if any(r is not None and r.code == "ConditionalCheckFailed" for r in reasons):
                raise BatchMoved(f"batch {old.item} was moved or released meanwhile") from exc
            raise

    def parked(self, bucket: str) -> list[StoredBatch]:
        """The batches in one partition of parked email (chalicelib.queueing.parked_email)."""
        return [_batch(i) for i in self._model.query(bucket)]

    def parked_under_lifecycle(self, partition_prefix: str) -> Iterator[StoredBatch]:
        """Parked batches whose body is under `scheduled/`, where the bucket's lifecycle deletes it after 45
        days (parked before parked email had a prefix of its own). A Scan: run once, after upgrading."""
        m = self._model
        for item in m.scan(m.bucket.startswith(partition_prefix) & m.body_key.startswith(SCHEDULED_PREFIX)):
            yield _batch(item)

    def keep_parked(self, batch: StoredBatch) -> StoredBatch:
        """A parked batch's body moved where nothing expires it: written under `parked/`, the row pointed at
        it on condition that it is still parked (BatchMoved: put back meanwhile), then the old one deleted."""
        emails = self.emails(batch)
        kept = replace(batch, body_key=self._body(batch.user_id, batch.campaign_id, emails, PARKED_PREFIX).body_key)
        self._replace(batch, kept)
        with contextlib.suppress(Exception):  # left behind, the lifecycle removes it
            self._s3.delete_object(Bucket=self._bucket_name, Key=batch.body_key)
        return kept


def _with_deadline(body: str, deadline_ms: int) -> str:
    d = json.loads(body)
    d["campaign"]["expiresAt"] = iso_ms(deadline_ms)
    return json.dumps(d, separators=(",", ":"), ensure_ascii=False)


def _batch(item: ScheduleModel) -> StoredBatch:
    return StoredBatch(
        bucket=item.bucket,
        item=item.item,
        user_id=str(item.user_id),
        campaign_id=str(item.campaign_id),
        plan=str(item.plan),
        queue=str(item.queue),
        due_ms=int(item.due_ms),
        deadline_ms=int(item.deadline_ms) if item.deadline_ms is not None else None,
        count=int(item.recipients or 0),
        body_key=str(item.body_key),
    )
