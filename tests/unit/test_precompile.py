"""precompile_email's decisions, with in-process fakes for AWS."""

import base64
import hashlib
import json
import random
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from chalicelib.core.config import Settings
from chalicelib.core.errors import QueueRecentlyRetired
from chalicelib.core.routing import tenant_queue_name
from chalicelib.ingest.renderer import TemplateCache
from chalicelib.queueing.tenant_queues import TenantQueues
from tests.conftest import canonical
from tests.fakes import FakeQueues, FakeS3, FakeSqs, FakeStats, FakeTenants, parts
from tests.fakes.ledger import FakeLedger
from tests.fakes.queues import FakeQueueActivity
from tests.mail import html_of, queued_message


def _precompiler(sqs=None, *, ledger=None, daily_cap=None, templates=None):
    """A precompiler whose fakes the test holds: the ones it passes in (to read or to fail), and those returned."""
    sqs = sqs or FakeSqs()
    settings = Settings.from_env({"MOONSEND_STAGE": "test"})
    tenants, queues, stats = FakeTenants(), FakeQueues(), FakeStats()
    p = parts.precompiler(
        settings,
        sqs,
        tenants=tenants,
        queues=queues,
        stats=stats,
        ledger=ledger,
        daily_cap=daily_cap,
        templates=templates,
    )
    return p, sqs, tenants, queues, stats


def _batched(n, **campaign):
    msg = canonical()
    del msg["recipient"]
    msg["campaign"].update(campaign)
    msg["recipients"] = [{"email": f"r{i}@example.org", "metadata": {"name": f"N{i}"}} for i in range(n)]
    return json.dumps(msg)


def test_queued_messages_are_rendered_and_carry_no_keys():
    p, sqs, tenants, queues, _stats = _precompiler()
    msg = canonical()
    msg["campaign"]["tracking"] = False  # the body exactly as rendered (tracking: test_tracking)
    result = p.handle(json.dumps(msg))
    assert result.queued == 1 and result.queue == "moonsend-test-t-user-1"
    body = json.loads(sqs.batches[0][1][0]["MessageBody"])
    assert body["campaign"]["subject"] == "Hello Ann" and html_of(queued_message(body)) == "<p>Hi Ann</p>"
    assert "apiKey" not in body["sender"] and "apiSecret" not in body["sender"]
    assert tenants.remembered[0][2].api_secret == "secret/EXAMPLE+key"  # kept in the registry instead
    assert queues.ensured == [("moonsend-test-t-user-1", "user-1")]


def test_a_queued_email_carries_its_message_composed_for_a_strict_reader_all_but_its_date():
    p, sqs, *_ = _precompiler()
    msg = canonical()
    msg["campaign"]["tracking"] = False
    p.handle(json.dumps(msg))
    queued = json.loads(sqs.batches[0][1][0]["MessageBody"])
    assert "body" not in queued["campaign"]  # the HTML travels once, inside the message
    message = queued_message(queued)  # email.policy.strict: a defect raises
    assert message["From"] == "Example News <news@example.com>" and message["To"] == "ann@example.org"
    assert message["Subject"] == "Hello Ann" and message["Date"] is None  # dated when it is sent
    assert message["Message-ID"].endswith("@example.com>")
    unsubscribe = parts.links().unsubscribe_url("user-1", "camp-1", "ann@example.org")
    assert message["List-Unsubscribe"] == f"<{unsubscribe}>"
    assert message.get_body(("plain",)).get_content().splitlines() == ["Hi Ann"]
    assert html_of(message) == "<p>Hi Ann</p>"


def test_a_thousand_recipients_need_at_most_a_hundred_batches():
    p, sqs, *_ = _precompiler()
    result = p.handle(_batched(1000))
    assert result.queued == 1000
    assert len(sqs.batches) == 100 and all(len(e) == 10 for _u, e in sqs.batches)


def test_template_syntax_error_rejects_every_recipient_with_one_reason_and_queues_nothing():
    p, sqs, _t, _q, stats = _precompiler()
    result = p.handle(_batched(5, body="<p>\n{% nosuchtag %}"))
    assert result.queued == 0 and sqs.batches == []
    assert {r.reason for r in result.rejected} == {"template: body, line 2, column 3: unexpected tag 'nosuchtag'"}
    assert stats.adds[-1][2] == {"queued": 0, "rejected": 5}


