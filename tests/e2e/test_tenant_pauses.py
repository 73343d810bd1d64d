"""A tenant's pauses have owners: each is lifted by its owner or an operator, and the tenant is paused while
any stands (chalicelib.stores.pauses, docs/operations.md "Who pauses a tenant")."""

import time

from chalicelib import wiring
from chalicelib.core.contract import Sender
from chalicelib.queueing.parked_email import parked_bucket
from chalicelib.stores.pauses import GUARD, OPERATOR, SES, TENANT, Pause
from chalicelib.stores.tenants import TenantRegistry
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import eventually, free_tenant, read_sends
from tests.e2e.test_campaign_control import _call
from tests.e2e.test_pipeline_e2e import _tenant as _paid_tenant
from tests.unit.test_ses_events import bounce_of


def _free_tenant(uid: str, name: str) -> str:
    c = wiring.container()
    user = f"{name}-{uid}"
    c.tenants.accept(user, "free", Sender(f"news@{name}.example", "N", None, None, None, 1.0), c.ses.account_of)
    return user


def _bounces_past_the_guards_limit(user: str) -> None:
    """16 permanent bounces of 300 sends (5.3%): the reputation guard pauses the tenant, as in production."""
    c = wiring.container()
    c.reputation.add(user, sent=300)
    events = c.ses_events  # the container's own, as ses_events runs it
    for i in range(16):
        assert events.handle(bounce_of(user, f"gone{i}@x.io", c.settings.account_id)) == "recorded bounced"


def _owners(user: str) -> list[str]:
    tenant = wiring.container().tenants.get(user, fresh=True)
    return [p.owner for p in tenant.pauses]


def test_a_tenant_that_paused_itself_cannot_lift_the_guards_pause_by_resuming(stack, uid):
    c = wiring.container()
    user = _free_tenant(uid, "blaster")
    key = c.api_keys.replace_all(user)
    assert _call("POST", f"{stack.api_url}/tenant/pause", key, {"reason": "after the blast"})[0] == 200
    _bounces_past_the_guards_limit(user)  # the guard's verdict while the tenant's own pause stands

    status, body = _call("POST", f"{stack.api_url}/tenant/resume", key)
    still = c.tenants.get(user, fresh=True).paused_reason or "not paused"
    assert still.startswith("reputation guard: bounce rate 5.3%")  # still paused: by the guard
    assert _owners(user) == [GUARD]
    assert status == 200 and body["paused"] is True
    assert (
        "your email stays held: paused by the reputation guard (reputation guard: bounce rate 5.3%" in body["message"]
    )
    assert "ask support" in body["message"]
    assert [(p["by"], p["liftedBy"]) for p in body["pauses"]] == [("guard", "an operator")]
    # Asked again: nothing of its own to lift, and it is told by whom its email is held.
    status, body = _call("POST", f"{stack.api_url}/tenant/resume", key)
    assert status == 409 and "not paused by you" in body["message"] and "the reputation guard" in body["message"]
    assert _owners(user) == [GUARD]

    # An operator lifts the guard's pause (and only it: the tenant's own, set again, stays).
    assert _call("POST", f"{stack.api_url}/tenant/pause", key, {"reason": "again"})[1]["paused"] is True
    done = c.actions.resume_tenant(user, by_tenant=False, owner=GUARD)
    assert done.ok and "the reputation guard's pause lifted" in done.message and _owners(user) == [TENANT]
    status, body = _call("POST", f"{stack.api_url}/tenant/resume", key)
    assert status == 200 and body["paused"] is False and body["message"].startswith("resumed")
    assert c.tenants.get(user, fresh=True).paused_reason is None


def test_each_owner_pausing_twice_keeps_its_first_reason_and_lifting_one_keeps_the_others(stack, uid):
    tenants = wiring.container().tenants
    user = _free_tenant(uid, "owners")
    assert tenants.pause(user, GUARD, "reputation guard: first")
    assert not tenants.pause(user, GUARD, "reputation guard: second")  # paused already: the first reason stays
    assert tenants.pause(user, OPERATOR, "paused by an operator: audit")
    assert tenants.pause(user, SES, "SES paused sending for SES tenant x: bounces")
    assert not tenants.pause(f"nobody-{uid}", TENANT, "paused by the tenant: x")  # no such tenant
    tenant = tenants.get(user, fresh=True)
    assert [(p.owner, p.reason) for p in tenant.pauses] == [
        (OPERATOR, "paused by an operator: audit"),
        (GUARD, "reputation guard: first"),
        (SES, "SES paused sending for SES tenant x: bounces"),
    ]
    assert tenant.paused_reason == (
        "paused by an operator: audit; reputation guard: first; SES paused sending for SES tenant x: bounces"
    )
    assert [p.owner for p in tenants.resume(user, {GUARD})] == [GUARD]
    assert tenants.resume(user, {GUARD}) == ()  # lifted already
    assert tenants.resume(user, {TENANT}) == ()  # the tenant had none
    assert _owners(user) == [OPERATOR, SES]
    assert (user, "paused by an operator: audit; SES paused sending for SES tenant x: bounces") in tenants.paused()
    assert sorted(p.owner for p in tenants.resume(user)) == [OPERATOR, SES]  # every owner's
    assert tenants.get(user, fresh=True).pauses == () and tenants.resume(user) == ()
    assert all(u != user for u, _ in tenants.pauses())


