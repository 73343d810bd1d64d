"""Digests end to end on the local stack: item events on the topic, a run, one email per recipient.

Events go through SNS to precompile_email (as a producer's do); the run is the assembly the schedule
invokes, called here so that each test picks its period and its faults; its email then goes through the
real pipeline (ledger, queue, send_emails, the SES stand-in's outbox).
"""

from __future__ import annotations

import json
import time
from email import message_from_bytes
from email.policy import strict

import pytest

from chalicelib import wiring
from chalicelib.core.contract import Sender
from chalicelib.core.digest_contract import DigestDefinition
from chalicelib.digest.assembly import DigestAssembly, campaign_id, period_of
from tests.conftest import read_sends

pytestmark = pytest.mark.e2e

WED = 0.0  # the period's scheduled time: the current minute, set for each test (intake reads the real clock)


@pytest.fixture(autouse=True)
def _scheduled_now():
    global WED
    WED = float(int(time.time()) // 60 * 60)


BODY = (
    "<p>Hi {{ name }}, {{ items_total }} new:</p>"
    "{% for item in items %}<p>{{ item.data.title }} ({{ item.type }})</p>{% endfor %}"
)


def _sender(stack, uid):
    key = f"AKIAD{uid}".upper()
    stack.ses.configure(key, max_send_rate=50)
    sender = {
        "region": "us-east-1",
        "apiKey": key,
        "apiSecret": f"secret-{uid}",
        "ratePerSecond": "50",
        "emailAddress": f"digest@{uid}.example",
        "fromName": "Digest",
    }
    stack.client("sesv2", access_key=key, secret_key=sender["apiSecret"]).create_email_identity(
        EmailIdentity=sender["emailAddress"]
    )
    return sender


def _publish(stack, *messages):
    sns = stack.client("sns")
    for m in messages:
        sns.publish(TopicArn=stack.topic_arns["moonsend-local-PrecompileEmail"], Message=json.dumps(m))


def _define(stack, user, sender, digest="weekly", window="P7D", max_items=50):
    definition = {
        "id": digest,
        "subject": "Your week: {{ items_total }} new",
        "body": BODY,
        "schedule": "cron(0 13 ? * WED *)",
        "window": window,
        "maxItems": max_items,
    }
    _publish(stack, {"userId": user, "sender": sender, "digest": definition})
    _until(lambda: (d := wiring.container().digests.definition(user, digest)) is not None and d.complete)


def _item(user, email, item_id, at, title, digest="weekly", name="Ann"):
    return {
        "userId": user,
        "digest": {"id": digest},
        "recipient": {"email": email, "metadata": {"name": name}},
        "item": {"id": item_id, "type": "NearbyShow", "at": at, "data": {"title": title}},
    }


def _stored(user, digest="weekly"):
    return {r.key: sorted(s.item.id for s in r.items) for r in wiring.container().digests.recipients(user, digest)}


def _with_one_item(stack, uid, item_id, days_before, title):
    """A tenant with the weekly digest defined and one item stored for ann; its user id and sender."""
    user, sender = f"digest-{uid}", _sender(stack, uid)
    _define(stack, user, sender)
    _publish(stack, _item(user, "ann@example.org", item_id, _iso(days_before), title))
    _until(lambda: _stored(user) == {"ann@example.org": [item_id]})
    return user, sender


def _until(condition, timeout=120.0, user=None):
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            counts = wiring.container().stats.get(user, "weekly") if user else None
            last = counts.last_error if counts else None
            raise AssertionError(f"timed out; the digest's records: {counts}, last error {last}")
        time.sleep(0.1)


def _mail(stack, user, campaign):
    assert stack.wait_until_drained(60)
    out = {}
    for eml in sorted((stack.config.outbox / user / campaign).glob("*.eml")):
        msg = message_from_bytes(eml.read_bytes(), policy=strict)
        out.setdefault(str(msg["To"]).lower(), []).append(msg.get_body(("html",)).get_content())
    return out


def _assembly(clock=None, store=None, mailer=None, sleep=None):
    c = wiring.container()
    clock = clock or (lambda: WED + 60)
    return DigestAssembly(store or c.digests, c.tenants, mailer or c.precompiler, clock, sleep or time.sleep)


def _iso(days_before_wed):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(WED - days_before_wed * 86400))


