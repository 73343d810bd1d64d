"""A digest's owners and bounds (issue 38) on the local stack's DynamoDB: a busy reader's markers, one
recipient's failure, a crash between the pipeline's record and the markers, a run that finds the digest
busy, a run asked for over HTTP, and how much a status reads.

The runs are the assembly run_digest runs, called here so that each test picks its periods and its faults;
where the pipeline's answer is not what is tested, a stand-in accepts every email.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from chalicelib import wiring
from chalicelib.core import aws
from chalicelib.core.contract import Recipient
from chalicelib.core.digest_contract import DigestDefinition, Item
from chalicelib.digest import status as status_module
from chalicelib.digest.assembly import DigestAssembly
from chalicelib.digest.runner import DigestRunner
from chalicelib.digest.status import DigestStatusReader
from chalicelib.ingest.precompile import PrecompileResult
from tests.conftest import free_tenant

pytestmark = pytest.mark.e2e

WEEK = 7 * 86400.0
BODY = "{% for item in items %}<p>{{ item.id }}</p>{% endfor %}"
ANN, BOB = "ann@example.org", "bob@example.org"


def _tenant(stack, uid, max_items=50, body=BODY):
    """A registered tenant with the weekly digest defined; its user id and the app's objects."""
    user = f"bounds-{uid}"
    free_tenant(stack, user)
    c = wiring.container()
    c.digests.define(user, DigestDefinition("weekly", "Your week", body, "cron(0 13 ? * WED *)", WEEK, max_items))
    return user, c


def _add(c, user, address, *item_ids, at=None):
    at = at if at is not None else time.time() - 3600
    c.digests.add_items(user, "weekly", WEEK, [(Recipient(address, {}), Item(i, "T", at, {})) for i in item_ids])


class Accepting:
    """The pipeline's stand-in: every email accepted (queued)."""

    def __init__(self):
        self.requests = []

    def handle_request(self, request):
        self.requests.append({r.email: [i["id"] for i in r.metadata["items"]] for r in request.recipients})
        return PrecompileResult(request.user_id, request.campaign.id)


def _assembly(c, mailer=None, store=None, clock=None, sleep=None):
    return DigestAssembly(store or c.digests, c.tenants, mailer or Accepting(), clock or time.time, sleep or time.sleep)


def test_a_busy_readers_markers_stay_bounded_and_every_period_mails_on(stack, uid):
    # 3,500 items of 128-character ids for one reader, 500 mailed a period: their markers (about 460 KB)
    # would not fit DynamoDB's 400 KB item; kept as one set on the reader's state, a run failed from then on.
    user, c = _tenant(stack, uid, max_items=500)
    now = time.time()
    ids = [f"{n:05d}-" + "x" * 122 for n in range(3500)]
    c.digests.add_items(
        user, "weekly", WEEK, [(Recipient(ANN, {}), Item(i, "T", now - 7200 + n, {})) for n, i in enumerate(ids)]
    )
    mailed: list[str] = []
    for k in range(7):
        _add(c, user, BOB, f"bob-{k}")
        mailer = Accepting()
        at = now + k * 3600
        run = _assembly(c, mailer, clock=lambda at=at: at).run(user, "weekly", scheduled_at=at)
        assert (run.emails, run.items_mailed, run.as_dict().get("failed", 0)) == (2, 501, 0), run.as_dict()
        (request,) = mailer.requests
        assert request[BOB] == [f"bob-{k}"]
        mailed += request[ANN]
    assert sorted(mailed) == ids  # each once
    rows = {r.key: r for r in c.digests.recipients(user, "weekly")}
    assert rows[ANN].mailed == frozenset(ids)  # every marker read back, from rows of 500 ids each
    later = now + 7 * 3600
    assert _assembly(c, clock=lambda: later).run(user, "weekly", scheduled_at=later).emails == 0