def test_pausing_or_resuming_twice_answers_the_same_and_changes_nothing(stack, uid):
    actions = wiring.container().actions
    user = _free_tenant(uid, "twice")
    first = actions.pause_tenant(user, "holiday", by_tenant=True)
    again = actions.pause_tenant(user, "other", by_tenant=True)
    assert first.ok and again.ok and again.message == "paused already by the tenant"
    assert [p.reason for p in again.pauses] == ["paused by the tenant: holiday"]
    assert actions.pause_tenant(user, "audit", by_tenant=False).message.startswith("paused: its email is parked")
    assert actions.pause_tenant(user, "audit 2", by_tenant=False).message.startswith("paused already by an operator")
    assert _owners(user) == [TENANT, OPERATOR]
    done = actions.resume_tenant(user, by_tenant=False, owner=OPERATOR)
    assert done.ok and _owners(user) == [TENANT]
    again = actions.resume_tenant(user, by_tenant=False, owner=OPERATOR)
    assert again.ok and again.message.startswith("not paused by an operator") and _owners(user) == [TENANT]
    assert actions.resume_tenant(user, by_tenant=False).message.startswith("resumed")
    assert actions.resume_tenant(user, by_tenant=False).message == "not paused"


def test_a_pause_stored_before_owners_holds_and_belongs_to_the_owner_its_reason_names(stack, uid):
    c = wiring.container()
    table = stack.client("dynamodb")
    cases = {
        "paused by the tenant: holiday": TENANT,
        "paused by an operator: audit": OPERATOR,
        "reputation guard: bounce rate 6.0% over the last 7 days (18 of 300) is above 5.0%": GUARD,
        "SES paused sending for SES tenant moonsend-local-x: bounces": SES,
        "SES refused sending for SES tenant moonsend-local-x: SendingPaused": SES,
        "set by hand in the console": OPERATOR,  # names no owner: only an operator lifts it
    }
    users = {}
    for i, (reason, owner) in enumerate(cases.items()):
        user = users[reason] = _free_tenant(uid, f"old{i}")
        table.update_item(  # as the release before owners wrote it
            TableName=stack.settings.resources.tenants_table.name,
            Key={"user_id": {"S": user}},
            UpdateExpression="SET paused_reason = :r, paused_at = :t",
            ExpressionAttributeValues={":r": {"S": reason}, ":t": {"N": "1700000000000"}},
        )
        tenant = c.tenants.get(user, fresh=True)
        assert tenant.pauses == (Pause(owner, reason, 1700000000000),) and tenant.paused_reason == reason

    guard = users["reputation guard: bounce rate 6.0% over the last 7 days (18 of 300) is above 5.0%"]
    refused = c.actions.resume_tenant(guard, by_tenant=True)
    assert not refused.ok and "the reputation guard" in refused.message and _owners(guard) == [GUARD]
    own = users["paused by the tenant: holiday"]
    assert c.tenants.pause(own, GUARD, "reputation guard: now")  # the old pause is kept, with its owner
    assert _owners(own) == [TENANT, GUARD]
    assert c.actions.resume_tenant(own, by_tenant=True).ok and _owners(own) == [GUARD]


def test_an_operator_pauses_and_resumes_by_owner_from_the_command_line(stack, uid, capsys, monkeypatch):
    from infra import cli
    from infra.cli import main

    monkeypatch.setattr(cli, "_container", wiring.container)  # this session's objects (see test_webhooks_e2e)
    user = _free_tenant(uid, "cli")
    common = ["--user", user, "--endpoint", stack.endpoint, "--stage", "local"]
    tenants = wiring.container().tenants
    assert tenants.pause(user, GUARD, "reputation guard: bounce rate")
    assert main(["tenant", "pause", "--owner", "tenant", "--reason", "asked by phone", *common]) == 0
    assert "also paused by the reputation guard" in capsys.readouterr().out
    assert main(["tenant", "pause", "--owner", "guard", *common]) == 2  # the guard pauses by itself
    assert main(["tenant", "resume", "--owner", "guard", *common]) == 0
    out = capsys.readouterr().out
    assert "the reputation guard's pause lifted, but its email stays held: paused by the tenant" in out
    assert _owners(user) == [TENANT]
    assert main(["tenant", "pause", *common]) == 0  # an operator's own, by default
    assert _owners(user) == [TENANT, OPERATOR]
    assert main(["tenant", "resume", *common]) == 0  # every owner's, by default
    assert "resumed" in capsys.readouterr().out and _owners(user) == []


