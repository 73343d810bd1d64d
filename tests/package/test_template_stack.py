"""The local stack is the packaged template, created: names, roles, IAM and the on-failure destination."""

import json
import threading
import time

import pytest
from botocore.exceptions import ClientError

from chalicelib.core import aws
from chalicelib.core.resources import FUNCTION_IDS
from infra.local.access import allowed, describe
from infra.local.identity import acting_as
from infra.local.scheduler import scheduled_event
from infra.replay import replay_failed
from tests.conftest import canonical, container_of, read_sends

_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "arn:aws:sqs:*:*:moonsend-dev-t-*"},
        {"Effect": "Allow", "Action": ["S3:GetObject"], "Resource": "arn:aws:s3:::bucket/queued/?.json"},
        {"Effect": "Deny", "Action": "sqs:SendMessage", "Resource": "arn:aws:sqs:*:*:moonsend-dev-t-blocked"},
    ],
}


def _allowed(action, resource, policy=_POLICY):
    return allowed((json.dumps(policy),), action, resource)


def test_policy_evaluation_allows_by_wildcard_and_an_explicit_deny_wins():
    assert _allowed("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:moonsend-dev-t-abc")
    assert not _allowed("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:moonsend-dev-t-blocked")
    assert not _allowed("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:moonsend-prod-t-abc")
    assert not _allowed("sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:123456789012:moonsend-dev-t-abc")


def test_policy_evaluation_reads_iam_wildcards_not_regular_expressions():
    assert _allowed("s3:getobject", "arn:aws:s3:::bucket/queued/a.json")  # actions ignore case
    assert not _allowed("s3:GetObject", "arn:aws:s3:::BUCKET/queued/a.json")  # resources do not
    assert not _allowed("s3:GetObject", "arn:aws:s3:::bucket/queued/ab.json")  # ? is one character
    assert not _allowed("s3:GetObject", "arn:aws:s3:::bucket/queued/a_json")  # . is a dot, not any character


