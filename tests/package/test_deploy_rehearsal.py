"""A deploy rehearsal: `moonsend deploy` of the dev stage to the local endpoint, through the code path it takes
to AWS (bundle and templates uploaded, change sets made from the templates' URLs), then the operator's
commands as an operator runs them, then a destroy and a second deploy.

Each command runs in a process of its own with only what an operator's shell has: credentials from the
SDK's chain, a region, and (since this is not AWS) the endpoint. moonsend sets no endpoint, account or
stage variable of its own. The local endpoint refuses what CloudFormation refuses (a template over 51,200
bytes inline) and expands SAM as CloudFormation does (infra.local.cfn_transform).
"""

from __future__ import annotations

import html
import http.cookiejar
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from chalicelib.core.contract import QueuedEmail, Sender
from chalicelib.core.resources import FUNCTION_IDS, resources_for
from chalicelib.stores.tenant_secrets import TenantSecrets
from chalicelib.stores.tenants import TenantRegistry
from infra.local.platform import PLATFORM_ACCESS_KEY, PLATFORM_SECRET_KEY

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
STAGE = "dev"


def _operator(stack, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A command as an operator runs it: the credentials and region of a shell, nothing a deployed function is
    given, and (since this is no AWS) the endpoint named with `--endpoint`, as a deployed stage requires."""
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("MOONSEND_", "AWS_"))}
    shell.update(
        AWS_ACCESS_KEY_ID=PLATFORM_ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=PLATFORM_SECRET_KEY,
        AWS_DEFAULT_REGION="us-east-1",
        **(env or {}),
    )
    return subprocess.run(
        [sys.executable, "-m", "infra", *args, "--endpoint", stack.endpoint],
        cwd=ROOT,
        env=shell,
        capture_output=True,
        text=True,
        timeout=600,
    )


class _OpsPage:
    """`moonsend ops` for the deployed stage, as an operator starts it from a shell, and a browser's requests to
    it: the link signs in, each action is confirmed on its page, then its form is sent with the page's token."""

    def __init__(self, stack, stage: str) -> None:
        shell = {k: v for k, v in os.environ.items() if not k.startswith(("MOONSEND_", "AWS_"))}
        shell.update(AWS_ACCESS_KEY_ID=PLATFORM_ACCESS_KEY, AWS_SECRET_ACCESS_KEY=PLATFORM_SECRET_KEY)
        shell["AWS_DEFAULT_REGION"] = "us-east-1"
        command = [sys.executable, "-m", "infra", "ops", "--stage", stage, "--endpoint", stack.endpoint, "--port", "0"]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.proc.stdout is not None
        link = self.proc.stdout.readline()
        assert link.startswith("operator's page: http://127.0.0.1:"), link + self.proc.stdout.read()
        cookies = http.cookiejar.CookieJar()
        self.http = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(cookies))
        self.origin = link.split(" ")[-1].strip().split("/sign-in", 1)[0]
        signed_in = self.http.open(link.split(" ")[-1].strip(), timeout=30)
        self.base = signed_in.geturl().rstrip("/")  # the session's own path

    def get(self, path: str) -> str:
        return self.http.open(self.base + path, timeout=60).read().decode()

    def act(self, **query: str) -> str:
        """The action confirmed, then taken; the page it leads to (its answer in the role=status line)."""
        confirm = self.get("/confirm?" + urllib.parse.urlencode(query))
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm)
        assert token, confirm
        fields = {"reason": "rehearsal", **query, "csrf": token[1]}
        request = urllib.request.Request(
            self.base + "/act", data=urllib.parse.urlencode(fields).encode(), headers={"Origin": self.origin}
        )
        page = self.http.open(request, timeout=60).read().decode()
        said = re.search(r'role="status">(.*?)</p>', page, re.S)
        assert said, page
        return html.unescape(re.sub(r"<[^>]+>", "", said[1]))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _ops_page_acts_as_the_cli_does(stack, user: str) -> None:
    """Every action of the operator's page on the deployed stage, from an operator's shell only; the CLI's
    actions before it are in the page's operator log beside the page's own."""
    page = _OpsPage(stack, STAGE)
    try:
        shown = page.get("/")
        assert user in shown and "moonsend-dev-free" in shown
        assert "resume a tenant" in shown and "the CLI" in shown  # `moonsend tenant resume`, recorded
        assert page.act(action="pause", tenant=user, owner="operator").startswith("Done: pause a tenant")
        assert "paused by an operator: rehearsal" in _ok(
            _operator(stack, "tenant", "show", "--user", user, "--stage", STAGE)
        )
        assert page.act(action="resume", tenant=user, owner="all").startswith("Done: resume a tenant")
        assert page.act(action="replay").startswith("Done: replay failed invocations")
        assigned = page.act(action="assign-from", tenant=user, address=f"ops@{user}.example")
        assert assigned.startswith("Done: assign a free-plan From address") and f"ops@{user}.example" in assigned
        missing = page.act(action="cancel", tenant=user, campaign="c-none")
        assert missing.startswith("Not done: cancel a campaign") and "no campaign" in missing
        log = page.get("/")
        assert log.count("this page") >= 5 and "arn:aws:sts::123456789012:user/" in log
    finally:
        page.close()