def test_strict_campaign_rejects_only_the_recipients_missing_a_variable():
    msg = json.loads(_batched(3, subject="Hi {{ nickname }}", strict=True))
    msg["recipients"][1]["metadata"]["nickname"] = "Bo"
    p, *_ = _precompiler()
    result = p.handle(json.dumps(msg))
    assert result.queued == 1
    assert [r.email for r in result.rejected] == ["r0@example.org", "r2@example.org"]
    assert "'nickname' is undefined" in result.rejected[0].reason


def test_entries_sqs_refuses_are_recorded_as_rejected_not_lost():
    p, _sqs, _t, _q, stats = _precompiler(FakeSqs(fail_ids={"3"}))
    result = p.handle(_batched(10))
    assert result.queued == 9
    assert [r.email for r in result.rejected] == ["r3@example.org"]
    assert result.rejected[0].reason.startswith("enqueue: InvalidMessageContents")
    assert stats.adds[-1][2] == {"queued": 9, "rejected": 1}


def test_free_plan_tenants_share_the_free_queue():
    p, *_ = _precompiler()
    assert p.handle(json.dumps(canonical(userPlan="free"))).queue == "moonsend-test-free"


def test_an_invalid_message_is_counted_against_its_campaign_when_it_names_one():
    p, sqs, _t, _q, stats = _precompiler()
    msg = canonical()
    msg["sender"]["ratePerSecond"] = "-1"
    result = p.handle(json.dumps(msg))
    assert result.queued == 0 and sqs.batches == []
    assert stats.adds == [("user-1", "camp-1", {"rejected": 1}, "sender.ratePerSecond: must be greater than zero")]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "message: not valid JSON"),
        (
            json.dumps(canonical(userId="../x")),
            "userId: may only hold ASCII letters, digits and _.|@:+=- (not first)"
            " (userId given: '../x', campaign.id given: 'camp-1')",
        ),
        (json.dumps(canonical(userId="t" * 300)), "userId: longer than 128 characters (userId given: 'tttt"),
    ],
)
def test_a_message_with_no_usable_tenant_is_recorded_once_under_unattributed_however_often_redelivered(raw, reason):
    from chalicelib.stores.ledger_model import UNATTRIBUTED, message_key

    ledger = FakeLedger()
    p, sqs, _t, _q, stats = _precompiler(ledger=ledger)
    p.handle(raw)
    p.handle(raw)  # SNS redelivers
    day = time.strftime("%Y-%m-%d", time.gmtime())
    row = ledger.rows[(f"{UNATTRIBUTED}#{day}", message_key(raw))]
    assert row["state"] == "rejected" and row["reason"].startswith(reason)
    assert [a[:3] for a in stats.adds] == [(UNATTRIBUTED, day, {"rejected": 1})]  # counted once
    assert sqs.batches == []


def test_a_rejected_message_never_echoes_the_senders_secret():
    msg = canonical(userId="../x")
    ledger = FakeLedger()
    p, *_ = _precompiler(ledger=ledger)
    p.handle(json.dumps(msg))
    assert ledger.rows  # the rejection was recorded: there is a row to look into
    assert not any("secret/EXAMPLE+key" in str(row) for row in ledger.rows.values())


def test_a_rendered_email_over_the_threshold_goes_to_s3_with_a_pointer_on_the_queue():
    from chalicelib.stores.payloads import PayloadStore

    s3 = FakeS3()
    store = PayloadStore(s3, "bucket", threshold_bytes=3000)
    sqs = FakeSqs()
    settings = Settings.from_env({"MOONSEND_STAGE": "test"})
    p = parts.precompiler(settings, sqs, payload_store=store)
    msg = canonical()
    del msg["recipient"]
    msg["campaign"]["body"] = "<p>{{ name }}</p>" + base64.b64encode(random.Random(7).randbytes(6000)).decode()
    msg["recipients"] = [{"email": "big@example.org", "metadata": {"name": "Big"}}]
    assert p.handle(json.dumps(msg)).queued == 1
    body = sqs.batches[0][1][0]["MessageBody"]
    pointer = PayloadStore.pointer(body)
    assert pointer and pointer["key"].startswith("queued/user-1/camp-1/") and len(body) < 200
    assert html_of(queued_message(json.loads(store.unwrap(body)))).startswith("<p>Big</p>")
    small = p.handle(json.dumps(canonical()))
    assert small.queued == 1 and PayloadStore.pointer(sqs.batches[-1][1][0]["MessageBody"]) is None