def test_items_from_several_producers_become_one_email_each_and_a_second_run_sends_nothing(stack, uid):
    user = f"digest-{uid}"
    _define(stack, user, _sender(stack, uid))
    _publish(
        stack,
        _item(user, "ann@example.org", "show-1", _iso(3), "Show one"),
        _item(user, "ann@example.org", "show-2", _iso(1), "Show two"),
        _item(user, "Ann@Example.org", "show-2", _iso(1), "Show two"),  # another producer, the same item
        _item(user, "bob@example.org", "show-3", _iso(2), "Show three", name="Bob"),
    )
    _until(lambda: _stored(user) == {"ann@example.org": ["show-1", "show-2"], "bob@example.org": ["show-3"]}, user=user)
    run = _assembly().run(user, "weekly", scheduled_at=WED)
    assert (run.emails, run.items_mailed, run.campaigns) == (2, 3, {campaign_id("weekly", period_of(WED))})
    mail = _mail(stack, user, campaign_id("weekly", period_of(WED)))
    assert set(mail) == {"ann@example.org", "bob@example.org"} and all(len(v) == 1 for v in mail.values())
    (ann,) = mail["ann@example.org"]
    assert "Hi Ann, 2 new" in ann and ann.index("Show two") < ann.index("Show one")  # newest first
    again = _assembly().run(user, "weekly", scheduled_at=WED)
    # A later period with every item still in the window: only the mailed markers stop them.
    later = _assembly(clock=lambda: WED + 86400 + 60).run(user, "weekly", scheduled_at=WED + 86400)
    assert again.emails == 0 and later.emails == 0 and later.items_expired == 0
    assert len([s for s in read_sends(stack.config.outbox) if s["userId"] == user]) == 2


def test_an_item_arriving_during_assembly_goes_into_the_next_digest_never_both(stack, uid):
    user, _ = _with_one_item(stack, uid, "first", 2, "First")
    store = wiring.container().digests

    class ItemArrivesMidRun:  # the store, with an item written after the recipient's rows were read
        def __getattr__(self, name):
            return getattr(store, name)

        def recipients(self, user_id, digest_id, after=None, since=None):
            for rows in store.recipients(user_id, digest_id, after=after, since=since):
                yield rows
                _publish(stack, _item(user, "ann@example.org", "late", _iso(0.001), "Late"))
                _until(lambda: "late" in _stored(user)["ann@example.org"])

    first = _assembly(store=ItemArrivesMidRun()).run(user, "weekly", scheduled_at=WED)
    assert first.items_mailed == 1
    nxt = WED + 86400  # the next run (a day later: its items still in the window)
    second = _assembly(clock=lambda: nxt + 60).run(user, "weekly", scheduled_at=nxt)
    assert second.items_mailed == 1
    (one,) = _mail(stack, user, campaign_id("weekly", period_of(WED)))["ann@example.org"]
    (two,) = _mail(stack, user, campaign_id("weekly", period_of(nxt)))["ann@example.org"]
    assert "First" in one and "Late" not in one and "Late" in two and "First" not in two


def test_a_retracted_item_and_one_past_the_window_are_left_out_and_counted(stack, uid):
    user = f"digest-{uid}"
    _define(stack, user, _sender(stack, uid), window="P2D")
    _publish(
        stack,
        _item(user, "ann@example.org", "cancelled", _iso(1), "Cancelled show"),
        _item(user, "ann@example.org", "kept", _iso(0.5), "Kept show"),
        _item(user, "ann@example.org", "aging", _iso(1.99), "Aging show"),  # in the window when it comes
        _item(user, "ann@example.org", "stale", _iso(3), "Stale show"),  # past it already: never stored
    )
    _until(lambda: _stored(user) == {"ann@example.org": ["aging", "cancelled", "kept"]})
    _publish(stack, {"userId": user, "digest": {"id": "weekly"}, "retract": "cancelled"})
    _until(lambda: "cancelled" in wiring.container().digests.retracted(user, "weekly"))
    run = _assembly(clock=lambda: WED + 3600).run(user, "weekly", scheduled_at=WED)  # "aging" is out by then
    assert (run.items_mailed, run.items_retracted, run.items_expired) == (1, 1, 1)
    (ann,) = _mail(stack, user, campaign_id("weekly", period_of(WED)))["ann@example.org"]
    assert "Kept show" in ann and "Cancelled" not in ann and "Aging" not in ann and "Stale" not in ann
    assert _stored(user) == {"ann@example.org": ["cancelled", "kept"]}  # the expired one dropped