def test_one_recipients_failing_write_is_its_own_the_run_goes_on_and_its_status_says_why(stack, uid):
    user, c = _tenant(stack, uid)
    _add(c, user, ANN, "a-1")
    _add(c, user, BOB, "b-1")
    store = c.digests

    class TooBigForAnn:  # the store, its write of ann's markers refused as DynamoDB refuses a 400 KB item
        def __getattr__(self, name):
            return getattr(store, name)

        def mark_mailed(self, user_id, digest_id, key, *args):
            if key == ANN:
                raise RuntimeError("Item size to update has exceeded the maximum allowed size")
            return store.mark_mailed(user_id, digest_id, key, *args)

    now = time.time()
    run = _assembly(c, store=TooBigForAnn(), clock=lambda: now).run(user, "weekly", scheduled_at=now)
    assert (run.emails, run.failed) == (1, 1)  # bob's went, and was marked
    (failure,) = run.failures
    assert failure["recipient"] == ANN and failure["step"] == "mark" and "maximum allowed size" in failure["reason"]
    last = DigestStatusReader(store).status(user, "weekly").as_dict()["lastRun"]
    assert last["failed"] == 1 and last["failures"] == [failure]
    # The next run finishes ann's assembly (left open) under its own period: nothing lost, nothing twice.
    mailer, nxt = Accepting(), now + 3600
    again = _assembly(c, mailer, clock=lambda: nxt).run(user, "weekly", scheduled_at=nxt)
    assert (again.resumed, again.failed, mailer.requests) == (1, 0, [{ANN: ["a-1"]}])


def test_a_crash_after_the_pipeline_refused_an_email_marks_none_of_its_items(stack, uid):
    user, c = _tenant(stack, uid, body="{{ items_total | divided_by: 0 }}")  # fails for every recipient
    _add(c, user, ANN, "one")
    precompiler = c.precompiler

    class CrashAfterTheLedger:  # the pipeline records the refusal in the ledger, then the run dies
        def handle_request(self, request):
            result = precompiler.handle_request(request)
            assert result.rejected
            raise RuntimeError("killed after the pipeline's record")

    first = time.time()
    with pytest.raises(RuntimeError):
        _assembly(c, CrashAfterTheLedger(), clock=lambda: first).run(user, "weekly", scheduled_at=first)
    c.digests.define(user, DigestDefinition("weekly", body=BODY))  # put right
    nxt = first + 3600
    resumed = _assembly(c, precompiler, clock=lambda: nxt).run(user, "weekly", scheduled_at=nxt)
    assert (resumed.resumed, resumed.refused, resumed.items_mailed) == (0, 1, 0)  # the ledger had refused it
    ((rows),) = c.digests.recipients(user, "weekly")
    assert "one" not in rows.mailed and rows.open_period is None
    final = _assembly(c, precompiler, clock=lambda: nxt + 60).run(user, "weekly", scheduled_at=nxt)
    assert (final.emails, final.items_mailed) == (1, 1)  # its item, in the next email


def test_a_run_finding_the_digest_busy_ends_and_the_holder_starts_it_when_it_ends(stack, uid):
    user, c = _tenant(stack, uid)
    _add(c, user, ANN, "one")
    clock = Clock(time.time())
    assert c.digests.hold_run(user, "weekly", "another-run", clock.now, 90)
    # A live run: it renews its hold while this one watches it.
    clock.during_sleep = lambda: c.digests.hold_run(user, "weekly", "another-run", clock.now, 90)
    invoked = []
    runner = DigestRunner(_assembly(c, clock=clock, sleep=clock.sleep), lambda fn, event: invoked.append(event))
    later = "2030-01-01T13:00:00.000Z"
    out = runner.handle({"userId": user, "digestId": "weekly", "scheduledAt": later}, "run_digest", lambda: 900_000)
    assert out["ran"] is False and out["busy"] is True and invoked == []  # answered: Lambda retries nothing
    c.digests.release_run(user, "weekly", "another-run")
    # The holder (a run of an earlier period, here) ends: it starts the run that found it busy.
    earlier = {"userId": user, "digestId": "weekly", "scheduledAt": "2029-12-31T13:00:00Z"}
    assert runner.handle(earlier, "run_digest", lambda: 900_000)["ran"] is True
    assert invoked == [{"userId": user, "digestId": "weekly", "scheduledAt": later}]
    assert runner.handle(earlier, "run_digest", lambda: 900_000)["ran"] and len(invoked) == 1  # taken once


