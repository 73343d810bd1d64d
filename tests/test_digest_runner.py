"""run_digest's invocation: the scheduled time decides the period; a run out of time goes on in another."""

from chalicelib.digest.assembly import DigestNotReady, DigestRun, period_of
from chalicelib.digest.runner import CONTINUE_WITH_S, DigestRunner


class Assembly:
    def __init__(self, unfinished=False, not_ready=False):
        self.calls = []
        self._unfinished, self._not_ready = unfinished, not_ready

    def run(self, user_id, digest_id, scheduled_at=None, time_left=None, after=None):
        self.calls.append((user_id, digest_id, scheduled_at, time_left(), after))
        if self._not_ready:
            raise DigestNotReady("no definition")
        run = DigestRun(user_id, digest_id, period_of(scheduled_at), emails=3, unfinished=self._unfinished)
        run.resume_after = "bob@example.org" if self._unfinished else None
        return run


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
