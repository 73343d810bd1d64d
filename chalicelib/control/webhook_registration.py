"""A tenant's webhook endpoints registered, listed, removed, tested and replayed (the tenant API and the CLI)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from chalicelib.core.errors import Busy, Conflict, Invalid, NotFound
from chalicelib.core.fields import is_id
from chalicelib.core.webhook_contract import parse_endpoint
from chalicelib.stores.webhook_jobs import REMOVE, REPLAY, Job, WebhookJobs
from chalicelib.stores.webhooks import (
    Endpoint,
    EndpointsBusy,
    HeldRequests,
    TooManyEndpoints,
    WebhookEndpoints,
)
from chalicelib.webhooks import url_policy
from chalicelib.webhooks.signing import new_secret
from chalicelib.webhooks.trial_request import WebhookTester

NO_ENDPOINT = "no such webhook endpoint"
TEST_INTERVAL_S = 10.0
# A listing counts a disabled endpoint's held requests up to this many (`parked`; past it,
# `parkedIsLowerBound` is true: "10,000+"), and reads at most HELD_COUNT_PAGES of DynamoDB's 1 MB pages
# for it (deliveries of many events are large: the count is then a lower bound below HELD_COUNT_BOUND).
# The endpoints are counted at once, so a listing takes about one endpoint's count.
HELD_COUNT_BOUND = 10_000
HELD_COUNT_PAGES = 10


@dataclass(frozen=True)
class BackgroundJobs:
    """Replays and removals of held requests: their records, and how one is started (webhook_jobs,
    invoked asynchronously with the job)."""

    records: WebhookJobs
    start: Callable[[Job], None]


class WebhookRegistration:
    def __init__(
        self,
        endpoints: WebhookEndpoints,
        tester: WebhookTester,
        held: HeldRequests,
        jobs: BackgroundJobs,
        addresses: url_policy.AddressPolicy,
        *,
        clock: Callable[[], float] = time.time,
        count_bound: int = HELD_COUNT_BOUND,
    ) -> None:
        self._endpoints = endpoints
        self._tester = tester
        self._held = held
        self._jobs = jobs.records
        self._run_job = jobs.start
        self._count_bound = count_bound
        self._addresses = addresses
        self._clock = clock

    def add(self, user_id: str, body: Any) -> dict[str, Any]:
        """The endpoint and its secret (shown this once); Invalid saying what is wrong, or Conflict when other
        adds or removals of the tenant's kept conflicting with it (other requests kept changing the tenant's
        endpoints at the same time: nothing added, try again)."""
        try:
            request = parse_endpoint(body)
            self._addresses.check(request.url)
            secret = new_secret()
            endpoint = self._endpoints.add(user_id, request, secret, self._clock())
        except (ValueError, TooManyEndpoints) as exc:
            raise Invalid(str(exc)) from None
        except EndpointsBusy as exc:
            raise Conflict(str(exc)) from None
        return {**endpoint.public(), "secret": secret}

    def list(self, user_id: str) -> dict[str, Any]:
        """The tenant's endpoints, each disabled one with its held requests counted up to a bound, and
        the tenant's background jobs (replays, removals) with how far each got."""
        endpoints = self._endpoints.list(user_id)
        disabled = [e for e in endpoints if not e.enabled]
        counts: dict[str, tuple[int, bool]] = {}
        if disabled:
            with ThreadPoolExecutor(max_workers=len(disabled)) as pool:
                found = pool.map(lambda e: self._count(user_id, e), disabled)
                counts = dict(zip([e.id for e in disabled], found, strict=True))
        listed = []
        for e in endpoints:
            # Held requests are counted for a disabled endpoint (what a replay would send).
            held, more = counts.get(e.id, (0, False))
            listed.append({**e.public(), "parked": held, "parkedIsLowerBound": more})
        now = self._clock()
        return {"endpoints": listed, "jobs": [j.public(now) for j in self._jobs.list(user_id)]}

    def _count(self, user_id: str, endpoint: Endpoint) -> tuple[int, bool]:
        return self._held.count_upto(user_id, endpoint.id, self._count_bound, HELD_COUNT_PAGES)

    def remove(self, user_id: str, endpoint_id: str) -> dict[str, Any]:
        """Remove the endpoint now; its held requests are deleted in the background (a job the listing
        shows), when there are any. Conflict when other adds or removals kept conflicting with it."""
        _known_shape(endpoint_id)
        try:
            if not self._endpoints.remove(user_id, endpoint_id):
                raise NotFound(NO_ENDPOINT)
        except EndpointsBusy as exc:
            raise Conflict(str(exc)) from None
        if not self._held.count_upto(user_id, endpoint_id, 1, 1)[0]:
            return {"removed": endpoint_id}
        job, _ = self._jobs.start(user_id, endpoint_id, REMOVE, self._clock())
        self._run_job(job)
        return {"removed": endpoint_id, "job": job.public(self._clock())}

    def replay(self, user_id: str, endpoint_id: str) -> dict[str, Any]:
        """Enable the endpoint again and start putting its held requests back on the queue, in the
        background (each under its own webhook-id, so a receiver that had one already drops it). 200, as a
        replay always answered, with `replayed`: the held requests the job will replay, counted as the
        listing counts them (`replayedIsLowerBound` as its `parkedIsLowerBound`), and the job, which the
        listing shows until it is done. A replay asked for while one runs is that one."""
        _known_shape(endpoint_id)
        if not self._endpoints.enable(user_id, endpoint_id):
            raise NotFound(NO_ENDPOINT)
        # Counted before the job starts, which takes them off the table as it goes.
        replayed, more = self._held.count_upto(user_id, endpoint_id, self._count_bound, HELD_COUNT_PAGES)
        job, started = self._jobs.start(user_id, endpoint_id, REPLAY, self._clock())
        if started:
            self._run_job(job)
        endpoint = self._endpoints.get(user_id, endpoint_id)
        body = endpoint.public() if endpoint else {"id": endpoint_id}
        counted = {"replayed": replayed, "replayedIsLowerBound": more}
        return {**body, **counted, "job": job.public(self._clock())}

    def job(self, user_id: str, endpoint_id: str) -> Job | None:
        """The endpoint's job (the CLI waits for it)."""
        return self._jobs.get(user_id, endpoint_id)

    def test(self, user_id: str, endpoint_id: str) -> dict[str, Any]:
        """One signed request now; at most one per endpoint every TEST_INTERVAL_S (Busy otherwise), so that the
        API cannot be used to send a stream of requests at someone's server."""
        _known_shape(endpoint_id)
        if self._endpoints.get(user_id, endpoint_id) is None:
            raise NotFound(NO_ENDPOINT)
        if not self._endpoints.claim_test(user_id, endpoint_id, self._clock(), TEST_INTERVAL_S):
            raise Busy(f"one test request per endpoint every {TEST_INTERVAL_S:g} s: try again soon")
        result = self._tester.send(user_id, endpoint_id)
        if result is None:
            raise NotFound(NO_ENDPOINT)
        return {"ok": result.ok, **result.as_dict()}


def _known_shape(endpoint_id: str) -> None:
    """A path's id that no endpoint can have is not a key to look up."""
    if not is_id(endpoint_id):
        raise NotFound(NO_ENDPOINT)