def _post(url, key):
    req = urllib.request.Request(url, data=b"", method="POST", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read() or b"{}")


def test_runs_asked_for_over_http_are_limited_per_digest_with_retry_after(stack, uid):
    user, c = _tenant(stack, uid)
    c.digests.define(user, DigestDefinition("daily", "Today", BODY, "cron(0 13 * * ? *)", WEEK, 50))
    key = c.api_keys.replace_all(user)
    status, _, started = _post(f"{stack.api_url}/digests/weekly/run", key)
    assert status == 202, started
    status, headers, body = _post(f"{stack.api_url}/digests/weekly/run", key)
    assert status == 429 and 1 <= int(headers["Retry-After"]) <= 300 and body["retryAfterSeconds"] > 0
    # Another digest of the tenant is its own: free, until a run holds it.
    assert c.digests.hold_run(user, "daily", "a-run", time.time(), 90)
    status, headers, _ = _post(f"{stack.api_url}/digests/daily/run", key)
    assert status == 429 and 1 <= int(headers["Retry-After"]) <= 90
    c.digests.release_run(user, "daily", "a-run")
    assert _post(f"{stack.api_url}/digests/daily/run", key)[0] == 202


def test_a_status_reads_a_bounded_number_of_rows_and_says_its_counts_are_lower_bounds(stack, uid, monkeypatch):
    user, c = _tenant(stack, uid)
    for name in ("ann", "bob", "cat"):
        _add(c, user, f"{name}@example.org", *(f"{name}-{n}" for n in range(60)))
    client = aws.table_client(c.settings.region, c.settings.resources.digests_table.name)
    me, read = threading.get_ident(), []

    def count(parsed, **_):
        if threading.get_ident() == me:
            read.append(parsed.get("Count", 0))

    client.meta.events.register("after-call.dynamodb.Query", count)
    try:
        whole = DigestStatusReader(c.digests).status(user, "weekly")
        all_rows = sum(read)
        monkeypatch.setattr(status_module, "STATUS_MAX_ROWS", 40, raising=False)
        read.clear()
        bounded = DigestStatusReader(c.digests).status(user, "weekly")
    finally:
        client.meta.events.unregister("after-call.dynamodb.Query", count)
    assert whole.items_stored == 180 and all_rows >= 180 and whole.as_dict().get("countsComplete", True) is True
    assert sum(read) <= 41 and 0 < bounded.items_stored <= 41  # not every row: 41 of them
    assert bounded.as_dict()["countsComplete"] is False  # and it says its counts are at least these


HOUR = 3600.0


def _hourly(stack, uid, window_s):
    """A registered tenant with an hourly digest of window `window_s`; its user id and the app's objects."""
    user = f"markers-{uid}"
    free_tenant(stack, user)
    c = wiring.container()
    c.digests.define(user, DigestDefinition("hourly", "Your hour", BODY, "cron(0 * * * ? *)", window_s, 500))
    return user, c


class MarkerRows:
    """The marker rows (those carrying mailed ids) DynamoDB returns to this thread's Queries, as returned."""

    def __init__(self, c):
        self._client = aws.table_client(c.settings.region, c.settings.resources.digests_table.name)
        self._me = threading.get_ident()
        self.rows: list[dict] = []
        self.returned = 0  # every row the Queries returned

    def _count(self, parsed, **_):
        if threading.get_ident() == self._me:
            self.returned += parsed.get("Count", 0)
            self.rows += [r for r in parsed.get("Items", []) if "mailed" in r]

    def __enter__(self):
        self._client.meta.events.register("after-call.dynamodb.Query", self._count)
        return self

    def __exit__(self, *exc):
        self._client.meta.events.unregister("after-call.dynamodb.Query", self._count)

    @property
    def periods(self) -> list[str]:
        return sorted(r["sk"]["S"][-len("20261125T1300Z") :] for r in self.rows)


