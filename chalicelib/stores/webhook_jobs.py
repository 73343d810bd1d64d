"""An endpoint's background job (its held requests replayed, or deleted once it is removed) and its progress.

A job is one row of the held requests' table, `<user>#jobs` / `<endpoint id>` (no endpoint id is
`jobs`, so no endpoint's deliveries are there): one job per endpoint at a time, which the tenant's listing
shows. The row says how far the job went: the key of the last held request it handled (`after`), how
many it handled (`done`), and a step number. An invocation records each page it handled on the condition
that the step is the one it read: of two invocations of one job (Lambda may run an asynchronous event
twice), only one records a page and goes on; the other stops at its first page. Its functions write only
to this table, never to the endpoints' (their secrets are there).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, PutError
from pynamodb.models import Model

from chalicelib.stores.tables import bound, condition_failed, update_if

REPLAY, REMOVE = "replay", "remove"
RUNNING, DONE = "running", "done"
# A running job not heard of for this long is shown `stalled` (its invocations failed every retry), and a
# replay asked for then starts a new one. Longer than an invocation (15 min at most) and its retries' waits.
STALE_S = 30 * 60
# A job is shown, and its row kept, for this long after it is done (DynamoDB's TTL deletes it then).
KEPT_S = 24 * 3600
# A running job's row, should every invocation fail, goes after HELD_DAYS as its deliveries do.
RUNNING_KEPT_S = 14 * 24 * 3600
JOBS_LISTED = 50


class JobModel(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)  # <user>#jobs
    endpoint_id = UnicodeAttribute(range_key=True, attr_name="webhook_id")  # the table's range key
    job_id = UnicodeAttribute()
    kind = UnicodeAttribute()
    state = UnicodeAttribute()
    done = NumberAttribute()
    step = NumberAttribute()
    after = UnicodeAttribute(null=True)
    started_at = NumberAttribute()
    updated_at = NumberAttribute()
    finished_at = NumberAttribute(null=True)
    expires_at = NumberAttribute()  # DynamoDB TTL


@dataclass(frozen=True)
class Job:
    user_id: str
    endpoint_id: str
    job_id: str
    kind: str
    state: str
    done: int
    step: int
    after: str | None
    started_at: float
    updated_at: float
    finished_at: float | None = None

    def shown_state(self, now: float) -> str:
        if self.state == RUNNING and now - self.updated_at > STALE_S:
            return "stalled"
        return self.state

    def public(self, now: float) -> dict[str, object]:
        """What the tenant sees of it."""
        return {
            "id": self.job_id,
            "endpoint": self.endpoint_id,
            "kind": self.kind,
            "state": self.shown_state(now),
            "done": self.done,
            "startedAt": self.started_at,
            "updatedAt": self.updated_at,
            "finishedAt": self.finished_at,
        }


class WebhookJobs:
    def __init__(self, table_name: str, region: str) -> None:
        self._model = bound(JobModel, table_name, region)

    def start(self, user_id: str, endpoint_id: str, kind: str, now: float) -> tuple[Job, bool]:
        """A new job for the endpoint, and True; or, for a replay while one is running, that one and False.
        A removal always starts anew (the endpoint is gone: a replay of it that is running stops)."""
        m = self._model
        job = Job(user_id, endpoint_id, "job_" + secrets.token_urlsafe(9), kind, RUNNING, 0, 0, None, now, now)
        row = m(
            _pk(user_id),
            endpoint_id,
            job_id=job.job_id,
            kind=kind,
            state=RUNNING,
            done=0,
            step=0,
            started_at=now,
            updated_at=now,
            expires_at=int(now) + RUNNING_KEPT_S,
        )
        if kind == REMOVE:
            row.save()
            return job, True
        try:
            row.save(condition=m.pk.does_not_exist() | (m.state == DONE) | (m.updated_at < now - STALE_S))
            return job, True
        except PutError as exc:
            if not condition_failed(exc):
                raise
        running = self.get(user_id, endpoint_id)
        if running is None:  # done and expired in between: unlikely, and asking again starts one
            raise RuntimeError("the endpoint's job changed while it was read; ask again")
        return running, False

    def get(self, user_id: str, endpoint_id: str) -> Job | None:
        try:
            return _job(user_id, self._model.get(_pk(user_id), endpoint_id, consistent_read=True))
        except DoesNotExist:
            return None

    def list(self, user_id: str) -> list[Job]:
        """The tenant's jobs (at most JOBS_LISTED: one per endpoint, kept a day once done), latest first."""
        rows = self._model.query(_pk(user_id), consistent_read=True, limit=JOBS_LISTED)
        return sorted((_job(user_id, r) for r in rows), key=lambda j: j.started_at, reverse=True)

    def advance(self, job: Job, handled: int, after: str | None, finished: bool, now: float) -> Job | None:
        """Record a page the job handled: the job as it is now, or None if it is not this job's to record
        (another invocation of it recorded this step, or another job replaced it)."""
        m = self._model
        actions = [
            m.done.add(handled),
            m.step.add(1),
            m.updated_at.set(now),
        ]
        if after is not None:
            actions.append(m.after.set(after))
        if finished:
            actions += [m.state.set(DONE), m.finished_at.set(now), m.expires_at.set(int(now) + KEPT_S)]
        condition = (m.job_id == job.job_id) & (m.step == job.step) & (m.state == RUNNING)
        if not update_if(m(_pk(job.user_id), job.endpoint_id), actions, condition):
            return None
        return replace(
            job,
            done=job.done + handled,
            step=job.step + 1,
            after=after if after is not None else job.after,
            updated_at=now,
            state=DONE if finished else RUNNING,
            finished_at=now if finished else None,
        )


def _pk(user_id: str) -> str:
    return f"{user_id}#jobs"


def _job(user_id: str, row: JobModel) -> Job:
    return Job(
        user_id,
        row.endpoint_id,
        row.job_id,
        row.kind,
        row.state,
        int(row.done),
        int(row.step),
        row.after,
        float(row.started_at),
        float(row.updated_at),
        float(row.finished_at) if row.finished_at is not None else None,
    )
