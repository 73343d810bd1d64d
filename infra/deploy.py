"""`moonsend deploy | destroy | smoke`: one stage of moonsend on a real AWS account.

In the manner of Chalice's deployer, each command first decides what to do, as a list of plain actions
(a plan, printable and testable without AWS), then does it. `deploy` packages the stage (infra.package),
uploads the bundle and deploys the template as one CloudFormation stack. `destroy` also removes what the
stack does not own: the tenant queues and alarms created at run time, and the payload objects; the
tables are kept (they hold the tenants' records) unless asked.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chalicelib.core.config import Settings
from chalicelib.core.resources import resources_for

SIMULATOR = {
    "success@simulator.amazonses.com": "sent",
    "bounce@simulator.amazonses.com": "sent",
    "complaint@simulator.amazonses.com": "sent",
}


def stack_name(stage: str) -> str:
    return f"moonsend-{stage}"


@dataclass(frozen=True)
class Action:
    kind: str  # what the executor does
    target: str  # the resource it does it to
    params: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.kind:<22} {self.target}"


def destroy_plan(
    stage: str, sqs: Any, cloudwatch: Any, scheduler: Any, *, delete_data: bool, account_id: str
) -> list[Action]:
    """Everything of a stage, in the order it must go: run-time resources first (digests' schedules, which
    would go on invoking a function that is gone, tenant queues and their alarms), then the stack."""
    r = resources_for("moonsend", stage, account_id)
    plan: list[Action] = []
    for page in scheduler.get_paginator("list_schedules").paginate(NamePrefix=r.digest_schedule_prefix):
        plan.extend(Action("delete-schedule", s["Name"]) for s in page.get("Schedules", []))
    for page in sqs.get_paginator("list_queues").paginate(QueueNamePrefix=r.tenant_queue_prefix):
        plan.extend(Action("delete-queue", url) for url in page.get("QueueUrls", []))
    for page in cloudwatch.get_paginator("describe_alarms").paginate(AlarmNamePrefix=r.tenant_queue_prefix):
        plan.extend(Action("delete-alarm", a["AlarmName"]) for a in page.get("MetricAlarms", []))
    plan.append(Action("empty-bucket", r.payload_bucket.name))
    plan.append(Action("delete-stack", stack_name(stage)))
    if delete_data:
        plan.extend(Action("delete-table", t.name) for t in r.tables)
    else:  # the digests kept: each one's schedule is put again by its next definition event
        plan.append(Action("forget-schedules", r.digests_table.name))
    return plan


def execute(plan: Iterable[Action], clients: dict[str, Any], say: Callable[[str], None] = print) -> None:
    for action in plan:
        say(str(action))
        if action.kind == "delete-schedule":
            clients["scheduler"].delete_schedule(Name=action.target, GroupName="default")
        elif action.kind == "delete-queue":
            clients["sqs"].delete_queue(QueueUrl=action.target)
        elif action.kind == "delete-alarm":
            clients["cloudwatch"].delete_alarms(AlarmNames=[action.target])
        elif action.kind == "empty-bucket":
            _empty_bucket(clients["s3"], action.target)
        elif action.kind == "delete-stack":
            cfn = clients["cloudformation"]
            cfn.delete_stack(StackName=action.target)
            cfn.get_waiter("stack_delete_complete").wait(StackName=action.target)
        elif action.kind == "forget-schedules":
            _forget_schedules(clients["dynamodb"], action.target)
        elif action.kind == "delete-table":
            clients["dynamodb"].delete_table(TableName=action.target)
        elif action.kind == "upload":
            clients["s3"].upload_file(action.params["file"], action.params["bucket"], action.target)
        elif action.kind == "deploy-stack":
            _deploy_stack(clients["cloudformation"], action.target, action.params["template"])
        else:
            raise ValueError(f"unknown action {action.kind}")


def _forget_schedules(dynamodb: Any, table: str) -> None:
    """Clear each digest's note that its schedule is put (chalicelib.stores.digests), the schedules gone."""
    try:
        pages = dynamodb.get_paginator("scan").paginate(
            TableName=table,
            FilterExpression="attribute_exists(scheduled)",
            ProjectionExpression="pk, sk",
        )
        for page in pages:
            for key in page.get("Items", []):
                dynamodb.update_item(TableName=table, Key=key, UpdateExpression="REMOVE scheduled")
    except dynamodb.exceptions.ResourceNotFoundException:
        return


def _empty_bucket(s3: Any, bucket: str) -> None:
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    except s3.exceptions.NoSuchBucket:
        return


def deploy_plan(stage: str, template_file: Path, bundle: Path, artifacts_bucket: str) -> tuple[list[Action], dict]:
    """Upload the bundle under its content hash, and deploy the template pointing at it."""
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()[:16]
    key = f"moonsend/{stage}/{digest}.zip"
    template = json.loads(template_file.read_text())
    for res in template["Resources"].values():
        if res.get("Type") == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = {"Bucket": artifacts_bucket, "Key": key}
    plan = [
        Action("upload", key, {"file": str(bundle), "bucket": artifacts_bucket}),
        Action("deploy-stack", stack_name(stage), {"template": template}),
    ]
    return plan, template


def _deploy_stack(cfn: Any, name: str, template: dict[str, Any]) -> None:
    """Create or update the stack through a change set (SAM templates need one), and wait for it."""
    try:
        cfn.describe_stacks(StackName=name)
        kind = "UPDATE"
    except cfn.exceptions.ClientError:
        kind = "CREATE"
    change_set = f"moonsend-{int(time.time())}"
    cfn.create_change_set(
        StackName=name,
        ChangeSetName=change_set,
        ChangeSetType=kind,
        TemplateBody=json.dumps(template),
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    try:
        cfn.get_waiter("change_set_create_complete").wait(StackName=name, ChangeSetName=change_set)
    except Exception:
        status = cfn.describe_change_set(StackName=name, ChangeSetName=change_set)
        if "didn't contain changes" in status.get("StatusReason", ""):
            return
        raise
    cfn.execute_change_set(StackName=name, ChangeSetName=change_set)
    waiter = "stack_create_complete" if kind == "CREATE" else "stack_update_complete"
    cfn.get_waiter(waiter).wait(StackName=name, WaiterConfig={"Delay": 10, "MaxAttempts": 180})


def smoke_messages(sender_address: str, campaign_id: str) -> list[dict[str, Any]]:
    """A free-plan campaign to the SES mailbox simulator: one message, three recipients."""
    return [
        {
            "userId": "moonsend-smoke",
            "userPlan": "free",
            "sender": {"ratePerSecond": "1", "emailAddress": sender_address, "fromName": "moonsend smoke test"},
            "campaign": {
                "id": campaign_id,
                "subject": "moonsend smoke test {{ recipient.email }}",
                "body": "<p>Hello from moonsend's smoke test.</p>",
            },
            "recipients": [{"email": address} for address in SIMULATOR],
        }
    ]


def wait_for_outcomes(
    settings: Settings, campaign_id: str, timeout_s: float = 600, poll_s: float = 5
) -> dict[str, str | None]:
    """Poll the ledger until every simulator address has its expected state (or the time is up)."""
    from chalicelib.stores.ledger import Ledger

    ledger = Ledger(settings.resources.ledger_table.name, settings.region)
    deadline = time.time() + timeout_s
    while True:
        seen = {a: (ledger.get("moonsend-smoke", campaign_id, a) or _Nothing).state for a in SIMULATOR}
        if all(seen[a] == want for a, want in SIMULATOR.items()) or time.time() > deadline:
            return seen
        time.sleep(poll_s)


class _Nothing:
    state = None
