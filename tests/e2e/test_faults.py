"""Fault injection in the local stack, and the pipeline under it: each recipient sent once, all recorded."""

from __future__ import annotations

import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from chalicelib import wiring
from infra.local.faults import FaultPlan, Faults
from infra.local.lambda_runtime import FunctionCrashed, FunctionRunner, LocalFunction
from infra.local.ses import Refused
from infra.local.sns_delivery import accepted_publications
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import eventually, free_tenant, read_sends
from tests.e2e.test_pipeline_e2e import _tenant

TOPIC = "arn:aws:sns:us-east-1:123456789012:moonsend-local-PrecompileEmail"


def test_a_publish_reaches_subscribers_with_the_message_id_moto_gave_it_and_its_attributes():
    body = (
        f"Action=Publish&Version=2010-03-31&TopicArn={TOPIC}&Message=hello%20there&Subject=Hi"
        "&MessageAttributes.entry.1.Name=kind&MessageAttributes.entry.1.Value.DataType=String"
        "&MessageAttributes.entry.1.Value.StringValue=test"
    ).encode()
    response = (
        b'<PublishResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><PublishResult>'
        b"<MessageId>m-1</MessageId></PublishResult></PublishResponse>"
    )
    [pub] = accepted_publications(body, response)
    assert (pub.topic_arn, pub.message, pub.message_id, pub.subject) == (TOPIC, "hello there", "m-1", "Hi")
    assert pub.attributes == {"kind": {"Type": "String", "Value": "test"}}


def test_only_the_entries_of_a_publish_batch_that_sns_accepted_are_delivered():
    body = (
        f"Action=PublishBatch&TopicArn={TOPIC}"
        "&PublishBatchRequestEntries.member.1.Id=a&PublishBatchRequestEntries.member.1.Message=one"
        "&PublishBatchRequestEntries.member.2.Id=b&PublishBatchRequestEntries.member.2.Message=two"
    ).encode()
    response = (
        b"<PublishBatchResponse><PublishBatchResult><Successful><member><Id>b</Id><MessageId>m-b</MessageId>"
        b"</member></Successful><Failed><member><Id>a</Id><Code>x</Code></member></Failed>"
        b"</PublishBatchResult></PublishBatchResponse>"
    )
    assert [(p.message, p.message_id) for p in accepted_publications(body, response)] == [("two", "m-b")]


def test_a_crashed_invocation_runs_no_except_block_and_is_retried_as_an_error():
    caught, calls = [], []

    def handler(event: dict[str, Any], context: Any) -> str:
        calls.append(1)
        try:
            if len(calls) == 1:
                raise FunctionCrashed("killed")
        except Exception:  # what a handler's own error handling would do: it must not see a kill
            caught.append(1)
        return "ok"

    fn = LocalFunction("h", "moonsend-local-h", handler, timeout_s=5)
    runner = FunctionRunner({fn.function_name: fn}, "us-east-1", "123456789012", retry_delay_s=0.01)
    done: list[bool] = []
    runner.invoke_async(fn, {}, on_done=done.append)
    assert runner.wait_idle(5)
    runner.shutdown()
    assert (len(calls), caught, done, runner.stats.errors) == (2, [], [True], 1)


def test_an_injected_ses_500_is_answered_as_ses_answers_an_internal_failure(stack, uid):
    key = f"AKIAE{uid}".upper()
    sender = _tenant(stack, uid, rate=5, ses_rate=5)["emailAddress"]
    stack.ses.fault = lambda k: Refused("transient", "Internal failure.") if k == key else None
    try:
        ses = stack.client("sesv2", access_key=key, secret_key=f"secret-{uid}")
        with pytest.raises(ClientError) as err:
            ses.send_email(
                FromEmailAddress=sender,
                Destination={"ToAddresses": ["a@example.org"]},
                Content={"Simple": {"Subject": {"Data": "s"}, "Body": {"Text": {"Data": "b"}}}},
            )
    finally:
        stack.ses.fault = None
    assert err.value.response["Error"]["Code"] == "InternalFailure"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500