def test_a_crash_between_queueing_and_marking_repeats_nothing_and_loses_nothing(stack, uid):
    user, _ = _with_one_item(stack, uid, "one", 1, "One")
    precompiler = wiring.container().precompiler

    class CrashAfterQueueing:
        def handle_request(self, request):
            precompiler.handle_request(request)
            raise RuntimeError("killed after queueing")

    with pytest.raises(RuntimeError):
        _assembly(mailer=CrashAfterQueueing()).run(user, "weekly", scheduled_at=WED)
    _publish(stack, _item(user, "ann@example.org", "two", _iso(0.01), "Two"))  # after the crash
    _until(lambda: _stored(user) == {"ann@example.org": ["one", "two"]})
    nxt = WED + 86400  # the next run (a day later: its items still in the window)
    resumed = _assembly(clock=lambda: nxt + 60).run(user, "weekly", scheduled_at=nxt)
    assert (resumed.resumed, resumed.campaigns) == (1, {campaign_id("weekly", period_of(WED))})
    final = _assembly(clock=lambda: nxt + 120).run(user, "weekly", scheduled_at=nxt)
    assert final.items_mailed == 1  # "two", in the next period's email
    (first,) = _mail(stack, user, campaign_id("weekly", period_of(WED)))["ann@example.org"]
    (second,) = _mail(stack, user, campaign_id("weekly", period_of(nxt)))["ann@example.org"]
    assert "One" in first and "Two" not in first and "Two" in second and "One" not in second


def test_a_refused_email_leaves_its_items_for_the_next_run_and_a_second_run_waits_for_the_first(stack, uid):
    user, sender = _with_one_item(stack, uid, "one", 1, "One")
    # A body that compiles (checked when it arrives) and fails for every recipient when it renders.
    broken = {"userId": user, "digest": {"id": "weekly", "body": "{{ items_total | divided_by: 0 }}"}}
    _publish(stack, broken)
    _until(lambda: wiring.container().digests.definition(user, "weekly").body == broken["digest"]["body"])
    refused = _assembly().run(user, "weekly", scheduled_at=WED)
    assert (refused.refused, refused.emails, refused.items_mailed) == (1, 0, 0)
    last_error = wiring.container().stats.get(user, campaign_id("weekly", period_of(WED))).last_error or ""
    assert "divided_by" in last_error
    _define(stack, user, sender)  # the body put right
    _until(lambda: wiring.container().digests.definition(user, "weekly").body == BODY)
    store = wiring.container().digests
    assert store.hold_run(user, "weekly", "another-run", WED + 86400, 90)
    from chalicelib.digest.assembly import DigestBusy

    def live(_s):  # the other run reaches a flush point while this one watches its hold: it renews it
        store.hold_run(user, "weekly", "another-run", WED + 86400 + 30, 90)

    with pytest.raises(DigestBusy):
        _assembly(clock=lambda: WED + 86400 + 30, sleep=live).run(user, "weekly", scheduled_at=WED + 86400)
    store.release_run(user, "weekly", "another-run")
    fixed = _assembly(clock=lambda: WED + 86400 + 60).run(user, "weekly", scheduled_at=WED + 86400)
    assert (fixed.emails, fixed.items_mailed) == (1, 1)
    (ann,) = _mail(stack, user, campaign_id("weekly", period_of(WED + 86400)))["ann@example.org"]
    assert "One" in ann