def test_a_statement_with_a_condition_never_allows_and_always_denies():
    conditional = {
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "sqs:*",
                "Resource": "*",
                "Condition": {"Bool": {"aws:SecureTransport": "true"}},
            }
        ]
    }
    assert not _allowed("sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q", conditional)
    conditional_deny = {
        "Statement": [
            {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"},
            {
                "Effect": "Deny",
                "Action": "sqs:*",
                "Resource": "*",
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ]
    }
    assert not _allowed("sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q", conditional_deny)


def test_requests_are_described_by_their_action_and_resource_arn():
    sqs = describe(
        "sqs",
        {"HTTP_X_AMZ_TARGET": "AmazonSQS.SendMessageBatch"},
        json.dumps({"QueueUrl": "http://127.0.0.1:4566/123456789012/moonsend-dev-t-abc"}).encode(),
        "us-east-1",
        "123456789012",
    )
    assert sqs.action == "sqs:SendMessage"  # SQS authorises a batch as its single action
    assert sqs.resources == ("arn:aws:sqs:us-east-1:123456789012:moonsend-dev-t-abc",)
    invoke = describe(
        "lambda",
        {"REQUEST_METHOD": "POST", "PATH_INFO": "/2015-03-31/functions/moonsend-dev-send_emails/invocations"},
        b"{}",
        "us-east-1",
        "123456789012",
    )
    assert invoke.action == "lambda:InvokeFunction"
    assert invoke.resources == ("arn:aws:lambda:us-east-1:123456789012:function:moonsend-dev-send_emails",)
    put = describe(
        "s3",
        {"REQUEST_METHOD": "PUT", "PATH_INFO": "/moonsend-dev-payloads-1/queued/x/y.json"},
        b'{"Bucket": "elsewhere"}',  # an object's body never names the resource
        "us-east-1",
        "1",
    )
    assert (put.action, put.resources) == ("s3:PutObject", ("arn:aws:s3:::moonsend-dev-payloads-1/queued/x/y.json",))
    # One method and path, told apart by the query: a delete, and the abort of a multipart upload.
    for query, action in (("x-id=DeleteObject", "s3:DeleteObject"), ("uploadId=7", "s3:AbortMultipartUpload")):
        environ = {"REQUEST_METHOD": "DELETE", "PATH_INFO": "/b/queued/k.json", "QUERY_STRING": query}
        assert describe("s3", environ, b"", "us-east-1", "1").action == action


def test_every_function_runs_under_the_name_the_code_invokes_and_its_own_role(stack):
    r = stack.settings.resources
    created = stack.created
    assert set(created.functions) == {r.function_name(h) for h in FUNCTION_IDS.values()}
    names = {f["FunctionName"] for f in stack.client("lambda").list_functions()["Functions"]}
    assert r.function_name("send_emails") in names
    roles = {f.role_arn for f in created.functions.values()}
    assert len(roles) == len(created.functions)  # one role per function
    send = created.functions[r.function_name("send_emails")]
    arn = f"arn:aws:lambda:{stack.config.region}:{stack.config.account_id}:function:{send.name}"
    for invoker in ("send_emails", "sweep_queues", "release_scheduled", "api_handler"):
        assert allowed(created.functions[r.function_name(invoker)].policies, "lambda:InvokeFunction", arn), invoker
    assert not allowed(created.functions[r.function_name("ses_events")].policies, "lambda:InvokeFunction", arn)


def test_the_sender_may_take_back_email_it_parked_when_the_pause_was_lifted_meanwhile(stack):
    """chalicelib.send.parking puts a batch it just parked back on the queue, and deletes it from the store,
    when the pause ended while it parked: a refusal there left the batch parked until the next resume (the
    per-function environment showed it, once the sender no longer shared the API's caches)."""
    r = stack.settings.resources
    send = stack.created.functions[r.function_name("send_emails")]
    held = f"arn:aws:s3:::{r.payload_bucket.name}/scheduled/u/_held/batch.json.gz"
    assert allowed(send.policies, "s3:PutObject", held) and allowed(send.policies, "s3:DeleteObject", held)
    assert not allowed(send.policies, "s3:DeleteObject", f"arn:aws:s3:::{r.payload_bucket.name}/failed/u/c/x")


def test_environment_timeout_and_event_sources_come_from_the_template(stack):
    r = stack.settings.resources
    send = stack.runner.functions[r.function_name("send_emails")]
    created = stack.created.functions[r.function_name("send_emails")]
    assert send.timeout_s == created.timeout_s == 60 and send.memory_mb == created.memory_mb == 512
    assert created.environment["MOONSEND_STAGE"] == "local"
    assert created.environment["MOONSEND_ACCOUNT_ID"] == stack.config.account_id
    topics = {topic.rsplit(":", 1)[-1]: fn for topic, fn in stack.created.subscriptions}
    assert topics == {
        r.precompile_topic.name: r.function_name("precompile_email"),
        r.send_topic.name: r.function_name("send_emails"),
    }
    deliveries, source = sorted(stack.created.event_sources, key=lambda s: s.function_name)
    assert source.queue_arn.endswith(f":{r.events_queue.name}")
    assert source.function_name == r.function_name("ses_events")
    assert (source.batch_size, source.window_s, source.reports_failures) == (100, 5, True)
    assert deliveries.queue_arn.endswith(f":{r.webhooks_queue.name}")
    assert (deliveries.function_name, deliveries.reports_failures) == (r.function_name("deliver_webhooks"), True)
    # The ledger's stream, by the ARN CloudFormation's GetAtt gave (the table's LatestStreamArn).
    (stream,) = stack.created.stream_sources
    ledger = stack.client("dynamodb").describe_table(TableName=r.ledger_table.name)["Table"]
    assert stream.stream_arn == ledger["LatestStreamArn"]
    assert ledger["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert (stream.function_name, stream.batch_size, stream.starting_position) == (
        r.function_name("webhook_events"),
        100,
        "TRIM_HORIZON",
    )
    schedules = {fn: expr for _rule, expr, fn in stack.created.schedules}
    assert schedules[r.function_name("sweep_queues")] == "rate(1 minute)"
    assert schedules[r.function_name("reconcile_dead_letters")] == "rate(15 minutes)"
    assert schedules[r.function_name("recount_campaigns")] == "rate(5 minutes)"
    assert all(
        f.on_failure and f.on_failure.endswith(r.failed_invocations_queue.name)
        for f in stack.runner.functions.values()
        if f.handler_name not in ("ses_events", "webhook_events", "deliver_webhooks")
    )


def test_the_platforms_configuration_set_publishes_to_the_events_topic_under_the_name_the_functions_send_with(
    stack,
):
    """The template's event destination names its set by `Ref`, which on AWS gives the set's name (the
    CloudFormation reference for AWS::SES::ConfigurationSet). Registered under anything else, the platform's
    own sends (the free plan) would publish no events: no Send event to close a died drainer's window, no
    bounce to suppress."""
    r = stack.settings.resources
    sesv2 = stack.client("sesv2")
    destinations = sesv2.get_configuration_set_event_destinations(ConfigurationSetName=r.configuration_set)
    (destination,) = destinations["EventDestinations"]
    assert destination["SnsDestination"]["TopicArn"].endswith(f":{r.events_topic.name}")
    assert {"SEND", "BOUNCE", "COMPLAINT", "DELIVERY", "REJECT"} <= set(destination["MatchingEventTypes"])
    assert stack.created.physical["SesConfigurationSet"] == r.configuration_set


def _role(stack, handler):
    return stack.runner.functions[stack.settings.resources.function_name(handler)].role


def _refused(stack, handler, action, call):
    fn = stack.settings.resources.function_name(handler)
    with acting_as(_role(stack, handler)), pytest.raises(ClientError) as exc:
        call()
    # Deliberate: the session's end checks that nothing else was refused (other functions run meanwhile).
    mine = [d for d in stack.access.denied if d[:2] == (fn, action)]
    assert mine, f"{fn} was not refused {action}"
    for d in mine:
        stack.access.denied.remove(d)
    return exc.value.response["Error"]


def test_a_call_outside_the_functions_policy_is_refused_as_aws_refuses_it(stack, uid):
    r = stack.settings.resources
    region = stack.config.region
    # The handlers' own clients (chalicelib.core.aws): no keys of their own, so each call signs as its caller.
    sqs = aws.client("sqs", region)
    url = sqs.create_queue(QueueName=f"{r.tenant_queue_prefix}{uid}")["QueueUrl"]
    err = _refused(stack, "ses_events", "sqs:SendMessage", lambda: sqs.send_message(QueueUrl=url, MessageBody="x"))
    assert err["Code"] == "AccessDenied"
    assert f"assumed-role/{_role(stack, 'ses_events').role_arn.rsplit('/', 1)[-1]}/" in err["Message"]
    assert f"sqs:SendMessage on resource: arn:aws:sqs:{stack.config.region}" in err["Message"]
    lam = aws.client("lambda", region)
    err = _refused(
        stack,
        "ses_events",
        "lambda:InvokeFunction",
        lambda: lam.invoke(FunctionName=r.function_name("send_emails"), InvocationType="Event"),
    )
    assert err["Code"] == "AccessDeniedException"
    sns = aws.client("sns", region)
    err = _refused(
        stack,
        "precompile_email",
        "sns:Publish",
        lambda: sns.publish(TopicArn=stack.topic_arns[r.send_topic.name], Message="{}"),
    )
    assert err["Code"] == "AuthorizationError"
    ddb = aws.client("dynamodb", region)
    err = _refused(
        stack,
        "precompile_email",
        "dynamodb:PutItem",
        lambda: ddb.put_item(TableName=r.leases_table.name, Item={"queue": {"S": f"q-{uid}"}}),
    )
    assert err["Code"] == "AccessDeniedException"
    s3 = aws.client("s3", region)
    err = _refused(
        stack, "sweep_queues", "s3:GetObject", lambda: s3.get_object(Bucket=r.payload_bucket.name, Key="queued/x")
    )
    assert err["Code"] == "AccessDenied"
    # The same calls as the operator (no role) are answered.
    sqs.send_message(QueueUrl=url, MessageBody="x")
    sqs.delete_queue(QueueUrl=url)


def test_a_precompile_failing_every_try_goes_to_the_on_failure_queue_and_replays_once(stack, uid, monkeypatch):
    r = stack.settings.resources
    user, campaign = f"fail-{uid}", f"c-{uid}"
    precompiler = container_of(stack, "precompile_email").precompiler
    real = precompiler.handle

    def broken(raw):
        if campaign in raw:
            raise RuntimeError("injected: precompile down")
        return real(raw)

    monkeypatch.setattr(precompiler, "handle", broken)
    recipients = [{"email": f"r{i}@example.org", "metadata": {"name": f"R{i}"}} for i in range(3)]
    msg = canonical(userId=user, campaign={"id": campaign, "subject": "Hi", "body": "<p>Hi {{ name }}</p>"})
    msg.pop("recipient")
    msg["recipients"] = recipients
    msg["sender"] = stack.paid_sender(user, rate=10, ses_max_rate=20)
    stack.client("sns").publish(TopicArn=stack.topic_arns[r.precompile_topic.name], Message=json.dumps(msg))
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=r.failed_invocations_queue.name)["QueueUrl"]
    deadline = time.monotonic() + 30
    record = None
    while record is None and time.monotonic() < deadline:
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", []):
            body = json.loads(m["Body"])
            if campaign in json.dumps(body["requestPayload"]):
                record = body
        time.sleep(0.3)
    assert record is not None, "no invocation record on the on-failure queue"
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 3
    assert record["requestContext"]["functionArn"].endswith(f":function:{r.function_name('precompile_email')}:$LATEST")
    assert record["responsePayload"]["errorType"] == "RuntimeError"
    assert "precompile down" in record["responsePayload"]["errorMessage"]
    assert not [s for s in read_sends(stack.config.outbox) if s.get("campaignId") == campaign]

    monkeypatch.setattr(precompiler, "handle", real)  # the fault is fixed
    sqs.send_message(QueueUrl=url, MessageBody="not an invocation record")  # reported, left, never raises
    report = replay_failed(sqs, stack.client("lambda"), url, only=r.function_name("precompile_email"))
    assert any(x.condition == "RetriesExhausted" for x in report.replayed)
    assert len(report.unreadable) == 1
    assert stack.wait_until_drained(60)
    replay_failed(sqs, stack.client("lambda"), url, only=r.function_name("precompile_email"))  # twice: harmless
    assert stack.wait_until_drained(60)
    sent = [s["to"] for s in read_sends(stack.config.outbox) if s.get("campaignId") == campaign]
    assert sorted(sent) == sorted(x["email"] for x in recipients)  # each recipient once


def test_the_scheduled_functions_run_through_the_runtime_as_their_roles_with_no_call_refused(stack, uid):
    r = stack.settings.resources
    for handler in ("sweep_queues", "release_scheduled", "retire_idle_queues", "reconcile_dead_letters"):
        fn = stack.runner.functions[r.function_name(handler)]
        before = _calls_of(stack, fn.function_name)
        denied_before = len(stack.access.denied)
        stack.runner.invoke(
            fn, scheduled_event(f"arn:aws:events:::rule/{uid}", stack.config.account_id, stack.config.region)
        )
        assert _calls_of(stack, fn.function_name) > before, f"{handler} made no AWS call as its role"
        assert [d for d in stack.access.denied[denied_before:] if d[0] == fn.function_name] == []


def _calls_of(stack, function_name):
    return sum(n for k, n in list(stack.access.allowed_calls.items()) if k.startswith(f"{function_name} "))


def test_lambda_sends_a_failed_event_to_the_destination_as_the_functions_role(stack, uid):
    """The invocation record is sent with the function's own credentials: a role without the grant is refused."""
    from infra.local.lambda_runtime import LocalFunction

    r = stack.settings.resources
    api = stack.runner.functions.get(r.function_name("api_handler"))
    assert api is None  # the API is served by chalice local; its role has no on-failure grant
    role = stack.created.functions[r.function_name("api_handler")]
    queue_arn = stack.runner.functions[r.function_name("precompile_email")].on_failure

    def fails(_event, _context):
        raise RuntimeError("always")

    ungranted = LocalFunction(
        "broken", r.function_name("api_handler"), fails, role=stack.roles[role.name], on_failure=queue_arn
    )
    done = threading.Event()
    stack.runner.invoke_async(ungranted, {"uid": uid}, lambda _ok: done.set())
    assert done.wait(60)  # its tries, then its record sent (or refused) on failure
    refused = [d for d in stack.access.denied if d[:2] == (role.name, "sqs:SendMessage")]
    assert refused and refused[0][2] == queue_arn
    for d in refused:
        stack.access.denied.remove(d)


def test_each_function_sees_only_its_own_environment_as_on_lambda(stack):
    """One process runs every function here, but a variable the template gives one function is missing in
    another's invocation, as on Lambda: run_digest once lacked the API's URL and linked to a local host."""
    import os

    from infra.local.lambda_runtime import LocalFunction

    r = stack.settings.resources
    envs = stack.environments
    digest, sweep = envs[r.function_name("run_digest")], envs[r.function_name("sweep_queues")]
    assert digest["MOONSEND_API_URL"] == stack.api_url  # the template's variable, pointed at the local API
    assert "MOONSEND_API_URL" not in sweep and "MOONSEND_API_URL" not in envs[r.function_name("api_handler")]
    assert all(e["MOONSEND_STAGE"] == "local" and e["AWS_ENDPOINT_URL"] == stack.endpoint for e in envs.values())
    assert all(e["MOONSEND_WEBHOOK_ALLOW_LOOPBACK"] == "true" for e in envs.values())  # the stack's, not the template's

    def probe(event, context):
        return dict(os.environ)

    seen = stack.runner.invoke(LocalFunction("probe", r.function_name("sweep_queues"), probe, environment=sweep), {})
    assert seen["AWS_LAMBDA_FUNCTION_NAME"] == r.function_name("sweep_queues")
    assert "MOONSEND_API_URL" not in seen and "AWS_SECRET_ACCESS_KEY" not in seen
    assert os.environ["MOONSEND_API_URL"] == stack.api_url  # outside an invocation: the process's own


def test_the_recount_runs_through_the_runtime_as_its_role_and_corrects_a_settled_campaign(stack, uid):
    # A campaign whose last change is 40 minutes old, its `sent` count lost, and its note as the stream left it:
    # the deployed schedule's function reads both, corrects the counter and removes the note, every call allowed.
    from chalicelib import wiring
    from chalicelib.stores.ledger_model import LedgerModel
    from chalicelib.stores.tables import bound

    r, c = stack.settings.resources, wiring.container()
    user, long_ago_ms = f"u{uid}", int(time.time() * 1000) - 40 * 60 * 1000
    ledger = bound(LedgerModel, r.ledger_table.name, stack.config.region)
    ledger(f"{user}#c1", "a@example.org", state="sent", email="a@example.org", updated_at=long_ago_ms).save()
    c.recounts.note([f"{user}#c1"], now_ms=long_ago_ms)
    fn = stack.runner.functions[r.function_name("recount_campaigns")]
    denied_before = len(stack.access.denied)
    stack.runner.invoke(
        fn, scheduled_event(f"arn:aws:events:::rule/{uid}", stack.config.account_id, stack.config.region)
    )
    assert [d for d in stack.access.denied[denied_before:] if d[0] == fn.function_name] == []
    counts = c.stats.read(user, "c1")
    assert counts is not None and counts["sent"] == 1
    assert [n for n in c.recounts.settled(10**15) if n.user_id == user] == []