@pytest.mark.e2e
def test_under_ses_errors_duplicate_deliveries_and_killed_precompiles_each_recipient_is_sent_once(stack, uid):
    plan = FaultPlan(
        seed=11,
        ses_transient=0.1,
        ses_burst=0.03,
        burst_s=1.0,
        sns_duplicate=0.5,
        sqs_duplicate=0.2,
        drainer_kill=0.0,  # a killed drain's messages come back after the queue's 300 s: the soak covers it
        precompile_kill=0.6,
        deadline=0.0,
        delete_throttle=0.0,  # its messages come back after the queue's 300 s, as a killed drain's: the soak's
        receive_throttle=0.3,  # escapes the drain: its chain hands on, and the queue drains on
    )
    faults = Faults(plan, "moonsend-local")
    users = {f"fa-{uid}": 20.0, f"fb-{uid}": 5.0}
    expected: dict[str, set[str]] = {}
    faults.install(stack)
    try:
        sns = stack.client("sns")
        for k, (user, rate) in enumerate(users.items()):
            sender = _tenant(stack, f"{uid}{k}", rate=rate, ses_rate=rate * 2)
            people = [{"email": f"r{i}@{user}.example", "metadata": {"name": f"N{i}"}} for i in range(40)]
            expected[user] = {p["email"] for p in people}
            spec = CampaignSpec(user, sender, "Hi {{ name }}", "<p>Dear {{ name }}</p>", "c1")
            publish(sns, stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, people, per_message=8))
        # The bound is the harness's, not a promise: with 30% of receives throttled, a drain of an empty queue
        # (two empty polls to finish) fails half the time, and its chain's waits double to a minute (2 + 4 +
        # ... + 60 s: two minutes in six failures), once per chain a late retry of a killed precompile starts.
        drained = stack.wait_until_drained(420, settle_s=2.0)
        assert drained, (
            {k: v for k, v in stack.queue_depths().items() if sum(v)},
            stack.runner.inflight,
            faults.injected,
        )
    finally:
        faults.uninstall()
    sends = [s for s in read_sends(stack.config.outbox) if s["userId"] in users]
    for user, addresses in expected.items():
        got = sorted(s["to"] for s in sends if s["userId"] == user)
        assert got == sorted(addresses), f"{user}: each recipient exactly once"
        entries = list(wiring.container().ledger.entries(user, "c1"))
        assert {e.email for e in entries} == addresses and {e.state for e in entries} == {"sent"}
    for kind in (
        "ses transient error",
        "sns duplicate delivery",
        "sqs duplicate delivery",
        "drain's receive throttled",
    ):
        assert faults.injected[kind] > 0, (kind, faults.injected)
    assert faults.injected["precompile killed before enqueue"] + faults.injected["precompile killed after enqueue"]


def test_a_drain_failed_by_a_throttled_call_is_drained_again_within_seconds_not_after_its_lease(stack, uid):
    # Past the SDK's retries, a throttled SQS call escapes the drain. The free queue is every free tenant's:
    # its lease held for the invocation's time and grace (16 minutes on AWS) would stop all their email.
    from botocore.client import BaseClient

    real_call = BaseClient._make_api_call
    thrown: list[str] = []

    def call(client, operation, params):
        if operation == "ReceiveMessage" and str(params.get("QueueUrl", "")).endswith("-free") and not thrown:
            thrown.append(operation)
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, operation)
        return real_call(client, operation, params)

    user = f"thr-{uid}"
    sender = free_tenant(stack, user)
    BaseClient._make_api_call = call  # type: ignore[method-assign]
    try:
        spec = CampaignSpec(user, sender, "Hi", "<p>Hi</p>", "c1")
        people = [{"email": f"r{i}@{user}.example"} for i in range(10)]
        publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, people))
        started = time.monotonic()
        assert eventually(lambda: len([s for s in read_sends(stack.config.outbox) if s["userId"] == user]) == 10, 60)
    finally:
        BaseClient._make_api_call = real_call  # type: ignore[method-assign]
    assert thrown == ["ReceiveMessage"]
    assert time.monotonic() - started < 30


def test_a_long_ses_throttle_of_the_platform_account_loses_no_free_email_and_spends_no_cap_twice(stack, uid):
    # Every send refused with SES's throttling answer for 15 s: each free tenant's email is put back with a
    # growing delay, none lost or sent twice; the daily cap counted each email once (when it was queued),
    # the guard's count of sends is the sends made; the small tenant is not held behind the large one.
    big, small = f"thb-{uid}", f"ths-{uid}"
    senders = {big: free_tenant(stack, big), small: free_tenant(stack, small)}
    sizes = {big: 40, small: 8}
    throttled_until = time.monotonic() + 15
    stack.ses.fault = lambda _key: (
        Refused("rate", "Maximum sending rate exceeded.") if (time.monotonic() < throttled_until) else None
    )
    try:
        sns = stack.client("sns")
        for user, n in sizes.items():
            spec = CampaignSpec(user, senders[user], "Hi", "<p>Hi</p>", "c1")
            people = [{"email": f"r{i}@{user}.example"} for i in range(n)]
            publish(sns, stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, people))

        def sends(user):
            return [s for s in read_sends(stack.config.outbox) if s["userId"] == user]

        assert eventually(lambda: all(len(sends(u)) >= n for u, n in sizes.items()), 180)
        assert stack.wait_until_drained(60)
    finally:
        stack.ses.fault = None
    c = wiring.container()
    for user, n in sizes.items():
        assert sorted(s["to"] for s in sends(user)) == sorted(f"r{i}@{user}.example" for i in range(n))
        assert c.daily_cap.used(user) == n  # queued once each: the throttled tries took nothing more
        assert eventually(lambda u=user, k=n: c.reputation.window(u).sent == k, 30), c.reputation.window(user)
    # Fair: the small tenant's email is not queued behind all of the large one's (both were put back with
    # the same growing delays): it is done by the time the large one is, give or take a send or two.
    assert max(s["ts"] for s in sends(small)) <= max(s["ts"] for s in sends(big)) + 2000