def test_the_definition_puts_one_schedule_whose_firing_runs_the_digest_in_the_deployed_function(stack, uid):
    user, sender = _with_one_item(stack, uid, "one", 1, "One")
    c = wiring.container()
    schedule = c.digest_schedules.get(user, "weekly")
    assert schedule is not None and schedule["ScheduleExpression"] == "cron(0 13 ? * WED *)"
    assert schedule["Target"]["Arn"] == c.settings.function_arn("run_digest")
    assert schedule["Target"]["RoleArn"].endswith(":role/moonsend-local-digest-scheduler")
    modified = schedule["LastModificationDate"]
    _define(stack, user, sender)  # the same schedule again: not put again
    assert c.digest_schedules.get(user, "weekly")["LastModificationDate"] == modified
    # Scheduler's invocation as the local stack makes it (run_digest, its role, IAM checked), twice: a tick
    # and a retry of it mail the period once.
    assert stack.schedules is not None
    stack.schedules.fire(schedule, WED)
    stack.schedules.fire(schedule, WED)
    # Both runs finished (run_digest's alone: other tests' functions may still be busy on this stack).
    assert stack.runner.wait_idle(120, function=c.settings.resources.function_name("run_digest"))
    (ann,) = _mail(stack, user, campaign_id("weekly", period_of(WED)))["ann@example.org"]
    assert "One" in ann
    last = c.digests.state(user, "weekly")
    assert last.last_run is not None and last.last_run["period"] == period_of(WED)
    assert [f for f in stack.runner.stats.failed_events if user in json.dumps(f.event)] == []


def test_a_changed_schedule_is_put_again_and_an_invalid_one_is_recorded_under_the_digest(stack, uid):
    user, _ = _with_one_item(stack, uid, "one", 1, "One")
    c = wiring.container()
    _publish(stack, {"userId": user, "digest": {"id": "weekly", "schedule": "cron(30 7 ? * MON-FRI *)"}})
    _until(lambda: c.digest_schedules.get(user, "weekly")["ScheduleExpression"] == "cron(30 7 ? * MON-FRI *)")
    _publish(stack, {"userId": user, "digest": {"id": "weekly", "schedule": "cron(0 0 ? * 9 *)"}})
    _until(lambda: (s := c.stats.get(user, "weekly")) is not None and "day-of-week: 9" in (s.last_error or ""))
    assert c.digest_schedules.get(user, "weekly")["ScheduleExpression"] == "cron(30 7 ? * MON-FRI *)"


def _call(method, url, key=None):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_a_tenant_sees_its_digest_status_and_runs_it_now_over_http_with_its_key_only(stack, uid):
    user, _ = _with_one_item(stack, uid, "one", 1, "One")
    _publish(stack, _item(user, "bob@example.org", "two", _iso(0.5), "Two", name="Bob"))
    _until(lambda: "bob@example.org" in _stored(user))
    c = wiring.container()
    key, other = c.api_keys.replace_all(user), f"other-{uid}"
    c.tenants.accept(other, "free", c.tenants.get(user).sender, c.ses.account_of)
    other_key = c.api_keys.replace_all(other)
    url = f"{stack.api_url}/digests/weekly"

    assert _call("GET", url)[0] == 401
    assert _call("GET", url, other_key)[0] == 404 and _call("POST", f"{url}/run", other_key)[0] == 404
    status, body = _call("GET", url, key)
    assert status == 200, body
    assert (body["recipients"], body["recipientsPending"], body["itemsStored"], body["itemsPending"]) == (2, 2, 2, 2)
    assert body["schedule"] == "cron(0 13 ? * WED *)" and body["scheduled"] and body["complete"]
    next_run = time.strptime(body["nextRunAt"][:19], "%Y-%m-%dT%H:%M:%S")
    assert next_run.tm_wday == 2 and (next_run.tm_hour, next_run.tm_min) == (13, 0)  # a Wednesday, 13:00 UTC
    assert body["lastRunAt"] is None and not body["running"]

    status, started = _call("POST", f"{url}/run", key)
    assert status == 202 and started["campaign"] == campaign_id("weekly", started["period"])
    mail = {}
    _until(lambda: len(mail.update(_mail(stack, user, started["campaign"])) or mail) == 2)
    _until(lambda: _call("GET", url, key)[1]["lastRunAt"] is not None)
    status, after = _call("GET", url, key)
    assert (after["recipientsPending"], after["itemsPending"], after["itemsStored"]) == (0, 0, 2)
    assert after["lastRun"]["emails"] == 2 and after["lastRun"]["period"] == started["period"]
    assert _call("GET", f"{stack.api_url}/digests/nope", key)[0] == 404