def _hourly_runs(c, user, start, hours):
    """One new item for ann an hour before each of `hours` hourly runs from `start`, each mailed at once."""
    for h in range(hours):
        at = start + h * HOUR
        c.digests.add_items(user, "hourly", 2 * HOUR, [(Recipient(ANN, {}), Item(f"h-{h}", "T", at - 60, {}))])
        run = _assembly(c, clock=lambda at=at: at).run(user, "hourly", scheduled_at=at)
        assert (run.emails, run.items_mailed) == (1, 1), run.as_dict()


def test_a_run_reads_only_the_markers_of_items_still_in_the_window_however_many_periods_were_mailed(stack, uid):
    # An hourly digest with a two-hour window, mailed every hour for a day: 24 marker rows for ann. Each
    # names an item that left the window an hour or two later; a run must not read them all every hour.
    user, c = _hourly(stack, uid, 2 * HOUR)
    start = float(int(time.time() - 30 * HOUR) // 3600 * 3600)
    _hourly_runs(c, user, start, 24)
    at = start + 24 * HOUR
    c.digests.add_items(user, "hourly", 2 * HOUR, [(Recipient(ANN, {}), Item("h-24", "T", at - 60, {}))])
    mailer = Accepting()
    with MarkerRows(c) as read:
        run = _assembly(c, mailer, clock=lambda: at).run(user, "hourly", scheduled_at=at)
    assert mailer.requests == [{ANN: ["h-24"]}] and run.items_mailed == 1  # nothing again, the new one once
    assert run.items_expired == 0  # the 23 mailed items past the window (their rows linger) are not "expired"
    # Only the markers that can still name an item in the window: the last two hours' (of 24).
    assert len(read.rows) <= 2, read.periods
    in_window = {_period(at - HOUR), _period(at - 2 * HOUR)}
    assert set(read.periods) <= in_window, read.periods


def test_a_markers_expiry_follows_the_digests_window_not_the_longest_window(stack, uid):
    user, c = _hourly(stack, uid, 2 * HOUR)
    at = time.time()
    _hourly_runs(c, user, at, 1)
    with MarkerRows(c) as read:
        (rows,) = c.digests.recipients(user, "hourly")
    assert rows.mailed == {"h-0"}
    (marker,) = read.rows
    expires = float(marker["expires_at"]["N"])
    # The item (at - 60) leaves the two-hour window at at + 2h - 60: the marker goes with it, not 35 days on.
    assert at + 2 * HOUR - 60 <= expires <= at + 2 * HOUR + 60, expires - at


def _period(when: float) -> str:
    from chalicelib.digest.assembly import period_of

    return period_of(when)


def test_a_runs_reads_count_against_its_byte_budget_and_it_goes_on_in_a_fresh_invocation(stack, uid, monkeypatch):
    from chalicelib.digest import assembly

    user, c = _tenant(stack, uid)
    for name in ("ann", "bob", "cat"):
        _add(c, user, f"{name}@example.org", f"{name}-1")
    # Every recipient read spends the budgets: a flush point after each, and the invocation's reads spent.
    monkeypatch.setattr(assembly, "MAIL_BATCH_BYTES", 1)
    monkeypatch.setattr(assembly, "RUN_READ_BYTES", 1, raising=False)
    now = time.time()
    first = _assembly(c, clock=lambda: now).run(user, "weekly", scheduled_at=now, time_left=lambda: 600.0)
    assert first.unfinished and first.recipients == 1 and first.bytes_read > 0, first.as_dict()
    rest = _assembly(c, clock=lambda: now).run(
        user, "weekly", scheduled_at=now, time_left=lambda: 600.0, after=first.resume_after
    )
    assert rest.unfinished and rest.recipients == 1 and rest.resume_after != first.resume_after


def test_a_retraction_naming_a_recipient_answers_that_it_applies_to_every_recipient(stack, uid, caplog):
    user, c = _tenant(stack, uid)
    _add(c, user, ANN, "show-1")
    _add(c, user, BOB, "show-1")
    message = {"userId": user, "digest": {"id": "weekly"}, "retract": "show-1", "recipient": {"email": ANN}}
    with caplog.at_level("INFO", logger="moonsend"):
        result = c.digest_intake.handle(message, json.dumps(message))
    assert result.retracted == 1 and result.rejected == []
    assert result.retract_scope == "every recipient" and result.retract_named == [ANN]
    (line,) = [r for r in caplog.records if r.getMessage() == "digest retraction applies to every recipient"]
    assert line.named == [ANN] and line.retracted == ["show-1"]
    now = time.time()
    mailer = Accepting()
    _assembly(c, mailer, clock=lambda: now).run(user, "weekly", scheduled_at=now)
    assert mailer.requests == []  # bob's too, as the answer said
    # Entries with neither items nor a retraction are still refused.
    bare = {"userId": user, "digest": {"id": "weekly"}, "recipient": {"email": ANN}}
    refused = c.digest_intake.handle(bare, json.dumps(bare))
    assert refused.rejected and "item: is required with a recipient" in refused.rejected[0].reason


def test_an_item_sent_again_with_a_later_time_after_it_was_mailed_is_not_mailed_again(stack, uid):
    # A seven-day window on an hourly digest (the docs' own example). The item is mailed at its first run;
    # a second producer sends it again, same id, three hours later. Its marker's `until` is the first time's
    # (at + 7 days): once runs read past it, the marker must still be found, or the item goes out again.
    user, c = _hourly(stack, uid, WEEK)
    first = float(int(time.time() - 9 * 86400) // 3600 * 3600)  # runs from nine days ago: past the first until
    c.digests.add_items(user, "hourly", WEEK, [(Recipient(ANN, {}), Item("news-1", "T", first - 60, {"v": 1}))])
    mailer = Accepting()
    assert _assembly(c, mailer, clock=lambda: first).run(user, "hourly", scheduled_at=first).items_mailed == 1
    again = first + 3 * HOUR
    c.digests.add_items(user, "hourly", WEEK, [(Recipient(ANN, {}), Item("news-1", "T", again - 60, {"v": 2}))])
    for hours in (4, 7 * 24, 7 * 24 + 1, 7 * 24 + 2):  # the last runs read markers from past its first until
        at = first + hours * HOUR
        run = _assembly(c, mailer, clock=lambda at=at: at).run(user, "hourly", scheduled_at=at)
        assert run.items_mailed == 0, (hours, run.as_dict())
    assert mailer.requests == [{ANN: ["news-1"]}]  # mailed once, whatever its second time says


def test_an_item_retracted_while_a_run_goes_on_is_left_out_of_every_email_assembled_after(stack, uid, monkeypatch):
    # Recipients mailed one batch at a time (a batch of one here); the producer retracts the item after the
    # first batch went out: the run has read the retractions at its start, and must read them again.
    from chalicelib.digest import assembly as assembly_module

    monkeypatch.setattr(assembly_module, "MAIL_BATCH", 1)
    user, c = _tenant(stack, uid)
    for address in (ANN, BOB):
        _add(c, user, address, "cancelled-show", "other-show")

    class RetractingAfterFirst(Accepting):
        def handle_request(self, request):
            answer = super().handle_request(request)
            if len(self.requests) == 1:
                c.digests.retract(user, "weekly", ["cancelled-show"], time.time() + WEEK)
            return answer

    mailer = RetractingAfterFirst()
    run = _assembly(c, mailer).run(user, "weekly")
    first, second = mailer.requests
    (who,) = first
    assert sorted(first[who]) == ["cancelled-show", "other-show"]  # mailed before the retraction
    assert list(second.values()) == [["other-show"]] and run.items_retracted == 1


class Clock:
    """Time as the assembly and the store see it, moved by the assembly's own sleeps: no test waits."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []
        self.during_sleep = lambda: None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self.during_sleep()


def _killed_mid_run(c, user, monkeypatch, clock):
    """30 readers mailed 10 a batch, the run killed at its second batch without its `finally`: its hold
    stays as last renewed. Returns the dead run's mailer."""
    from chalicelib.digest import assembly as assembly_module

    monkeypatch.setattr(assembly_module, "MAIL_BATCH", 10)
    for i in range(30):
        _add(c, user, f"reader{i:02d}@example.org", "show-1")

    class KilledAtSecondBatch(Accepting):
        def handle_request(self, request):
            if self.requests:
                raise TimeoutError("Task timed out")
            return super().handle_request(request)

    class NoFinally:  # the store as a killed process leaves it: the `finally` that releases the hold never ran
        def __getattr__(self, name):
            return getattr(c.digests, name)

        def release_run(self, *args):
            pass

    dying = KilledAtSecondBatch()
    with pytest.raises(TimeoutError):
        _assembly(c, dying, store=NoFinally(), clock=clock, sleep=clock.sleep).run(
            user, "weekly", scheduled_at=clock.now
        )
    return dying


@pytest.mark.parametrize("retry_after_s", [1, 60, 120])  # the local stack's retry, Lambda's first and second
def test_a_run_killed_without_its_finally_has_its_period_finished_by_a_retry_whatever_its_timing(
    stack, uid, monkeypatch, retry_after_s
):
    from chalicelib.digest import assembly as assembly_module

    user, c = _tenant(stack, uid)
    clock = Clock(time.time())
    scheduled = clock.now
    dying = _killed_mid_run(c, user, monkeypatch, clock)
    clock.now += retry_after_s
    retry = Accepting()
    run = _assembly(c, retry, clock=clock, sleep=clock.sleep).run(
        user, "weekly", scheduled_at=scheduled, time_left=lambda: 600.0
    )
    mailed = [a for r in dying.requests + retry.requests for a in r]
    assert sorted(mailed) == [f"reader{i:02d}@example.org" for i in range(30)]  # each once, none left
    assert run.period == assembly_module.period_of(scheduled)
    assert sum(clock.slept) <= assembly_module.HOLD_S + 1  # waited for the dead hold to lapse, no longer


def test_a_live_runs_hold_is_watched_until_renewed_then_the_run_is_noted_and_answered_busy(stack, uid):
    from chalicelib.digest import assembly as assembly_module

    user, c = _tenant(stack, uid)
    _add(c, user, ANN, "show-1")
    clock = Clock(time.time())
    assert c.digests.hold_run(user, "weekly", "a-live-run", clock.now - 5, assembly_module.HOLD_S)
    # The live run reaches a flush point while the second one watches: it renews its hold.
    clock.during_sleep = lambda: c.digests.hold_run(user, "weekly", "a-live-run", clock.now, assembly_module.HOLD_S)
    with pytest.raises(assembly_module.DigestBusy):
        _assembly(c, clock=clock, sleep=clock.sleep).run(
            user, "weekly", scheduled_at=clock.now, time_left=lambda: 600.0
        )
    assert clock.slept == [assembly_module.WATCH_S]  # one look, then answered busy
    state = c.digests.state(user, "weekly")
    assert state is not None and state.waiting_at is not None  # noted: the live run starts it when it ends


def test_a_run_without_the_time_to_watch_a_hold_is_answered_busy_at_once(stack, uid):
    from chalicelib.digest import assembly as assembly_module

    user, c = _tenant(stack, uid)
    _add(c, user, ANN, "show-1")
    clock = Clock(time.time())
    assert c.digests.hold_run(user, "weekly", "a-run", clock.now, assembly_module.HOLD_S)
    with pytest.raises(assembly_module.DigestBusy):
        _assembly(c, clock=clock, sleep=clock.sleep).run(user, "weekly", scheduled_at=clock.now, time_left=lambda: 40.0)
    assert clock.slept == []
