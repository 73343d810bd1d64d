"""The fault explorer's scenarios: for each function, the smallest work of a tenant's that makes it run, started
as its trigger starts it, and how the stack is brought to rest after (with the clock moved, not waited for)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import requests

from chalicelib import wiring
from chalicelib.core.message_parser import parse_precompile_message, parse_sender
from chalicelib.core.routing import alarm_name, tenant_queue_name
from chalicelib.digest.assembly import campaign_id, period_of
from chalicelib.stores.ledger_model import FINAL, SCHEDULED
from chalicelib.wiring import Container
from infra.local.explorer import API
from infra.local.scheduler import scheduled_event
from infra.producer import CampaignSpec, messages, publish
from infra.webhook_receiver import WebhookReceiver
from tests.faults.invariants import (
    CANCELLED,
    PAUSED,
    Campaign,
    deliveries_pending,
    depths,
    mailed,
    not_final,
    queue_left,
    tenant_queue,
)
from tests.faults.moved_clock import CLOCK

SIMULATOR = "simulator.amazonses.com"
# Past every wait the pipeline has on AWS: a send queue's visibility (5 min, the free queue's 10), SES's
# events queue's, a lease's grace, Lambda's async retries (1 and 2 min). A claim's 30 min takes three.
STEP_S = 660.0
SETTLE_S = 960.0  # past the recount's 15 minutes
IDLE_S = 15 * 86400.0  # past the days a tenant's queue is kept idle (MOONSEND_IDLE_QUEUE_DAYS: 14)
SCHEDULED_OR_FINAL = frozenset({*FINAL, SCHEDULED})


@dataclass(frozen=True)
class Scenario:
    function: str  # the function whose invocation is watched
    start: Callable[[Any, str], Campaign]  # the tenant's work, as its trigger gives it
    after_rest: Callable[[Any, str], None] | None = None  # what runs once the pipeline is at rest (a schedule)
    # What only the invocation to watch carries, beside the tenant (ses_events: the batch with the complaint).
    also: tuple[str, ...] = ()


def fresh_user() -> str:
    return f"x{uuid.uuid4().hex[:10]}"


def _campaign(
    stack: Any,
    user: str,
    recipients: list[str],
    campaign_id: str = "c1",
    sender: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> Campaign:
    sender = sender or stack.paid_sender(user, rate=10, ses_max_rate=20)
    spec = CampaignSpec(user, sender, "Hi {{ name }}", "<p>Dear {{ name }}</p>", campaign_id, options=options or {})
    people = [{"email": e, "metadata": {"name": "N"}} for e in recipients]
    publish(
        stack.client("sns"), stack.topic_arns[stack.settings.resources.precompile_topic.name], messages(spec, people)
    )
    return Campaign(user, campaign_id, tuple(e.lower() for e in recipients))


def a_small_campaign(stack: Any, user: str) -> Campaign:
    return _campaign(stack, user, [f"success+{user}-{i}@{SIMULATOR}" for i in range(2)])


def a_campaign_with_feedback(stack: Any, user: str) -> Campaign:
    """Delivered, bounced and complained: SES's events that reach the ledger, the guard and the suppressions."""
    return _campaign(stack, user, [f"success+{user}@{SIMULATOR}", f"bounce@{SIMULATOR}", f"complaint@{SIMULATOR}"])


def a_retry_of_the_failed(stack: Any, user: str) -> Campaign:
    """Two recipients failed (the sender's address not verified yet), then, once it is, retried by the tenant
    through the API, as a client does: asked again once when the answer is a server's error."""
    key = "AKIA" + uuid.uuid4().hex[:16].upper()
    stack.ses.configure(key, max_send_rate=20)
    sender = {"region": stack.config.region, "apiKey": key, "apiSecret": f"s-{user}", "ratePerSecond": "10"}
    sender |= {"emailAddress": f"news@{user}.example", "fromName": "News"}
    campaign = _campaign(stack, user, [f"success+{user}-{i}@{SIMULATOR}" for i in range(2)], f"c-{user}", sender)
    _until(lambda: not not_final(campaign), "both recipients failed (no identity)")
    ses = stack.client("sesv2", access_key=key, secret_key=sender["apiSecret"])
    ses.create_email_identity(EmailIdentity=sender["emailAddress"])
    _ask(stack, user, "POST", f"/campaigns/{campaign.campaign_id}/retry-failed")
    return campaign