def test_a_tenant_lists_its_own_digests_page_by_page_each_as_its_status_says_without_items(stack, uid):
    c = wiring.container()
    user, other = f"list-{uid}", f"list-other-{uid}"
    sender = Sender(f"news@{uid}.example", "N", None, None, None, 1.0)
    for tenant in (user, other):
        c.tenants.accept(tenant, "free", sender, c.ses.account_of)
    for digest_id in ("alpha", "beta"):
        c.digests.define(user, DigestDefinition(digest_id, "S", "<p>b</p>", "cron(0 9 ? * MON *)", 86400.0))
    c.digests.define(user, DigestDefinition("gamma", subject="only a subject"))
    c.digests.define(other, DigestDefinition("theirs", "S", "<p>b</p>", "cron(0 9 ? * MON *)", 86400.0))
    key = c.api_keys.replace_all(user)

    status, first = _call("GET", f"{stack.api_url}/digests?limit=2", key)
    assert status == 200 and [d["digest"] for d in first["digests"]] == ["alpha", "beta"] and first["next"]
    status, second = _call("GET", f"{stack.api_url}/digests?limit=2&after={first['next']}", key)
    assert [(d["digest"], d["complete"], d["schedule"]) for d in second["digests"]] == [("gamma", False, None)]
    assert second["next"] is None
    _status, beta = _call("GET", f"{stack.api_url}/digests/beta", key)
    assert first["digests"][1] == {k: beta[k] for k in first["digests"][1]}  # the status's own head
    assert "itemsPending" not in first["digests"][1]  # a list reads no items
    assert _call("GET", f"{stack.api_url}/digests?after=bm90IGFuIGlk!", key)[0] == 400
    assert _call("GET", f"{stack.api_url}/digests?limit=101", key)[0] == 400
    assert _call("GET", f"{stack.api_url}/digests")[0] == 401
    _status, theirs = _call("GET", f"{stack.api_url}/digests", c.api_keys.replace_all(other))
    assert [d["digest"] for d in theirs["digests"]] == ["theirs"]


def test_moonsend_digest_status_and_run_from_the_command_line(stack, uid, capsys, monkeypatch):
    from infra import cli
    from infra.cli import main

    # The CLI builds the app's objects afresh (wiring.reset, which drops every shared client); here it uses
    # this session's, already made from the same environment, so no other test finds its clients gone.
    monkeypatch.setattr(cli, "_container", wiring.container)

    user, _ = _with_one_item(stack, uid, "one", 1, "One")
    endpoint = ["--endpoint", stack.endpoint, "--stage", "local"]
    assert main(["digest", "status", "--user", user, "--digest", "weekly", *endpoint]) == 0
    out = capsys.readouterr().out
    assert "recipients pending: 1 of 1" in out and "items stored: 1 (1 pending" in out and "(scheduled)" in out
    assert main(["digest", "run", "--user", user, "--digest", "weekly", *endpoint]) == 0
    out = capsys.readouterr().out
    assert "emails: 1" in out and "items mailed: 1" in out
    (campaign,) = [line.split(": ")[1].strip("[]'") for line in out.splitlines() if "campaigns:" in line]
    assert len(_mail(stack, user, campaign)["ann@example.org"]) == 1
    assert main(["digest", "status", "--user", user, "--digest", "weekly", *endpoint]) == 0
    assert "recipients pending: 0 of 1" in capsys.readouterr().out
    assert main(["digest", "status", "--user", user, "--digest", "nope", *endpoint]) == 1


