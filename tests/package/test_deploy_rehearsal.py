"""A deploy rehearsal: `moonsend deploy` of the dev stage to the local endpoint, through the code path it takes
to AWS (bundle and templates uploaded, change sets made from the templates' URLs), then the operator's
commands as an operator runs them, then a destroy and a second deploy.

Each command runs in a process of its own with only what an operator's shell has: credentials from the
SDK's chain, a region, and (since this is not AWS) the endpoint. moonsend sets no endpoint, account or
stage variable of its own. The local endpoint refuses what CloudFormation refuses (a template over 51,200
bytes inline) and expands SAM as CloudFormation does (infra.local.cfn_transform).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from chalicelib.core.contract import Sender
from chalicelib.core.resources import FUNCTION_IDS, resources_for
from chalicelib.stores.tenant_secrets import TenantSecrets
from chalicelib.stores.tenants import TenantRegistry
from infra.local.platform import PLATFORM_ACCESS_KEY, PLATFORM_SECRET_KEY

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
STAGE = "dev"


def _operator(stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOONSEND_", "AWS_"))}
    env.update(
        AWS_ENDPOINT_URL=stack.endpoint,  # the operator's own shell points the SDK here: this is no AWS
        AWS_ACCESS_KEY_ID=PLATFORM_ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=PLATFORM_SECRET_KEY,
        AWS_DEFAULT_REGION="us-east-1",
    )
    return subprocess.run(
        [sys.executable, "-m", "infra", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


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


def test_deploy_operate_destroy_and_deploy_again_as_an_operator_would(stack, uid):
    r = resources_for("moonsend", STAGE, "123456789012")
    user = f"rehearsal-{uid}"
    try:
        said = _ok(_operator(stack, "deploy", "--stage", STAGE))
        assert "deployed stacks moonsend-dev-data and moonsend-dev" in said
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
        assert "no keys registered" in _ok(_operator(stack, "tenant", "keys", "--user", user, "--stage", STAGE))

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