def _ask(
    stack: Any, user: str, method: str, path: str, body: dict[str, Any] | None = None, **more: str
) -> dict[str, Any]:
    """The tenant's request to the API, as a client makes it: asked again once when the answer is a server's
    error or none came; the answer's JSON ({} when there was none). `more`: headers (an Idempotency-Key)."""
    headers = {"Authorization": f"Bearer {wiring.container().api_keys.replace_all(user)}", **more}
    data = None if method == "DELETE" else json.dumps(body or {}).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    for _ in range(2):
        request = urllib.request.Request(f"{stack.api_url}{path}", data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return dict(json.loads(answer.read() or b"{}"))
        except urllib.error.HTTPError as err:
            if err.code < 500:
                raise
        except (urllib.error.URLError, ConnectionError):  # no answer at all: asked again too
            pass
    return {}


RECEIVERS: dict[str, WebhookReceiver] = {}  # each run's, by tenant: closed once the run is judged


def a_campaign_with_a_webhook(stack: Any, user: str) -> Campaign:
    """A campaign whose events the tenant's endpoint (a receiver on loopback) is sent: deliver_webhooks."""
    receiver = RECEIVERS[user] = WebhookReceiver()
    sender, c = stack.paid_sender(user, rate=10, ses_max_rate=20), wiring.container()
    c.tenants.accept(user, "paid", parse_sender({"sender": sender}, []), c.ses.account_of)  # as its first email
    key = c.api_keys.replace_all(user)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    body = json.dumps({"url": receiver.url}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{stack.api_url}/webhooks", body, headers), timeout=30).close()
    return _campaign(stack, user, [f"success+{user}@{SIMULATOR}", f"bounce@{SIMULATOR}"], sender=sender)


DIGEST = "weekly"
DIGEST_READERS = 3
# Each item's id in the email, between brackets: what the digest's check finds (invariants.digest_items_off).
DIGEST_BODY = "<p>Hi {{ name }}</p>{% for item in items %}<p>[{{ item.id }}]</p>{% endfor %}"


def a_digest_run(stack: Any, user: str) -> Campaign:
    """A weekly digest with three readers of two items each, its period's run fired as Scheduler fires it."""
    sender = stack.paid_sender(user, rate=10, ses_max_rate=20)
    definition = {"id": DIGEST, "subject": "Your week", "body": DIGEST_BODY, "schedule": "cron(0 13 ? * WED *)"}
    sns, topic = stack.client("sns"), stack.topic_arns[stack.settings.resources.precompile_topic.name]
    publish(sns, topic, [json.dumps({"userId": user, "sender": sender, "digest": {**definition, "window": "P7D"}})])
    c = wiring.container()
    # Items sent before the definition is whole (its window stored) are refused: wait for it, and its schedule.
    whole = lambda: (d := c.digests.definition(user, DIGEST)) is not None and d.complete  # noqa: E731
    _until(lambda: whole() and c.digest_schedules.get(user, DIGEST) is not None, "the digest's definition")
    now = time.time()
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 3600))
    readers = [f"reader{i}+{user}@{SIMULATOR}" for i in range(DIGEST_READERS)]
    items = {r: (f"{user}-{i}-a", f"{user}-{i}-b") for i, r in enumerate(readers)}
    people = [
        {"email": r, "metadata": {"name": "N"}, "items": [{"id": x, "type": "Show", "at": at, "data": {}} for x in ids]}
        for r, ids in items.items()
    ]
    publish(sns, topic, [json.dumps({"userId": user, "digest": {"id": DIGEST}, "recipients": people})])
    stored = lambda: sum(len(r.items) for r in c.digests.recipients(user, DIGEST))  # noqa: E731
    _until(lambda: stored() == 2 * DIGEST_READERS, lambda: f"{2 * DIGEST_READERS} items stored (not {stored()})")
    minute = float(int(now) // 60 * 60)
    schedule = c.digest_schedules.get(user, DIGEST)
    assert stack.schedules is not None and schedule is not None
    stack.schedules.fire(schedule, minute)
    pairs = tuple((r.lower(), x) for r, ids in items.items() for x in ids)
    return Campaign(user, campaign_id(DIGEST, period_of(minute)), tuple(r.lower() for r in readers), pairs)


def _until(condition: Callable[[], bool], what: str | Callable[[], str], timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, (
            f"the scenario's set-up timed out waiting for {what if isinstance(what, str) else what()}"
        )
        time.sleep(0.05)


def recount_run(stack: Any, user: str) -> None:
    """recount_campaigns as its schedule invokes it, once the campaign's changes settled."""
    _advance(stack, SETTLE_S)
    _job(stack, "recount_campaigns", user, then_s=300)


def a_scheduled_campaign(stack: Any, user: str) -> Campaign:
    """A campaign scheduled an hour ahead (held in the schedule store), released by release_scheduled."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    recipients = [f"success+{user}-{i}@{SIMULATOR}" for i in range(2)]
    campaign = _campaign(stack, user, recipients, options={"scheduledAt": at})
    _until(lambda: not not_final(campaign, among=SCHEDULED_OR_FINAL), "both recipients scheduled")
    # The releaser reads every minute since its cursor: a run just before the hour brings the cursor to now
    # (every other run moved the clock), so that the watched run reads the same few minutes each time.
    _advance(stack, 3600 - 120)
    _job(stack, "release_scheduled", "catching-up")
    _advance(stack, 180)
    _job(stack, "release_scheduled", user, then_s=60)
    return campaign


def a_campaign_after_its_queue_retired(stack: Any, user: str) -> Campaign:
    """A tenant's queue idle for longer than retire_idle_queues keeps one, retired by it, then a campaign:
    its queue made again. Every queue idle before is retired first, so that the watched run retires one."""
    _advance(stack, IDLE_S)
    _job(stack, "retire_idle_queues", "every-idle-queue")
    bring_to_rest(stack, a_small_campaign(stack, user))
    _advance(stack, IDLE_S)
    _job(stack, "retire_idle_queues", user)
    return _campaign(stack, user, [f"success+{user}-again@{SIMULATOR}"], "c2")


class _NoDrain:
    """A drain starter that starts nothing (as infra.smoke's): email put on a queue that no drain takes."""

    def ensure(self, queue: str, start_at_ms: int | None = None, slot: int = 0) -> bool:
        return False


def _queued_with_no_drain(stack: Any, user: str) -> Campaign:
    """A campaign on the tenant's queue with no drain and no alarm to start one (as when a drain died and the
    alarm, already in ALARM, does not fire again; or on a stage without queue alarms, the default): the
    tenant's queue made by a first campaign, brought to rest, its alarm's actions (if it has one) disabled."""
    sender = stack.paid_sender(user, rate=10, ses_max_rate=20)
    bring_to_rest(stack, _campaign(stack, user, [f"success+{user}-first@{SIMULATOR}"], sender=sender))
    queue = tenant_queue_name(stack.settings.resources, user)
    if stack.settings.queue_alarms:
        stack.client("cloudwatch").disable_alarm_actions(AlarmNames=[alarm_name(queue)])
    stack.alarms.evaluate_once(force=True)  # the alarms' definitions read again now, not when their cache lapses
    c = Container(stack.settings)
    # Put in place of the container's cached property of that name (a rename must not leave this a no-op).
    assert isinstance(type(c).__dict__.get("drain_starter"), cached_property)
    c.__dict__["drain_starter"] = _NoDrain()  # before the precompiler is made, which takes it
    recipients = [f"success+{user}-{i}@{SIMULATOR}" for i in range(2)]
    spec = CampaignSpec(user, sender, "Hi {{ name }}", "<p>Dear {{ name }}</p>", "c2")
    for message in messages(spec, [{"email": e, "metadata": {"name": "N"}} for e in recipients]):
        result = c.precompiler.handle_request(parse_precompile_message(message))
        assert result.queued == len(recipients), f"not all queued: {result}"
    return Campaign(user, "c2", tuple(e.lower() for e in recipients))


def a_queue_left_without_a_drain(stack: Any, user: str) -> Campaign:
    """Email on a queue with no drain: sweep_queues (every minute) starts one. Every idle queue is retired
    first, so that the watched sweep reads a handful of queues, not every run's."""
    _advance(stack, IDLE_S)
    _job(stack, "retire_idle_queues", "every-idle-queue")
    campaign = _queued_with_no_drain(stack, user)
    _job(stack, "sweep_queues", user)
    return campaign


def a_dead_letter(stack: Any, user: str) -> Campaign:
    """A recipient's message that SQS dead-lettered after drains that died with it (moved to the dead-letter
    queue as SQS's redrive moves it), recorded `failed` by reconcile_dead_letters once it is an hour old. The
    dead letters of earlier runs visible now are deleted first, as an operator would (PurgeQueue takes one
    a minute): the watched run reads these only."""
    campaign = _queued_with_no_drain(stack, user)
    sqs, r = stack.client("sqs"), stack.settings.resources
    dead = sqs.get_queue_url(QueueName=r.dead_letter_queue.name)["QueueUrl"]
    while earlier := sqs.receive_message(QueueUrl=dead, MaxNumberOfMessages=10).get("Messages", []):
        for m in earlier:
            sqs.delete_message(QueueUrl=dead, ReceiptHandle=m["ReceiptHandle"])
    url = sqs.get_queue_url(QueueName=tenant_queue_name(r, user))["QueueUrl"]
    moved, end = 0, time.monotonic() + 30
    while moved < len(campaign.recipients):
        assert time.monotonic() < end, f"the scenario's set-up found {moved} of its messages on {url}"
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            sqs.send_message(QueueUrl=dead, MessageBody=m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            moved += 1
    _advance(stack, 3660)  # past the hour a dead letter's twin may still take
    _job(stack, "reconcile_dead_letters", user, then_s=900)
    return campaign


def a_replay_of_held_deliveries(stack: Any, user: str) -> Campaign:
    """A tenant's endpoint that answered 410 Gone (disabled: its deliveries held), then enabled again by a
    replay through the API: webhook_jobs puts the held deliveries back on their queue."""
    receiver = RECEIVERS[user] = WebhookReceiver(statuses=(410, 200))
    sender, c = stack.paid_sender(user, rate=10, ses_max_rate=20), wiring.container()
    c.tenants.accept(user, "paid", parse_sender({"sender": sender}, []), c.ses.account_of)  # as its first email
    endpoint = _ask(stack, user, "POST", "/webhooks", {"url": receiver.url})["id"]
    campaign = _campaign(stack, user, [f"success+{user}@{SIMULATOR}", f"bounce@{SIMULATOR}"], sender=sender)
    bring_to_rest(stack, campaign)
    _ask(stack, user, "POST", f"/webhooks/{endpoint}/replay")
    return campaign


def a_campaign_sent_from_an_upload(stack: Any, user: str) -> Campaign:
    """Recipients uploaded as CSV by the presigned form, read, and sent by the API: upload_jobs reads the file
    (a reading killed is Lambda's to retry: the clock is moved past its waits), then publishes the recipients
    to PrecompileEmail. The request is made as a client makes it, again with its key after a server's error."""
    sender, c = stack.paid_sender(user, rate=10, ses_max_rate=20), wiring.container()
    c.tenants.accept(user, "paid", parse_sender({"sender": sender}, []), c.ses.account_of)
    recipients = [f"success+{user}-{i}@{SIMULATOR}" for i in range(3)]
    made = _ask(stack, user, "POST", "/uploads", {"filename": "people.csv"})
    csv = ("email,name\r\n" + "".join(f"{r},N\r\n" for r in recipients)).encode()
    form = made["form"]
    answer = requests.post(form["url"], data=form["fields"], files={"file": ("people.csv", csv)}, timeout=30)
    assert answer.status_code in (200, 204), answer.text
    _ask(stack, user, "POST", f"/uploads/{made['id']}/read")
    for _ in range(4):
        if _ask(stack, user, "GET", f"/uploads/{made['id']}").get("state") == "read":
            break
        time.sleep(3)
        _advance(stack, 200)  # past Lambda's two retries of an asynchronous invocation (1 and 2 minutes)
    body = {"subject": "Hi {{ name }}", "body": "<p>Dear {{ name }}</p>", "uploadId": made["id"]}
    sent = _ask(stack, user, "POST", "/campaigns", body, **{"Idempotency-Key": f"send-{user}"})
    return Campaign(user, sent["id"], tuple(recipients))


def _a_scheduled_campaign_at_its_hour(stack: Any, user: str, before: Callable[[Campaign], None]) -> Campaign:
    """A campaign scheduled an hour ahead; `before` runs on it, then the hour comes and release_scheduled runs."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    recipients = [f"success+{user}-{i}@{SIMULATOR}" for i in range(2)]
    campaign = _campaign(stack, user, recipients, f"c-{user}", options={"scheduledAt": at})
    _until(lambda: not not_final(campaign, among=SCHEDULED_OR_FINAL), "both recipients scheduled")
    before(campaign)
    _advance(stack, 3600 + 60)
    _job(stack, "release_scheduled", "at-the-hour")
    return campaign


def a_cancelled_campaign(stack: Any, user: str) -> Campaign:
    """A scheduled campaign cancelled through the API before its hour: at rest, every recipient `cancelled`
    and none mailed (invariants.control_undone)."""
    cancel = lambda c: _ask(stack, user, "POST", f"/campaigns/{c.campaign_id}/cancel")  # noqa: E731
    return replace(_a_scheduled_campaign_at_its_hour(stack, user, cancel), control=CANCELLED)


def a_suppression_before_the_hour(stack: Any, user: str) -> Campaign:
    """One recipient of a scheduled campaign put on the tenant's suppression list through the API before the
    campaign's hour: at rest, that one `suppressed` and never mailed, the other mailed once."""

    def suppress(c: Campaign) -> None:
        _ask(stack, user, "POST", "/suppressions", {"addresses": [c.recipients[0]], "reason": "asked by phone"})

    campaign = _a_scheduled_campaign_at_its_hour(stack, user, suppress)
    return replace(campaign, suppressed=campaign.recipients[:1])


def a_paused_campaign_resumed(stack: Any, user: str) -> Campaign:
    """A scheduled campaign paused through the API before its hour: nothing mailed when the hour came and the
    stack came to rest; then resumed, and every recipient mailed once."""
    pause = lambda c: _ask(stack, user, "POST", f"/campaigns/{c.campaign_id}/pause")  # noqa: E731
    campaign = _a_scheduled_campaign_at_its_hour(stack, user, pause)
    bring_to_rest(stack, replace(campaign, control=PAUSED))
    undone = [f"{to} mailed while paused" for to in mailed(stack, campaign)]
    _ask(stack, user, "POST", f"/campaigns/{campaign.campaign_id}/resume")
    return replace(campaign, seen_broken=tuple(undone))


def a_free_tenant_ses_enabled_again(stack: Any, user: str) -> Campaign:
    """A free tenant whose SES tenant the platform disabled (SES's event pauses it as SES) while its campaign
    came: the email parked, never failed. Then enabled again: that event (the invocation watched) lifts SES's
    pause and puts the parked email back; every recipient mailed once."""
    c = wiring.container()
    sender = {"region": "us-east-1", "ratePerSecond": "10", "emailAddress": f"news@{user}.example", "fromName": "N"}
    ses = stack.client("sesv2")
    ses.create_email_identity(EmailIdentity=sender["emailAddress"])
    c.tenants.accept(user, "free", parse_sender({"sender": sender}, []), c.ses.account_of)
    name = c.ses_tenants.ensure(user, sender["emailAddress"], stack.config.region)
    arn = ses.get_tenant(TenantName=name)["Tenant"]["TenantArn"]

    def status(value: str) -> None:
        ses.update_reputation_entity_customer_managed_status(
            ReputationEntityType="RESOURCE", ReputationEntityReference=arn, SendingStatus=value
        )

    status("DISABLED")
    _until(lambda: any(p.owner == "ses" for p in c.tenants.get(user, fresh=True).pauses), "SES's pause followed")
    campaign = _campaign(stack, user, [f"success+{user}-{i}@{SIMULATOR}" for i in range(3)], sender=sender)
    _until(lambda: sum(b.count for b in c.schedule.parked(f"held#{user}")) == 3, "the campaign parked")
    status("ENABLED")
    return campaign


def _job(stack: Any, function: str, named: str, then_s: float = 60.0) -> None:
    """A scheduled function as its rule invokes it, the rule naming `named` (the tenant: the invocation
    watched). Killed or failed, its next run `then_s` later (the rule's rate) is the retry."""
    fn = stack.runner.functions[stack.settings.resources.function_name(function)]
    account, region = stack.config.account_id, stack.config.region
    try:
        stack.runner.invoke(fn, scheduled_event(f"arn:aws:events:::rule/explore-{named}", account, region))
    except BaseException:
        _advance(stack, then_s)
        stack.runner.invoke(fn, scheduled_event("arn:aws:events:::rule/next", account, region))


SCENARIOS = {
    "precompile_email": Scenario("precompile_email", a_small_campaign),
    "send_emails": Scenario("send_emails", a_small_campaign),
    "ses_events": Scenario("ses_events", a_campaign_with_feedback, also=("Complaint",)),
    "webhook_events": Scenario("webhook_events", a_small_campaign),
    "recount_campaigns": Scenario("recount_campaigns", a_small_campaign, after_rest=recount_run),
    "run_digest": Scenario("run_digest", a_digest_run),
    "release_scheduled": Scenario("release_scheduled", a_scheduled_campaign, also=("explore-",)),
    "retire_idle_queues": Scenario("retire_idle_queues", a_campaign_after_its_queue_retired, also=("explore-",)),
    "deliver_webhooks": Scenario("deliver_webhooks", a_campaign_with_a_webhook),
    "sweep_queues": Scenario("sweep_queues", a_queue_left_without_a_drain, also=("explore-",)),
    "reconcile_dead_letters": Scenario("reconcile_dead_letters", a_dead_letter, also=("explore-",)),
    "webhook_jobs": Scenario("webhook_jobs", a_replay_of_held_deliveries),
    "upload_jobs": Scenario("upload_jobs", a_campaign_sent_from_an_upload),  # its reading of the file
    "upload_jobs_publish": Scenario("upload_jobs", a_campaign_sent_from_an_upload, also=('"job": "publish"',)),
    "ses_sending_status": Scenario(
        "ses_sending_status", a_free_tenant_ses_enabled_again, also=("Sending Status Enabled",)
    ),
    "api_retry_failed": Scenario(API, a_retry_of_the_failed, also=("retry-failed",)),
    "api_cancel": Scenario(API, a_cancelled_campaign, also=("/cancel",)),
    "api_pause": Scenario(API, a_paused_campaign_resumed, also=("/pause",)),
    "api_suppress": Scenario(API, a_suppression_before_the_hour, also=("/suppressions",)),
    "api_send": Scenario(API, a_campaign_sent_from_an_upload, also=('"/campaigns"',)),
}


# The rules that run every minute on AWS: what the next minute after a move of the clock runs.
EVERY_MINUTE = ("release_scheduled", "sweep_queues")


def bring_to_rest(stack: Any, c: Campaign, rounds: int = 6) -> int:
    """Until every recipient is final and its queue empty: each round waits for the stack to be idle, then moves
    the clock past the pipeline's waits and runs the every-minute rules as the next minute would. How many
    moves it took."""
    account, region = stack.config.account_id, stack.config.region
    for moves in range(rounds):
        _settle(stack, c)
        if not not_final(c) and not queue_left(stack, c) and not deliveries_pending(stack):
            return moves
        _advance(stack, STEP_S)
        for function in EVERY_MINUTE:
            fn = stack.runner.functions[stack.settings.resources.function_name(function)]
            stack.runner.invoke(fn, scheduled_event(f"arn:aws:events:::rule/{function}", account, region))
    return rounds


def _settle(stack: Any, c: Campaign, timeout_s: float = 20.0, quiet_s: float = 1.0) -> None:
    """Until nothing runs and nothing waits that this run could take without the clock moving: no SNS
    delivery or SES event pending, no invocation running, no ledger record pending, nothing visible on the
    tenant's queue, SES's events queue or the webhooks' (what waits out a visibility timeout or a delay is
    the clock's to release). Not stack.wait_until_drained: it waits for every queue of the stage to be empty,
    a minute for each message a kill left in flight."""
    r = stack.settings.resources
    names = [tenant_queue(stack, c), r.events_queue.name, r.webhooks_queue.name]
    end, quiet_since = time.monotonic() + timeout_s, None
    while time.monotonic() < end:
        busy = (
            stack.sns.backlog() > 0
            or stack.runner.inflight > 0
            or stack.ses.events_pending > 0
            or any(p.holding for p in stack.pollers)
            or any(p.pending for p in stack.stream_pollers)
            or any(v[0] for v in depths(stack, names).values())
        )
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        time.sleep(0.2)


def _advance(stack: Any, seconds: float) -> None:
    """Move the clock, once the ledger's stream has been read: Lambda's stream poller reads in real time, and a
    record left pending across the jump would look as old as the jump (and be given up on, past its age)."""
    stack.wait_for_streams(60)
    CLOCK.advance(seconds)


def recount(stack: Any) -> None:
    """The recount's next run, once everything settled: what the counters are judged after."""
    _advance(stack, SETTLE_S)
    fn = stack.runner.functions[stack.settings.resources.function_name("recount_campaigns")]
    stack.runner.invoke(
        fn, scheduled_event("arn:aws:events:::rule/recount", stack.config.account_id, stack.config.region)
    )