def _stored_summary(stack, user: str) -> str | None:
    """`paused_reason` as stored: what a container of the release before owners reads and checks."""
    item = stack.client("dynamodb").get_item(
        TableName=stack.settings.resources.tenants_table.name, Key={"user_id": {"S": user}}, ConsistentRead=True
    )["Item"]
    return item.get("paused_reason", {}).get("S")


def test_the_stored_summary_names_a_platform_pause_first_so_old_code_never_takes_it_for_the_tenants(stack, uid):
    # A container of the previous release (during a deploy or a rollback) lets a tenant resume when the
    # summary starts with "paused by the tenant": a platform owner's reason must come first whenever one stands.
    c = wiring.container()
    user = _free_tenant(uid, "oldcheck")
    assert c.actions.pause_tenant(user, "holiday", by_tenant=True).ok
    assert _stored_summary(stack, user) == "paused by the tenant: holiday"  # its own alone: old code lifts it
    for owner, reason in (
        (SES, "SES paused sending for SES tenant x: bounces"),
        (GUARD, "reputation guard: bounce rate 5.3%"),
        (OPERATOR, "paused by an operator: audit"),
    ):
        assert c.tenants.pause(user, owner, reason)
        assert not _stored_summary(stack, user).startswith("paused by the tenant")
        assert _stored_summary(stack, user).endswith("; paused by the tenant: holiday")
    assert _stored_summary(stack, user) == (
        "paused by an operator: audit; reputation guard: bounce rate 5.3%; "
        "SES paused sending for SES tenant x: bounces; paused by the tenant: holiday"
    )
    assert c.tenants.get(user, fresh=True).paused_reason == _stored_summary(stack, user)
    c.tenants.resume(user, {OPERATOR, GUARD})
    assert _stored_summary(stack, user) == "SES paused sending for SES tenant x: bounces; paused by the tenant: holiday"


# --- a pause reaches every drainer within 2 s of its answer ----------------------------------------------

PAUSE_REACH_MS = 2000


def _sends_of(stack, user: str) -> list[dict]:
    return [s for s in read_sends(stack.config.outbox) if s["userId"] == user]


def _publish(stack, user: str, sender: dict, campaign: str, n: int) -> None:
    spec = CampaignSpec(user, sender, "Hi {{ name }}", "<p>{{ name }}</p>", campaign)
    recipients = [{"email": f"r{i}@example.org", "metadata": {"name": f"N{i}"}} for i in range(n)]
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, recipients))


def _after(sends: list[dict], answered_ms: int) -> tuple[int, int]:
    """(sends SES took after the pause's answer, of which more than PAUSE_REACH_MS after it)."""
    late = [s["ts"] - answered_ms for s in sends if s["ts"] > answered_ms]
    return len(late), sum(1 for d in late if d > PAUSE_REACH_MS)


def test_a_tenants_own_pause_reaches_every_drainer_of_its_queue_within_two_seconds_at_a_high_rate(stack, uid):
    # 60 a second: four drainers here (15 a second each), each with warm caches of the tenant when it pauses.
    # 400: the pause comes after two seconds of sending, and holds what it may not send in the next two.
    rate, user, people = 60, f"fastpause-{uid}", 400
    sender = _paid_tenant(stack, uid, rate=rate, ses_rate=100)
    _publish(stack, user, sender, "big", people)
    assert eventually(lambda: len(_sends_of(stack, user)) >= 2 * rate, 90, poll_s=0.05)
    key = wiring.container().api_keys.replace_all(user)  # the tenant is registered by its first message
    status, body = _call("POST", f"{stack.api_url}/tenant/pause", key, {"reason": "wrong list"})
    answered_ms = int(time.time() * 1000)
    assert status == 200 and body["paused"] is True
    time.sleep(PAUSE_REACH_MS / 1000 + 3)
    after, late = _after(_sends_of(stack, user), answered_ms)
    assert late == 0, f"{late} emails sent more than 2 s after the pause's answer ({after} after it in all)"
    assert after <= 2 * rate
    held = len(_sends_of(stack, user))
    assert held < people

    # Resumed: the rest goes, each recipient once.
    assert _call("POST", f"{stack.api_url}/tenant/resume", key)[0] == 200
    assert eventually(lambda: len(_sends_of(stack, user)) >= people, 120, poll_s=0.2)
    assert stack.wait_until_drained(30)
    assert sorted(s["to"] for s in _sends_of(stack, user)) == sorted(f"r{i}@example.org" for i in range(people))


