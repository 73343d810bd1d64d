"""run_digest's invocation: the scheduled time decides the period; a run out of time goes on in another."""

import pytest

from chalicelib.digest.assembly import DigestBusy, DigestNotReady, DigestRecipientsFailed, DigestRun, period_of
from chalicelib.digest.runner import CONTINUE_WITH_S, DigestRunner


class Assembly:
    def __init__(self, unfinished=False, not_ready=False, busy=False, waiting=None, failed=0):
        self.calls = []
        self._unfinished, self._not_ready, self._busy, self._waiting = unfinished, not_ready, busy, waiting
        self._failed = failed

    def run(self, user_id, digest_id, scheduled_at=None, time_left=None, after=None):
        self.calls.append((user_id, digest_id, scheduled_at, time_left(), after))
        if self._not_ready:
            raise DigestNotReady("no definition")
        if self._busy:
            raise DigestBusy("another run is under way; this one is noted")
        run = DigestRun(user_id, digest_id, period_of(scheduled_at), emails=3, unfinished=self._unfinished)
        run.failed = self._failed
        run.resume_after = "bob@example.org" if self._unfinished else None
        return run

    def next_waiting(self, user_id, digest_id, period):
        waiting, self._waiting = self._waiting, None
        return waiting


def _runner(assembly):
    invoked = []
    return DigestRunner(assembly, lambda fn, event: invoked.append((fn, event)), clock=lambda: 1_800_000_000.0), invoked


def test_schedulers_input_decides_the_period_and_the_time_left_keeps_a_margin():
    assembly = Assembly()
    runner, invoked = _runner(assembly)
    event = {"userId": "acme", "digestId": "weekly", "scheduledAt": "2026-11-25T13:00:00Z"}
    out = runner.handle(event, "moonsend-dev-run_digest", lambda: 600_000)
    (call,) = assembly.calls
    assert call == ("acme", "weekly", 1795611600.0, 600 - CONTINUE_WITH_S, None)
    assert out["ran"] and out["period"] == "20261125T1300Z" and invoked == []


def test_a_run_out_of_time_invokes_itself_for_the_same_period_from_where_it_stopped():
    assembly = Assembly(unfinished=True)
    runner, invoked = _runner(assembly)
    event = {"userId": "acme", "digestId": "weekly", "scheduledAt": "2026-11-25T13:00:00Z"}
    runner.handle(event, "moonsend-dev-run_digest", lambda: 100_000)
    ((fn, continuation),) = invoked
    assert fn == "moonsend-dev-run_digest" and continuation == {
        "userId": "acme",
        "digestId": "weekly",
        "scheduledAt": "2026-11-25T13:00:00.000Z",
        "after": "bob@example.org",
    }
    runner.handle(continuation, fn, lambda: 100_000)  # the continuation: the same period, after bob
    assert assembly.calls[1][2] == assembly.calls[0][2] and assembly.calls[1][4] == "bob@example.org"


def test_a_run_asked_for_without_a_time_is_for_now_and_bad_input_or_no_definition_is_answered_not_raised():
    assembly = Assembly()
    runner, _ = _runner(assembly)
    runner.handle({"userId": "acme", "digestId": "weekly"}, "fn", lambda: 600_000)
    assert assembly.calls[0][2] == 1_800_000_000.0
    for bad in (None, [], {"userId": "", "digestId": "w"}, {"userId": "a", "digestId": "w", "scheduledAt": "soon"}):
        out = runner.handle(bad, "fn", lambda: 600_000)
        assert out["ran"] is False and out["reason"]
    out = _runner(Assembly(not_ready=True))[0].handle({"userId": "a", "digestId": "w"}, "fn", lambda: 600_000)
    assert out == {"ran": False, "reason": "no definition"}


def test_a_run_finding_the_digest_busy_ends_answered_so_lambda_does_not_retry_it():
    runner, invoked = _runner(Assembly(busy=True))
    event = {"userId": "acme", "digestId": "weekly", "scheduledAt": "2026-11-25T13:00:00Z"}
    out = runner.handle(event, "moonsend-dev-run_digest", lambda: 600_000)
    assert out["ran"] is False and out["busy"] is True and "noted" in out["reason"] and invoked == []


def test_a_finished_run_starts_the_run_that_found_it_busy_and_an_unfinished_one_leaves_it_to_its_continuation():
    waiting = 1795615200.0  # 2026-11-25T14:00:00Z, noted by a run that found the digest held
    runner, invoked = _runner(Assembly(waiting=waiting))
    event = {"userId": "acme", "digestId": "weekly", "scheduledAt": "2026-11-25T13:00:00Z"}
    runner.handle(event, "moonsend-dev-run_digest", lambda: 600_000)
    assert invoked == [
        ("moonsend-dev-run_digest", {"userId": "acme", "digestId": "weekly", "scheduledAt": "2026-11-25T14:00:00.000Z"})
    ]
    runner, invoked = _runner(Assembly(unfinished=True, waiting=waiting))
    runner.handle(event, "moonsend-dev-run_digest", lambda: 100_000)
    assert [e.get("after") for _, e in invoked] == ["bob@example.org"]  # the continuation only


def test_a_run_that_left_recipients_out_raises_for_lambdas_retry_after_starting_the_run_waiting():
    # The fault explorer's `run_digest dynamodb.UpdateItem#2 throttled`: one reader's write failed, and the
    # run ended as if done: that reader's digest waited a whole period. Lambda's retry now mails it.
    assembly = Assembly(failed=1, waiting=1_795_611_700.0)
    runner, invoked = _runner(assembly)
    event = {"userId": "acme", "digestId": "weekly", "scheduledAt": "2026-11-25T13:00:00Z"}
    with pytest.raises(DigestRecipientsFailed, match="1 recipient"):
        runner.handle(event, "moonsend-dev-run_digest", lambda: 600_000)
    ((_fn, waiting),) = invoked  # the run that waited for this one is started all the same
    assert waiting["scheduledAt"].startswith("2026-11-25T13:01:40")