def test_a_redelivered_event_queues_nothing_again():
    p, sqs, _t, _q, stats = _precompiler()
    first = p.handle(_batched(30))
    again = p.handle(_batched(30))
    assert first.queued == 30 and again.queued == 0 and again.duplicates == 30
    assert sum(len(e) for _u, e in sqs.batches) == 30
    assert [a[2]["queued"] for a in stats.adds] == [30, 0]


def test_rejected_recipients_are_recorded_in_the_ledger_with_their_reason():
    ledger = FakeLedger()
    p, *_ = _precompiler(ledger=ledger)
    msg = json.loads(_batched(2))
    msg["recipients"].append({"email": "bad address"})
    msg["recipients"].append({"email": "strict@example.org", "metadata": {}})
    msg["campaign"]["subject"] = "Hi {{ name }}"
    msg["campaign"]["strict"] = True
    p.handle(json.dumps(msg))
    assert ledger.state("user-1", "camp-1", "r0@example.org") == "queued"
    assert ledger.state("user-1", "camp-1", "strict@example.org") == "rejected"
    assert "'name' is undefined" in ledger.rows[("user-1#camp-1", "strict@example.org")]["reason"]


def test_a_crash_after_enqueue_loses_nothing_the_retry_queues_again():
    sqs, ledger = FakeSqs(), FakeLedger()
    p, *_ = _precompiler(sqs, ledger=ledger)

    def crash(*_a):
        raise RuntimeError("crash before the record")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ledger, "record_queued", crash)
        with pytest.raises(RuntimeError):
            p.handle(_batched(5))
    retried = p.handle(_batched(5))  # Lambda retries the event
    assert retried.queued == 5
    assert sum(len(e) for _u, e in sqs.batches) == 10  # two copies each: the sender's claim sends one


@pytest.mark.parametrize("step", ["ledger look-up", "render", "enqueue", "ledger record"])
def test_a_crash_at_any_step_loses_no_recipient_once_lambda_retries(step, monkeypatch):
    sqs, ledger, templates = FakeSqs(), FakeLedger(), TemplateCache()
    p, *_ = _precompiler(sqs, ledger=ledger, templates=templates)
    targets = {
        "ledger look-up": (ledger, "recorded"),
        "render": (templates, "get"),
        "enqueue": (sqs, "send_message_batch"),
        "ledger record": (ledger, "record_queued"),
    }
    obj, name = targets[step]
    real = getattr(obj, name)
    calls = []

    def crash_once(*a, **k):
        if not calls:
            calls.append(1)
            raise RuntimeError(f"injected crash at {step}")
        return real(*a, **k)

    monkeypatch.setattr(obj, name, crash_once)
    with pytest.raises(RuntimeError):
        p.handle(_batched(7))
    p.handle(_batched(7))  # Lambda's retry of the same event
    queued = {json.loads(e["MessageBody"])["recipient"]["email"] for _u, entries in sqs.batches for e in entries}
    assert queued == {f"r{i}@example.org" for i in range(7)}
    assert all(ledger.state("user-1", "camp-1", f"r{i}@example.org") == "queued" for i in range(7))