def test_an_operators_pause_of_a_free_tenant_reaches_the_shared_queues_drainer_within_two_seconds(stack, uid):
    # Written by another process (the operator's command line), as the guard's and SES's pauses are: nothing
    # tells the drainer's container but its own reads.
    user = f"freepause-{uid}"
    sender = free_tenant(stack, user)
    _publish(stack, user, sender, "news", 200)
    rate = stack.settings.free_rate_per_second
    assert eventually(lambda: len(_sends_of(stack, user)) >= 2 * rate, 90, poll_s=0.05)
    operator = TenantRegistry(stack.settings.resources.tenants_table.name, stack.settings.region, _Unsealed())
    assert operator.pause(user, OPERATOR, "paused by an operator: audit")
    answered_ms = int(time.time() * 1000)
    time.sleep(PAUSE_REACH_MS / 1000 + 3)
    after, late = _after(_sends_of(stack, user), answered_ms)
    assert late == 0, f"{late} emails sent more than 2 s after the pause ({after} after it in all)"
    assert len(_sends_of(stack, user)) < 200
    assert wiring.container().actions.resume_tenant(user, by_tenant=False, owner=OPERATOR).ok  # parked email back
    assert eventually(lambda: len(_sends_of(stack, user)) >= 200, 120, poll_s=0.2)
    assert sorted(s["to"] for s in _sends_of(stack, user)) == sorted(f"r{i}@example.org" for i in range(200))


class _Unsealed:
    """The operator's registry here only pauses: it never seals or opens a secret."""

    def seal(self, user_id: str, secret: str) -> str:
        raise AssertionError("not used")

    def open(self, user_id: str, sealed: str) -> str:
        raise AssertionError("not used")


def test_parked_free_email_whose_from_an_operator_gave_away_meanwhile_is_failed_with_why_not_sent(stack, uid):
    # Accepted From an address its tenant had; held (a pause) while an operator assigns the address to
    # another tenant; put back on the queue by the resume: the drainer reads the claim again and sends
    # nothing From an address that is no longer its tenant's.
    c = wiring.container()
    user, rightful = f"held-{uid}", f"rightful-{uid}"
    sender = free_tenant(stack, user)
    assert c.tenants.pause(user, OPERATOR, "paused by an operator: audit")
    _publish(stack, user, sender, "news", 5)
    held = parked_bucket(user, None)
    assert eventually(lambda: sum(b.count for b in c.schedule.parked(held)) == 5, 60)
    assert c.free_addresses.owner(sender["emailAddress"]) == user  # claimed by its first message
    c.free_addresses.assign(rightful, sender["emailAddress"], int(time.time() * 1000))
    assert c.actions.resume_tenant(user, by_tenant=False).ok
    assert eventually(lambda: {e.state for e in c.ledger.entries(user, "news")} == {"failed"}, 60)
    assert _sends_of(stack, user) == []
    reasons = {e.reason for e in c.ledger.entries(user, "news")}
    assert len(reasons) == 1
    assert f"its From address {sender['emailAddress']} is no longer this tenant's but another tenant's" in (
        reasons.pop() or ""
    )


def test_a_resume_repeated_after_its_try_died_between_the_lift_and_the_unparking_puts_the_parked_email_back(stack, uid):
    # A Lambda killed (or a CLI interrupted) after the pause was lifted and before its parked email went back:
    # the repeat finds the tenant not paused, and still puts the email back; nothing stays parked for good.
    c = wiring.container()
    user = f"halfresumed-{uid}"
    sender = free_tenant(stack, user)
    assert c.tenants.pause(user, OPERATOR, "paused by an operator: audit")
    _publish(stack, user, sender, "news", 5)
    held = parked_bucket(user, None)
    assert eventually(lambda: sum(b.count for b in c.schedule.parked(held)) == 5, 60)
    assert c.tenants.resume(user, [OPERATOR])  # the lift, and then the try died
    again = c.actions.resume_tenant(user, by_tenant=False)
    assert again.ok and again.message == "not paused (5 parked email put back)" and again.count == 5
    assert eventually(lambda: len(_sends_of(stack, user)) == 5, 60)
    assert c.schedule.parked(held) == []
