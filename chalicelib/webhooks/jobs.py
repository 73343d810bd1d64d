"""webhook_jobs: an endpoint's held requests replayed (put back on the delivery queue) or deleted (the
endpoint was removed), a page at a time, in the background, however many there are.

The tenant API and the CLI start a job (chalicelib.stores.webhook_jobs) and invoke webhook_jobs
asynchronously with it; they answer at once. An invocation takes pages of PAGE deliveries in key order
from where the job's row says it got to, and records each page there (how far, how many) before the next;
with CONTINUE_WITH_S of its time left it invokes itself again with the same event, and that one goes on from
the row.

Run twice (Lambda retries an invocation that failed, and may deliver an asynchronous event twice), a page
is at worst replayed twice: its deliveries are put on the queue again as they were held, each under its
own `webhook-id` with the same body, which the receiver drops the second time; no delivery is ever sent
under another id or with another body. Only one invocation records a page (its step is conditional), and
the other stops there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chalicelib.core import log
from chalicelib.core.errors import DeliveryNotQueued
from chalicelib.stores.webhook_jobs import DONE, REMOVE, REPLAY, Job, WebhookJobs
from chalicelib.stores.webhooks import HeldRequest, HeldRequests
from chalicelib.webhooks.delivery_queue import DeliveryQueue

# Deliveries per page: one Query, ten SendMessageBatch requests and a hundred conditional deletes (ten at
# once), a second or so; a page is what a second invocation of a job may repeat.
PAGE = 100
DELETES_AT_ONCE = 10
# An invocation stops taking pages with this much of its time left, and a fresh one goes on.
CONTINUE_WITH_S = 30.0


def job_event(job: Job) -> dict[str, str]:
    """What webhook_jobs is invoked with."""
    return {"userId": job.user_id, "endpointId": job.endpoint_id, "jobId": job.job_id}


class WebhookJobRunner:
    def __init__(
        self,
        jobs: WebhookJobs,
        held: HeldRequests,
        queue: DeliveryQueue,
        invoke_async: Callable[[str, dict[str, Any]], None],
        *,
        page: int = PAGE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._jobs = jobs
        self._held = held
        self._queue = queue
        self._invoke_async = invoke_async
        self._page = page
        self._clock = clock

    def handle(self, event: object, function_name: str, remaining_ms: Callable[[], int]) -> dict[str, Any]:
        """Run the job named by the event until it is done, or hand it on to a fresh invocation when time
        runs short. An event for a job that is done, replaced or unknown does nothing."""
        if not isinstance(event, dict) or not all(
            isinstance(event.get(k), str) and event.get(k) for k in ("userId", "endpointId", "jobId")
        ):
            log.error("webhook job input refused", reason="userId, endpointId and jobId must be non-empty strings")
            return {"ran": False}
        job = self._jobs.get(event["userId"], event["endpointId"])
        if job is None or job.job_id != event["jobId"] or job.state == DONE:
            return {"ran": False}
        pages = 0
        while job is not None and job.state != DONE:
            if remaining_ms() / 1000 < CONTINUE_WITH_S:
                self._invoke_async(function_name, job_event(job))
                return {"ran": True, "pages": pages, "done": job.done, "continued": True}
            job = self._one_page(job)
            pages += 1
        if job is None:  # another invocation of the job recorded that page: it goes on, not this one
            log.info("webhook job went on elsewhere", user=event["userId"], endpoint=event["endpointId"])
            return {"ran": True, "pages": pages, "continued": False}
        log.info("webhook job done", user=job.user_id, endpoint=job.endpoint_id, kind=job.kind, done=job.done)
        return {"ran": True, "pages": pages, "done": job.done, "continued": False}

    def _one_page(self, job: Job) -> Job | None:
        rows, more = self._held.page(job.user_id, job.endpoint_id, job.after, self._page)
        if job.kind == REPLAY:
            self._replay(job.user_id, rows)
        elif job.kind == REMOVE:
            self._held.delete(job.user_id, rows)
        after = rows[-1].webhook_id if rows else None
        return self._jobs.advance(job, len(rows), after, finished=not more, now=self._clock())

    def _replay(self, user_id: str, rows: list[HeldRequest]) -> None:
        """The page's deliveries on the queue first, then off the table: a crash between leaves a copy held,
        never none. A delivery held again meanwhile (it failed again) is left for the next replay, as is one
        SQS refuses for what it is; any other refusal raises, and the invocation is tried again."""
        unqueued = self._queue.put_each([(user_id, row.body) for row in rows])
        passing = [u for u in unqueued if not u.permanent]
        if passing:
            codes = sorted({u.code for u in passing})
            raise DeliveryNotQueued(f"SQS did not take {len(passing)} replayed deliveries: {', '.join(codes)}")
        for u in unqueued:
            log.warning("webhook delivery not replayed", user=user_id, webhook=rows[u.index].webhook_id, code=u.code)
        refused = {u.index for u in unqueued}
        queued = [row for n, row in enumerate(rows) if n not in refused]
        with ThreadPoolExecutor(max_workers=DELETES_AT_ONCE) as pool:
            list(pool.map(lambda row: self._held.remove(user_id, row), queued))