@pytest.mark.parametrize(
    ("template", "metadata", "expected"),
    [
        ("{{ points | ceil }}", {"points": "1e999"}, "render: body: OverflowError: "),
        ("{{ scores | sum }}", {"scores": ["1", "n/a"]}, "render: body: InvalidOperation: "),
        ("{{ x | floor }}", {"x": float("nan")}, "render: body: ValueError: cannot convert float NaN"),
        ("{{ x | round }}", {"x": float("inf")}, "render: body: OverflowError: "),
        ("{{ x | modulo: 0.0 }}", {"x": 5}, "render: body: InvalidOperation: "),
        (
            "{% assign n = 10 %}{% for i in (1..60) %}{% assign n = n | times: n %}{% endfor %}{{ n }}",
            {},
            "limit reached",
        ),
    ],
)
def test_whatever_a_recipients_data_makes_a_filter_raise_rejects_that_recipient_only(template, metadata, expected):
    msg = canonical()
    del msg["recipient"]
    msg["campaign"]["body"] = f"<p>{{% if hostile %}}{template}{{% endif %}}</p>"
    msg["recipients"] = [
        {"email": "good@example.org", "metadata": {}},
        {"email": "bad@example.org", "metadata": {"hostile": True, **metadata}},
    ]
    p, sqs, *_ = _precompiler()
    result = p.handle(json.dumps(msg, allow_nan=True))
    # Before, each of these raised out of the handler and the whole message (the good recipient too) was lost.
    assert [(r.email, expected in r.reason) for r in result.rejected] == [("bad@example.org", True)]
    assert result.queued == 1 and len(sqs.batches) == 1  # the good one queued


def test_a_message_nested_past_the_parsers_limit_is_recorded_invalid_not_lost():
    from chalicelib.stores.ledger_model import UNATTRIBUTED, message_key

    msg = canonical()
    deep = "[" * 3000 + "]" * 3000
    raw = json.dumps(msg).replace('"metadata": {', f'"deep": {deep}, "metadata": {{', 1)
    ledger = FakeLedger()
    p, sqs, *_ = _precompiler(ledger=ledger)
    p.handle(raw)  # does not raise
    day = time.strftime("%Y-%m-%d", time.gmtime())
    row = ledger.rows[(f"{UNATTRIBUTED}#{day}", message_key(raw))]
    assert row["state"] == "rejected" and "nested too deeply" in row["reason"]
    assert sqs.batches == []


def test_metadata_nested_deeper_than_the_limit_rejects_that_recipient_with_why():
    msg = canonical()
    del msg["recipient"]
    nested: dict = {}
    for _ in range(100):
        nested = {"n": nested}
    msg["recipients"] = [
        {"email": "ok@example.org", "metadata": {"name": "A"}},
        {"email": "deep@example.org", "metadata": nested},
    ]
    p, *_ = _precompiler()
    result = p.handle(json.dumps(msg))
    assert result.queued == 1
    assert [(r.email, r.reason) for r in result.rejected] == [
        ("deep@example.org", "recipients[1].metadata: nested more than 32 levels")
    ]


def test_one_messages_failed_counter_write_never_loses_another_concurrent_messages_counts():
    # The finding: concurrent messages in one container (the local stack runs many) shared one buffer of
    # counts, and a flush that failed on one message's campaign threw the other's counts away (their
    # recipients already recorded, so no retry counts them again), or failed the other message.
    import threading

    class FailsForA(FakeStats):
        def add_counts(self, user_id, campaign_id, deltas, *, error=None, sent_seconds=None):
            if campaign_id == "camp-a":
                raise ConnectionError("DynamoDB unreachable")
            super().add_counts(user_id, campaign_id, deltas, error=error, sent_seconds=sent_seconds)

    stats, ledger = FailsForA(), FakeLedger()
    p = parts.precompiler(Settings.from_env({"MOONSEND_STAGE": "test"}), FakeSqs(), stats=stats, ledger=ledger)
    a_counted, b_done = threading.Event(), threading.Event()
    real = ledger.record_suppressed

    def pause_a(user, campaign, suppressed):  # A has counted its queued recipients, not yet written them
        if campaign == "camp-a":
            a_counted.set()
            b_done.wait(10)
        return real(user, campaign, suppressed)

    ledger.record_suppressed = pause_a
    errors = []

    def run_a():
        try:
            p.handle(_batched(2, id="camp-a"))
        except ConnectionError as exc:
            errors.append(exc)

    a = threading.Thread(target=run_a)
    a.start()
    assert a_counted.wait(10)
    assert p.handle(_batched(3, id="camp-b")).queued == 3  # B's own write, whatever A's does
    b_done.set()
    a.join(10)
    assert stats.total("queued") == 3 and len(errors) == 1  # A's failure is A's


