"""run_digest's invocation: its input checked, the period's run, and a continuation when time runs short.

Scheduler invokes it with the digest and the time the run was scheduled for; `moonsend digest run` and the
tenant API invoke it with the time of asking. The period comes from that time, never from the clock of the
invocation, so a retried or continued run mails for the same period (the ledger keeps it exactly once).

A run that finds another holding the digest ends (answered, not raised: Lambda would retry it twice and
then count it failed): its time is noted on the digest, and the run holding it starts it when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core import log
from chalicelib.core.contract import iso_ms, parse_instant
from chalicelib.digest.assembly import DigestAssembly, DigestBusy, DigestNotReady, DigestRecipientsFailed
from chalicelib.digest.schedules import run_input

# A run stops taking batches with this much of its Lambda time left, and goes on in a fresh invocation.
CONTINUE_WITH_S = 120.0


@dataclass(frozen=True)
class RunRequest:
    user_id: str
    digest_id: str
    scheduled_at: float
    after: str | None = None  # a continuation's: the last recipient its predecessor finished


def parse_run_input(event: object, now: float) -> RunRequest:
    """The invocation's input, or ValueError saying what is wrong (an event no schedule of ours sends)."""
    if not isinstance(event, dict):
        raise ValueError("the input is not a JSON object")
    user, digest = event.get("userId"), event.get("digestId")
    if not isinstance(user, str) or not user or not isinstance(digest, str) or not digest:
        raise ValueError("userId and digestId must be non-empty strings")
    at, after = event.get("scheduledAt"), event.get("after")
    if after is not None and (not isinstance(after, str) or not after):
        raise ValueError("after must be a recipient's address")
    return RunRequest(user, digest, now if at is None else parse_instant(at), after)


class DigestRunner:
    def __init__(
        self,
        assembly: DigestAssembly,
        invoke_async: Callable[[str, dict[str, Any]], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._assembly = assembly
        self._invoke_async = invoke_async
        self._clock = clock

    def handle(self, event: object, function_name: str, remaining_ms: Callable[[], int]) -> dict[str, Any]:
        """Run the digest for its period. Busy (another run holds it) or not ready, it is answered, not
        raised: the busy one is noted, and started by the run holding it when that ends."""
        try:
            request = parse_run_input(event, self._clock())
        except ValueError as exc:
            log.error("digest run input refused", reason=str(exc))
            return {"ran": False, "reason": str(exc)}
        try:
            run = self._assembly.run(
                request.user_id,
                request.digest_id,
                request.scheduled_at,
                time_left=lambda: remaining_ms() / 1000 - CONTINUE_WITH_S,
                after=request.after,
            )
        except DigestNotReady as exc:
            log.warning("digest not run", user=request.user_id, digest=request.digest_id, reason=str(exc))
            return {"ran": False, "reason": str(exc)}
        except DigestBusy as exc:
            log.info("digest busy", user=request.user_id, digest=request.digest_id, reason=str(exc))
            return {"ran": False, "busy": True, "reason": str(exc)}
        if run.unfinished:
            at = iso_ms(int(request.scheduled_at * 1000))
            event = {**run_input(request.user_id, request.digest_id, at), "after": run.resume_after}
            self._invoke_async(function_name, event)
            return {"ran": True, **run.as_dict()}
        # Finished: a run that found this one holding the digest meanwhile goes now (its continuation,
        # when this one is unfinished, holds the digest first and starts it at its own end).
        waiting = self._assembly.next_waiting(request.user_id, request.digest_id, run.period)
        if waiting is not None:
            self._invoke_async(
                function_name, run_input(request.user_id, request.digest_id, iso_ms(int(waiting * 1000)))
            )
        if run.failed:  # after the waiting run is started: Lambda's retries of this one must not hold it back
            log.warning(
                "digest run left recipients out", user=request.user_id, digest=request.digest_id, failed=run.failed
            )
            raise DigestRecipientsFailed(f"{run.failed} recipient(s) left out of period {run.period}: run again")
        return {"ran": True, **run.as_dict(), "started_waiting": waiting is not None}