def _output(stack, key: str) -> str:
    outputs = stack.client("cloudformation").describe_stacks(StackName=f"moonsend-{STAGE}")["Stacks"][0]["Outputs"]
    return next(o["OutputValue"] for o in outputs if o["OutputKey"] == key)


def _ok(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def _status(stack, name: str) -> str | None:
    try:
        return stack.client("cloudformation").describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
    except ClientError:
        return None


def _key_of(stack, alias: str) -> str | None:
    """The id of the KMS key the alias names (None: no such alias)."""
    aliases = stack.client("kms").list_aliases()["Aliases"]
    return next((a.get("TargetKeyId") for a in aliases if a["AliasName"] == alias), None)


def _key_state(key_id: str) -> str:
    """The key's state, read in moto: its DescribeKey fails on a key CloudFormation made (moto keeps that
    key's policy as an object and parses it as a string), where AWS's answers."""
    from moto.kms.models import kms_backends

    return kms_backends["123456789012"]["us-east-1"].keys[key_id].key_state


def _as_first_messages_would(r, messages: list[dict]) -> None:
    """What the stage's precompile_email would do with these messages (no function runs in a rehearsed
    stage): the app's own code, under the dev stage's settings, in this process."""
    from chalicelib.core.config import Settings
    from chalicelib.wiring import Container

    env = {
        "MOONSEND_STAGE": STAGE,
        "MOONSEND_ACCOUNT_ID": "123456789012",
        "AWS_REGION": "us-east-1",
        "MOONSEND_API_URL": "https://restapi.execute-api.us-east-1.amazonaws.com/api",
    }
    topic = Container(Settings.from_env(env)).precompile_topic
    for message in messages:
        topic.handle(json.dumps(message))


def _every_operator_command(stack, r, user: str) -> None:
    """Every command docs/operations.md, docs/digests.md and docs/webhooks.md give an operator, on the deployed
    stage, from a shell that has only the operator's credentials: none may need what only a function is told."""
    sender = {"ratePerSecond": "1", "emailAddress": f"news@{user}.example", "fromName": ""}
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 7 * 24 * 3600))
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    stack.client("sesv2").create_email_identity(EmailIdentity=sender["emailAddress"])  # the platform's account
    _as_first_messages_would(
        r,
        [
            {
                "userId": user,
                "userPlan": "free",
                "sender": sender,
                "campaign": {"id": "later", "subject": "Hi", "body": "<p>Hi</p>", "scheduledAt": later},
                "recipient": {"email": "ann@example.org"},
            },
            {
                "userId": user,
                "userPlan": "free",
                "sender": sender,
                "digest": {
                    "id": "weekly",
                    "subject": "{{ items_total }} new",
                    "body": "<p>{% for item in items %}{{ item.data.t }}{% endfor %}</p>",
                    "schedule": "cron(0 13 ? * WED *)",
                    "window": "P7D",
                },
                "recipient": {"email": "bob@example.org"},
                "item": {"id": "i1", "type": "Note", "at": at, "data": {"t": "one"}},
            },
        ],
    )
    stage = ("--stage", STAGE)
    who = ("--user", user, *stage)
    campaign = (*who, "--campaign", "later")

    # Campaigns and their recipients.
    assert "later" in _ok(_operator(stack, "campaign", "list", *who))
    assert "later" in _ok(_operator(stack, "campaign", "show", *campaign))
    assert "ann@example.org\tscheduled" in _ok(_operator(stack, "recipients", *campaign, "--state", "scheduled"))
    assert "ann@example.org,scheduled" in _ok(_operator(stack, "recipients", *campaign, "--csv"))
    assert "more:" not in _operator(stack, "recipients", *campaign, "--limit", "1").stderr
    assert "later" in _ok(_operator(stack, "status", *who))
    sooner = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 6 * 24 * 3600))
    assert "rescheduled: 1 recipient(s)" in _ok(_operator(stack, "campaign", "schedule", *campaign, "--at", sooner))
    assert "paused" in _ok(_operator(stack, "campaign", "pause", *campaign))
    assert "resumed" in _ok(_operator(stack, "campaign", "resume", *campaign))
    assert "0 failed recipient(s) queued again" in _ok(_operator(stack, "campaign", "retry-failed", *campaign))
    assert "recorded cancelled" in _ok(_operator(stack, "campaign", "cancel", *campaign))
    _ok(_operator(stack, "index-campaigns", *stage))
    assert "now count them" in _ok(_operator(stack, "count-released", *stage))
    assert "moved under parked/" in _ok(_operator(stack, "keep-parked", *stage))

    # A digest: its status, and a run now, in the operator's process, with links to the stage's own API.
    assert "recipients pending: 1 of 1" in _ok(_operator(stack, "digest", "status", *who, "--digest", "weekly"))
    ran = _ok(_operator(stack, "digest", "run", *who, "--digest", "weekly"))
    assert "emails: 1" in ran, ran
    sqs = stack.client("sqs")
    free = sqs.get_queue_url(QueueName=r.free_queue.name)["QueueUrl"]
    (queued,) = sqs.receive_message(QueueUrl=free, MaxNumberOfMessages=10)["Messages"]
    mime = QueuedEmail.from_json(queued["Body"]).mime or ""
    assert "<https://restapi.execute-api.us-east-1.amazonaws.com/api/unsubscribe/" in mime  # the stack's output
    sqs.delete_message(QueueUrl=free, ReceiptHandle=queued["ReceiptHandle"])  # no send_emails runs here

    # Suppressions, events, webhooks.
    assert "1 address(es) added" in _ok(_operator(stack, "suppression", "add", "cy@example.org", *who))
    assert "cy@example.org" in _ok(_operator(stack, "suppression", "list", *who))
    _ok(_operator(stack, "suppression", "remove", "cy@example.org", *who))
    _ok(_operator(stack, "events", *who))
    added = _ok(_operator(stack, "webhook", "add", *who, "--url", "https://93.184.215.14/moonsend"))  # no DNS here
    endpoint_id = json.loads(added)["id"]
    assert endpoint_id in _ok(_operator(stack, "webhook", "list", *who))

    # The tenant's standing, keys and From addresses; the stage's keys and secrets.
    assert user in _ok(_operator(stack, "tenant", "show", *who))
    assert "no keys registered" in _ok(_operator(stack, "tenant", "keys", *who))
    paused = _ok(_operator(stack, "tenant", "pause", *who, "--owner", "tenant", "--reason", "migration"))
    assert "paused" in paused
    _ok(_operator(stack, "tenant", "resume", *who, "--owner", "tenant"))
    assigned = _ok(_operator(stack, "tenant", "assign-from", *who, "--address", f"hello@{user}.example"))
    assert f"hello@{user}.example" in assigned
    audit = _operator(stack, "tenant", "audit-from", *stage)
    assert audit.returncode in (0, 1), audit.stderr  # 1: claims without an identity of their own are listed
    _ok(_operator(stack, "tenant", "audit-from", *stage, "--fix"))
    assert "tenant(s) had SES secrets stored in the clear" in _ok(_operator(stack, "seal-keys", *stage))
    keys = {"MOONSEND_NEW_API_KEY": "AKIAREHEARSALNEW0001", "MOONSEND_NEW_API_SECRET": "rehearsal-new-secret"}
    _ok(_operator(stack, "tenant", "move-keys", *who, env=keys))  # sealed with the stage's key, in KMS
    assert "AKIA...0001" in _ok(_operator(stack, "tenant", "keys", *who))
    assert "k0" in _ok(_operator(stack, "link-key", "list", *stage))
    rotated = _ok(_operator(stack, "link-key", "rotate", *stage))
    assert "k1" in rotated, rotated
    assert "0 failed invocation(s) replayed" in _ok(_operator(stack, "replay-failed", *stage))
    _ops_page_acts_as_the_cli_does(stack, user)
    webhook_removed = _operator(stack, "webhook", "remove", *who, "--id", endpoint_id, "--no-wait")
    assert webhook_removed.returncode == 0, webhook_removed.stderr