def test_a_queue_given_email_gets_its_drain_started_at_once_or_at_the_campaigns_time():
    from chalicelib.queueing.drain_starter import DrainStarter
    from tests.fakes.leases import FakeLeases

    starts = parts.Starts()
    settings = Settings.from_env({"MOONSEND_STAGE": "test"})
    p = parts.precompiler(settings, FakeSqs(), drains=DrainStarter(FakeLeases(), starts))
    p.handle(_batched(2))
    assert starts == [("moonsend-test-t-user-1", None)]  # not when the queue's alarm wakes

    later = parts.Starts()
    p = parts.precompiler(settings, FakeSqs(), drains=DrainStarter(FakeLeases(), later))
    at = time.time() + 100
    from datetime import UTC, datetime

    p.handle(_batched(2, scheduledAt=datetime.fromtimestamp(at, UTC).isoformat()))
    ((queue, start_at_ms),) = later
    assert queue == "moonsend-test-t-user-1" and abs(start_at_ms - at * 1000) <= 1000  # when it becomes visible


def test_a_message_that_queues_nothing_starts_no_drain():
    from chalicelib.queueing.drain_starter import DrainStarter
    from tests.fakes.leases import FakeLeases

    starts = parts.Starts()
    p = parts.precompiler(
        Settings.from_env({"MOONSEND_STAGE": "test"}), FakeSqs(), drains=DrainStarter(FakeLeases(), starts)
    )
    p.handle(_batched(2, body="{% nosuchtag %}"))
    assert starts == []


@pytest.mark.parametrize("plan", ["paid", "free"])
def test_a_sender_region_the_stage_does_not_serve_is_refused_with_the_reason(plan):
    """The stage's configuration set and events topic are in its own region: email sent from another
    would go out with no event back (no bounce or complaint recorded, nothing suppressed)."""
    p, sqs, _tenants, _queues, _stats = _precompiler()
    msg = canonical()
    msg["userPlan"] = plan
    msg["sender"]["region"] = "eu-west-1"
    if plan == "free":
        msg["sender"].pop("apiKey"), msg["sender"].pop("apiSecret")
    result = p.handle(json.dumps(msg))
    assert result.queued == 0 and sqs.batches == []
    (rejected,) = result.rejected
    assert "sender.region eu-west-1 is not served by this stage, which sends from us-east-1 only" in rejected.reason
    msg["sender"]["region"] = "us-east-1"  # its own region, or none: accepted
    msg["campaign"]["id"] = "camp-2"  # (the first campaign's recipient is recorded rejected: never queued again)
    assert p.handle(json.dumps(msg)).queued == 1


def test_an_address_too_long_to_be_a_key_is_rejected_alone_and_recorded_under_a_key_of_its_own():
    """A rejected address is looked up and recorded under its record's key, never as given: DynamoDB refuses
    a sort key over 1,024 bytes, and that refusal failed the whole message, every valid recipient with it."""
    ledger = FakeLedger()  # refuses a key over DynamoDB's sizes, as the table does
    p = parts.precompiler(Settings.from_env({"MOONSEND_STAGE": "test"}), FakeSqs(), ledger=ledger)
    long_address = "a" * 1090 + "@x.example"
    msg = json.loads(_batched(3))
    msg["recipients"].insert(1, {"email": long_address})
    msg["recipients"].append({"email": "é" * 600})  # 1,200 bytes in 600 characters, not an address either
    for _ in range(2):  # the second time as SNS redelivers it: nothing queued, nothing counted again
        result = p.handle(json.dumps(msg))
    assert result.queued == 0 and result.duplicates == 3
    states = {rcpt: row.get("state") for (pk, rcpt), row in ledger.rows.items() if pk == "user-1#camp-1"}
    assert [states[f"r{i}@example.org"] for i in range(3)] == ["queued"] * 3
    (long_key,) = [k for k in states if k.startswith("a" * 64)]
    assert (
        long_key
        == long_address[:64] + f"... (1,100 bytes, sha256 {hashlib.sha256(long_address.encode()).hexdigest()[:16]})"
    )
    assert ledger.rows[("user-1#camp-1", long_key)]["reason"] == (
        "recipients[1].email: not an email address (longer than 254 characters: 1,100)"
    )
    (multibyte,) = [k for k in states if k.startswith("é")]
    assert multibyte.startswith("é" * 64 + "... (1,200 bytes") and states[multibyte] == "rejected"
    assert all(len(k.encode()) <= 1024 for k in states)