def test_a_template_that_does_not_compile_is_refused_when_it_arrives_and_the_definition_kept(stack, uid):
    user, _ = _with_one_item(stack, uid, "one", 1, "One")
    c = wiring.container()
    broken = {"userId": user, "digest": {"id": "weekly", "body": "{% for item in items %}"}}  # never closed
    _publish(stack, broken, _item(user, "bob@example.org", "two", _iso(0.5), "Two") | {"digest": broken["digest"]})
    _until(lambda: (s := c.stats.get(user, "weekly")) is not None and s["rejected"] >= 2, user=user)
    assert "body" in (c.stats.get(user, "weekly").last_error or "")
    assert c.digests.definition(user, "weekly").body == BODY  # unchanged
    assert _stored(user) == {"ann@example.org": ["one"]}  # the event's item not stored either
    run = _assembly().run(user, "weekly", scheduled_at=WED)
    assert run.emails == 1
    # The recipient's state expires (TTL) when its newest item leaves the digest's window (a week here).
    from chalicelib.stores.digests import DigestModel, shard_of
    from chalicelib.stores.tables import bound

    model = bound(DigestModel, c.settings.resources.digests_table.name, c.settings.region)  # the store's own class
    state = model.get(f"i#{user}#weekly#{shard_of('ann@example.org')}", "ann@example.org#", consistent_read=True)
    assert state.last_period == period_of(WED)  # the state row of the run just made, read as the store wrote it
    newest = c.digests.recipients(user, "weekly").__next__().items[0].item.at
    assert newest + 7 * 86400 < state.expires_at <= newest + 7 * 86400 + 2  # its row's expiry, and a second


def test_a_run_out_of_time_stops_where_it_was_and_its_continuation_goes_on_from_there(stack, uid, monkeypatch):
    from chalicelib.digest import assembly

    user, _ = _with_one_item(stack, uid, "a-item", 1, "For ann")
    for name in ("bob", "cat", "dan"):
        _publish(stack, _item(user, f"{name}@example.org", f"{name}-item", _iso(0.5), f"For {name}", name=name))
    _until(lambda: len(_stored(user)) == 4)
    monkeypatch.setattr(assembly, "MAIL_BATCH", 2)  # a flush point every two recipients
    read = []
    store = wiring.container().digests

    class Reading:
        def __getattr__(self, name):
            return getattr(store, name)

        def recipients(self, user_id, digest_id, after=None, since=None):
            for rows in store.recipients(user_id, digest_id, after=after, since=since):
                read.append(rows.key)
                yield rows

    first = _assembly(store=Reading()).run(user, "weekly", scheduled_at=WED, time_left=lambda: 0)
    assert first.unfinished and first.emails == 2 and first.resume_after == read[-1]
    done = list(read)
    rest = _assembly(store=Reading()).run(user, "weekly", scheduled_at=WED, after=first.resume_after)
    assert not rest.unfinished and rest.emails == 2
    assert read[len(done) :] == [k for k in sorted(_stored(user), key=_order) if k not in done]  # nothing read twice
    mail = _mail(stack, user, campaign_id("weekly", period_of(WED)))
    assert sorted(mail) == sorted(_stored(user)) and all(len(v) == 1 for v in mail.values())


def _order(key):
    from chalicelib.stores.digests import shard_of

    return (shard_of(key), key)


def test_a_recipient_refused_in_a_period_is_refused_again_by_a_rerun_of_it_and_its_items_wait(stack, uid):
    user, sender = _with_one_item(stack, uid, "one", 1, "One")
    broken = {"userId": user, "digest": {"id": "weekly", "body": "{{ items_total | divided_by: 0 }}"}}
    _publish(stack, broken)
    _until(lambda: wiring.container().digests.definition(user, "weekly").body == broken["digest"]["body"])
    assert _assembly().run(user, "weekly", scheduled_at=WED).refused == 1
    _define(stack, user, sender)  # put right; the same period run again (a retry, a run asked for)
    _until(lambda: wiring.container().digests.definition(user, "weekly").body == BODY)
    again = _assembly().run(user, "weekly", scheduled_at=WED)
    assert (again.refused, again.items_mailed) == (1, 0)  # the ledger has it rejected for this period
    nxt = _assembly(clock=lambda: WED + 86400 + 60).run(user, "weekly", scheduled_at=WED + 86400)
    assert (nxt.emails, nxt.items_mailed) == (1, 1)  # its items went in the next period's email
    (ann,) = _mail(stack, user, campaign_id("weekly", period_of(WED + 86400)))["ann@example.org"]
    assert "One" in ann