def test_deploy_operate_destroy_and_deploy_again_as_an_operator_would(stack, uid):
    r = resources_for("moonsend", STAGE, "123456789012")
    user = f"rehearsal-{uid}"
    try:
        said = _ok(_operator(stack, "deploy", "--stage", STAGE, "--operator-email", "ops@example.org"))
        assert "deployed stacks moonsend-dev-data and moonsend-dev" in said
        # The stage's alarms, their topic's e-mail subscription (the deploy parameter) and its dashboard.
        alerts = stack.client("sns").list_subscriptions_by_topic(TopicArn=_output(stack, "OperatorAlertsTopicArn"))
        assert [(s["Protocol"], s["Endpoint"]) for s in alerts["Subscriptions"]] == [("email", "ops@example.org")]
        watch = stack.client("cloudwatch").describe_alarms(AlarmNamePrefix=f"{r.prefix}-")["MetricAlarms"]
        assert {f"{r.prefix}-send-errors", f"{r.prefix}-oldest-queued-email", f"{r.prefix}-bounce-rate"} <= {
            a["AlarmName"] for a in watch
        }
        assert stack.client("cloudwatch").get_dashboard(DashboardName=r.prefix)["DashboardBody"]
        assert _status(stack, "moonsend-dev-data") == _status(stack, "moonsend-dev") == "CREATE_COMPLETE"
        names = {f["FunctionName"] for f in stack.client("lambda").list_functions()["Functions"]}
        assert {r.function_name(h) for h in FUNCTION_IDS.values()} <= names
        # What moto cannot create was made after the change set ran: the key of links, the queue alarm.
        stack.client("secretsmanager").describe_secret(SecretId=r.link_secret_name)
        alarms = stack.client("cloudwatch").describe_alarms(AlarmNamePrefix=r.free_queue.name)["MetricAlarms"]
        assert [a["AlarmName"] for a in alarms] == [f"{r.free_queue.name}-not-empty"]

        # A tenant, as its first message would register it (no function runs in a rehearsed stage).
        secrets = TenantSecrets.of(r.tenant_secrets_alias, "us-east-1")  # a free tenant: never used
        TenantRegistry(r.tenants_table.name, "us-east-1", secrets).accept(
            user, "free", Sender(f"news@{user}.example", "", None, None, None, 1.0), lambda _s: None
        )
        assert "new API key" in _ok(_operator(stack, "tenant", "key", "--user", user, "--stage", STAGE))
        assert "paused" in _ok(_operator(stack, "tenant", "pause", "--user", user, "--stage", STAGE))
        _ok(_operator(stack, "tenant", "resume", "--user", user, "--stage", STAGE))
        assert r.free_queue.name in _ok(_operator(stack, "status", "--stage", STAGE))
        _every_operator_command(stack, r, user)
        listed = _operator(stack, "recipients", "--user", user, "--campaign", "c1", "--stage", STAGE)
        assert _ok(listed) == "" and "0 recipient(s)" in listed.stderr
        assert "0 failed invocation(s) replayed" in _ok(_operator(stack, "replay-failed", "--stage", STAGE))
        _ok(_operator(stack, "webhook", "list", "--user", user, "--stage", STAGE))
        assert "k0" in _ok(_operator(stack, "link-key", "list", "--stage", STAGE))
        missing = _operator(stack, "campaign", "pause", "--user", user, "--campaign", "c1", "--stage", STAGE)
        assert missing.returncode == 1 and f"no campaign 'c1' of '{user}'" in missing.stderr

        # Email still queued is named, and the destroy refused, until it is drained or discarded on purpose.
        sqs = stack.client("sqs")
        free = sqs.get_queue_url(QueueName=r.free_queue.name)["QueueUrl"]
        sqs.send_message(QueueUrl=free, MessageBody="{}")
        refused = _operator(stack, "destroy", "--stage", STAGE, "--yes")
        assert refused.returncode == 1 and _status(stack, "moonsend-dev") == "CREATE_COMPLETE"
        assert f"queue {r.free_queue.name}: about 1 queued email message(s)" in refused.stderr
        assert "--discard-email" in refused.stderr
        sqs.purge_queue(QueueUrl=free)

        # Destroy keeps the data stack; the next deploy finds the tenant, and the key, where they were.
        _ok(_operator(stack, "destroy", "--stage", STAGE, "--yes"))
        assert _status(stack, "moonsend-dev") is None and _status(stack, "moonsend-dev-data") == "CREATE_COMPLETE"
        _ok(_operator(stack, "deploy", "--stage", STAGE))
        assert _status(stack, "moonsend-dev") == "CREATE_COMPLETE"
        assert "AKIA...0001" in _ok(_operator(stack, "tenant", "keys", "--user", user, "--stage", STAGE))

        # Destroy with its data, then deploy again: nothing kept of the data stack stands in the new one's way.
        old_key = _key_of(stack, r.tenant_secrets_alias)
        said = _ok(_operator(stack, "destroy", "--stage", STAGE, "--yes", "--delete-data"))
        assert f"schedule-key-deletion  {r.tenant_secrets_alias}" in said and "7 days" in said
        assert _status(stack, "moonsend-dev-data") is None and _key_of(stack, r.tenant_secrets_alias) is None
        assert _key_state(old_key) == "PendingDeletion"
        _ok(_operator(stack, "deploy", "--stage", STAGE))
        assert _status(stack, "moonsend-dev-data") == _status(stack, "moonsend-dev") == "CREATE_COMPLETE"
        new_key = _key_of(stack, r.tenant_secrets_alias)
        assert new_key not in (None, old_key) and _key_state(new_key) == "Enabled"
    finally:
        _operator(stack, "destroy", "--stage", STAGE, "--yes", "--delete-data", "--discard-email")
    assert _status(stack, "moonsend-dev") is None and _status(stack, "moonsend-dev-data") is None
    with pytest.raises(ClientError):
        stack.client("dynamodb").describe_table(TableName=r.tenants_table.name)