def test_a_code_point_sqs_refuses_in_a_tenants_subject_is_queued_escaped_not_refused():
    """SQS refuses U+FFFF (and U+FFFE, C0 controls) in a message: a template's literal one made the
    recipient's entry fail ('enqueue: InvalidMessageContents'), so a tenant's own text lost its email."""
    p, sqs, *_ = _precompiler()
    msg = canonical()
    msg["campaign"]["subject"] = "Hi \uffff{{ name }}\ufffe"
    msg["campaign"]["tracking"] = False
    result = p.handle(json.dumps(msg))
    assert result.queued == 1 and result.rejected == []
    (body,) = [e["MessageBody"] for _url, entries in sqs.batches for e in entries]
    assert "\uffff" not in body and "\\uffff" in body  # escaped on the wire
    assert json.loads(body)["campaign"]["subject"] == "Hi \uffffAnn\ufffe"  # the same text once read


class RetiredQueueSqs:
    """CreateQueue as SQS answers it for a queue deleted `deleted_at` (the fake clock's seconds): refused with
    QueueDeletedRecently for 60 s, then created."""

    def __init__(self, now: list[float], deleted_at: float) -> None:
        self.now = now
        self.deleted_at = deleted_at
        self.created: list[str] = []

    def create_queue(self, *, QueueName: str, Attributes: dict[str, str], tags: dict[str, str]) -> dict[str, Any]:
        if self.now[0] - self.deleted_at < 60:
            error = {
                "Code": "AWS.SimpleQueueService.QueueDeletedRecently",
                "Message": "You must wait 60 seconds after deleting a queue before you can create another with "
                "the same name.",
            }
            raise ClientError({"Error": error}, "CreateQueue")
        self.created.append(QueueName)
        return {"QueueUrl": f"https://sqs/{QueueName}"}

    def get_queue_url(self, *, QueueName: str) -> dict[str, Any]:
        raise AssertionError("not asked: the queue is created")


class Alarms:
    def put_metric_alarm(self, **_alarm: Any) -> None:
        pass


def test_a_queue_retired_seconds_ago_fails_the_event_with_nothing_recorded_and_its_retry_queues_each_once():
    """The idle-queue job removed the tenant's queue just before its next campaign: SQS refuses its name
    for 60 s. The event raises (Lambda retries it 1 and 3 minutes later), nobody is recorded rejected, and
    the retry a minute on queues every recipient once."""
    settings = Settings.from_env({"MOONSEND_STAGE": "test"})
    now = [1_000.0]
    creation = RetiredQueueSqs(now, deleted_at=now[0] - 5)
    queues = TenantQueues(settings, creation, Alarms(), FakeQueueActivity(retired=["user-1"]))
    sqs, ledger = FakeSqs(), FakeLedger()
    p = parts.precompiler(settings, sqs, queues=queues, ledger=ledger)
    with pytest.raises(QueueRecentlyRetired, match=r"retired less than 60 s ago .* the invocation is retried"):
        p.handle(_batched(5))
    assert not sqs.batches and not creation.created
    assert all(ledger.state("user-1", "camp-1", f"r{i}@example.org") is None for i in range(5))
    now[0] += 60  # Lambda's first retry, a minute later
    retried = p.handle(_batched(5))
    assert retried.queued == 5 and not retried.rejected
    assert creation.created == [tenant_queue_name(settings.resources, "user-1")]
    queued = [json.loads(e["MessageBody"])["recipient"]["email"] for _u, entries in sqs.batches for e in entries]
    assert sorted(queued) == [f"r{i}@example.org" for i in range(5)]
    assert all(ledger.state("user-1", "camp-1", f"r{i}@example.org") == "queued" for i in range(5))
