"""`moonsend deploy | destroy | smoke`: one stage of moonsend on a real AWS account.

In the manner of Chalice's deployer, each command first decides what to do, as a list of plain actions
(a plan, printable and testable without AWS), then does it. `deploy` packages the stage (infra.package),
uploads the bundle and each template, and deploys two CloudFormation stacks by the templates' URLs: the
data stack (tables, the links' key) and the app's. `destroy` also removes what the app's stack does not
own (the tenant queues and alarms created at run time, digests' schedules, the payload objects) and keeps
the data stack unless asked; it names email still queued or scheduled, and the CLI refuses to lose it
unless told to.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import WaiterError

from chalicelib.core.queue_listing import queue_urls
from chalicelib.core.resources import PARKED_PREFIX, SCHEDULED_PREFIX, resources_for
from infra.cfn import data_stack_name

KEY_DELETION_DAYS = 7  # KMS's shortest pending window


def stack_name(stage: str) -> str:
    return f"moonsend-{stage}"


@dataclass(frozen=True)
class Action:
    kind: str  # what the executor does
    target: str  # the resource it does it to
    params: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        note = self.params.get("note")
        return f"{self.kind:<22} {self.target}" + (f"  ({note})" if note else "")


def destroy_plan(
    stage: str, sqs: Any, cloudwatch: Any, scheduler: Any, *, delete_data: bool, account_id: str
) -> list[Action]:
    """Everything of a stage, in the order it must go: run-time resources first (digests' schedules, which
    would go on invoking a function that is gone, tenant queues and their alarms), then the app's stack;
    the data stack (tables, the links' key, the tenants' secrets key and its alias) only with `delete_data`."""
    r = resources_for("moonsend", stage, account_id)
    plan: list[Action] = []
    for page in scheduler.get_paginator("list_schedules").paginate(NamePrefix=r.digest_schedule_prefix):
        plan.extend(Action("delete-schedule", s["Name"]) for s in page.get("Schedules", []))
    plan.extend(Action("delete-queue", url) for url in queue_urls(sqs, r.tenant_queue_prefix))
    for page in cloudwatch.get_paginator("describe_alarms").paginate(AlarmNamePrefix=r.tenant_queue_prefix):
        plan.extend(Action("delete-alarm", a["AlarmName"]) for a in page.get("MetricAlarms", []))
    plan.append(Action("empty-bucket", r.payload_bucket.name))
    # A drain still running can write to the bucket after it was emptied: the stack's delete then fails on it
    # (not empty), and the executor empties it again and deletes again (see _delete_stack).
    plan.append(Action("delete-stack", stack_name(stage), {"bucket": r.payload_bucket.name}))
    if delete_data:
        # The data stack keeps its resources when deleted (RetainExceptOnCreate): they go one by one after it.
        plan.append(Action("delete-stack", data_stack_name(stage)))
        plan.extend(Action("delete-table", t.name) for t in r.tables)
        plan.append(Action("delete-secret", r.link_secret_name))
        # The tenants' secrets key, found by its alias, then the alias: left, the alias's name makes the next
        # create of the data stack fail. KMS deletes a key only after a wait, 7 days at the shortest.
        note = (
            f"deleted after {KEY_DELETION_DAYS} days, the shortest wait KMS allows; "
            "aws kms cancel-key-deletion until then"
        )
        plan.append(Action("schedule-key-deletion", r.tenant_secrets_alias, {"note": note}))
        plan.append(Action("delete-alias", r.tenant_secrets_alias))
    else:  # the digests kept: each one's schedule is put again by its next definition event
        plan.append(Action("forget-schedules", r.digests_table.name))
    return plan


def email_at_risk(stage: str, sqs: Any, s3: Any, account_id: str) -> list[str]:
    """What a destroy would lose that no tenant has been told about: email still queued (tenant queues and
    the free queue), scheduled batches waiting in the payload bucket for their time (up to 31 days), and
    paused campaigns' parked email (kept however long the pause)."""
    r = resources_for("moonsend", stage, account_id)
    lost: list[str] = []
    for url in queue_urls(sqs, r.prefix):
        name = url.rsplit("/", 1)[-1]
        if not (name.startswith(r.tenant_queue_prefix) or name == r.free_queue.name):
            continue
        attrs = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        held = sum(int(v) for v in attrs.values())
        if held:
            lost.append(f"queue {name}: about {held} queued email message(s)")
    for prefix, what in ((SCHEDULED_PREFIX, "scheduled batch(es) of email not yet due"), (PARKED_PREFIX, _PARKED)):
        try:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=r.payload_bucket.name, Prefix=prefix)
            stored = sum(len(page.get("Contents", [])) for page in pages)
        except s3.exceptions.NoSuchBucket:
            stored = 0
        if stored:
            lost.append(f"{stored} {what} (in {r.payload_bucket.name}/{prefix})")
    return lost


_PARKED = "batch(es) of paused campaigns' parked email"


def execute(
    plan: Iterable[Action],
    clients: dict[str, Any],
    say: Callable[[str], None] = print,
    *,
    tell: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    waiter_config: dict[str, int] | None = None,
) -> None:
    """Do the plan's actions in order. `say` hears each action as it starts; `tell` (`say` unless given) why
    a step waits or is done again. `sleep` and `waiter_config` (botocore's WaiterConfig, AWS's defaults
    unless given) are for tests."""
    tell = tell or say
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
            bucket = action.params.get("bucket")
            _delete_stack(
                clients["cloudformation"],
                action.target,
                bucket=bucket,
                s3=clients["s3"] if bucket else None,
                say=tell,
                waiter_config=waiter_config,
            )
        elif action.kind == "forget-schedules":
            _forget_schedules(clients["dynamodb"], action.target)
        elif action.kind == "delete-table":
            _delete_table(clients["dynamodb"], action.target, waiter_config=waiter_config)
        elif action.kind == "delete-secret":
            _delete_secret(clients["secretsmanager"], action.target, sleep=sleep)
        elif action.kind == "schedule-key-deletion":
            _schedule_key_deletion(clients["kms"], action.target)
        elif action.kind == "delete-alias":
            _delete_alias(clients["kms"], action.target)
        elif action.kind == "upload":
            clients["s3"].upload_file(action.params["file"], action.params["bucket"], action.target)
        elif action.kind == "upload-template":
            clients["s3"].put_object(
                Bucket=action.params["bucket"], Key=action.target, Body=action.params["body"].encode("utf-8")
            )
        elif action.kind == "deploy-stack":
            given = _parameters(action.params.get("declared", []), action.params.get("parameters", {}))
            _deploy_stack(clients["cloudformation"], action.target, action.params["template_url"], given, say=tell)
        else:
            raise ValueError(f"unknown action {action.kind}")


# CloudFormation fails a stack's delete on a bucket that is not empty ("The bucket you tried to delete is not
# empty"). The payload bucket was emptied just before, but a drain still running can write to it again (a
# body over 256 KB offloaded, a release, a park): it is emptied again and the stack deleted again, so often.
DELETE_RETRIES = 3


class StackDeleteFailed(RuntimeError):
    """CloudFormation left the stack DELETE_FAILED; the message gives its reasons."""


def failed_deletes(resources: Iterable[dict[str, Any]]) -> dict[str, str]:
    """The resources a DELETE_FAILED stack failed to delete (from ListStackResources): each one's physical
    id (its logical id if it has none) and CloudFormation's reason."""
    return {
        str(r.get("PhysicalResourceId") or r["LogicalResourceId"]): str(r.get("ResourceStatusReason", ""))
        for r in resources
        if r.get("ResourceStatus") == "DELETE_FAILED"
    }


def bucket_delete_retry(failed: dict[str, str], bucket: str | None) -> str | None:
    """Whether a failed stack delete is worth another go: CloudFormation's reason for the payload bucket when
    it is among the resources that failed (written to after it was emptied); None for any other failure."""
    if bucket is None or bucket not in failed:
        return None
    return failed[bucket] or "not deleted"


def _delete_stack(
    cfn: Any,
    name: str,
    *,
    bucket: str | None = None,
    s3: Any = None,
    say: Callable[[str], None] = print,
    waiter_config: dict[str, int] | None = None,
) -> None:
    """Delete the stack and wait for it. A delete that failed on the payload bucket (`bucket`) is done again
    after emptying the bucket, DELETE_RETRIES times at most, saying why; any other failure is raised with
    CloudFormation's reasons."""
    config = {"WaiterConfig": waiter_config} if waiter_config else {}
    for attempt in range(DELETE_RETRIES + 1):
        cfn.delete_stack(StackName=name)
        try:
            cfn.get_waiter("stack_delete_complete").wait(StackName=name, **config)
            return
        except WaiterError as exc:
            status, reason = _stack_status_and_reason(cfn, name)
            if status != "DELETE_FAILED":
                raise
            failed = failed_deletes(
                r
                for page in cfn.get_paginator("list_stack_resources").paginate(StackName=name)
                for r in page.get("StackResourceSummaries", [])
            )
            why = bucket_delete_retry(failed, bucket)
            if why is None or attempt == DELETE_RETRIES:
                reasons = "; ".join(f"{res}: {text}" for res, text in failed.items()) or reason
                tries = f" after {attempt + 1} tries" if attempt else ""
                raise StackDeleteFailed(f"{name}: CloudFormation could not delete it{tries}: {reasons}") from exc
            say(
                f"{name}: its delete failed on the payload bucket {bucket} ({why}): something wrote to it after "
                f"it was emptied (a drain still running); emptying it again and deleting again "
                f"({attempt + 1} of {DELETE_RETRIES})"
            )
            _empty_bucket(s3, str(bucket))


def _stack_status_and_reason(cfn: Any, name: str) -> tuple[str | None, str]:
    """The stack's status and its reason ((None, ""): no such stack)."""
    stack = _describe(cfn, name)
    if stack is None:
        return None, ""
    return str(stack["StackStatus"]), str(stack.get("StackStatusReason", ""))


def _describe(cfn: Any, name: str) -> dict[str, Any] | None:
    try:
        return dict(cfn.describe_stacks(StackName=name)["Stacks"][0])
    except cfn.exceptions.ClientError as exc:
        if "does not exist" in str(exc):
            return None
        raise


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


def _delete_table(dynamodb: Any, name: str, *, waiter_config: dict[str, int] | None = None) -> None:
    """Delete the table and wait until it is gone: DeleteTable returns with it DELETING, and a deploy right
    after would fail creating a table of its name."""
    try:
        dynamodb.delete_table(TableName=name)
    except dynamodb.exceptions.ResourceNotFoundException:
        return
    config = {"WaiterConfig": waiter_config} if waiter_config else {}
    dynamodb.get_waiter("table_not_exists").wait(TableName=name, **config)


# Secrets Manager deletes asynchronously, even without a recovery window: until it has, the name is taken.
SECRET_POLL_S = 5.0
SECRET_POLLS = 36  # 3 minutes


def _delete_secret(
    secretsmanager: Any, name: str, *, sleep: Callable[[float], None] = time.sleep, polls: int = SECRET_POLLS
) -> None:
    """At once, with no recovery window: a secret pending deletion keeps its name, and the next deploy of the
    stage could not create its key again for up to 30 days. Then wait until DescribeSecret no longer finds
    it, so that a deploy right after can create it again."""
    try:
        secretsmanager.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
    except secretsmanager.exceptions.ResourceNotFoundException:
        return
    for poll in range(polls):
        if poll:
            sleep(SECRET_POLL_S)
        try:
            secretsmanager.describe_secret(SecretId=name)
        except secretsmanager.exceptions.ResourceNotFoundException:
            return
    raise RuntimeError(
        f"secret {name} still exists {polls * SECRET_POLL_S:.0f} s after its deletion: a deploy now would fail "
        f"creating it; see aws secretsmanager describe-secret --secret-id {name}, and run destroy again"
    )


def _schedule_key_deletion(kms: Any, alias: str) -> None:
    """The key the alias names, to be deleted after the shortest wait; nothing if the alias is gone (a destroy
    run again) or the key is pending deletion already. The key is found in ListAliases, which names each
    alias's key id (ScheduleKeyDeletion takes no alias)."""
    aliases = (a for page in kms.get_paginator("list_aliases").paginate() for a in page.get("Aliases", []))
    key_id = next((a.get("TargetKeyId") for a in aliases if a["AliasName"] == alias), None)
    if key_id is None:
        return
    try:
        kms.schedule_key_deletion(KeyId=key_id, PendingWindowInDays=KEY_DELETION_DAYS)
    except kms.exceptions.KMSInvalidStateException:  # pending deletion already
        return


def _delete_alias(kms: Any, alias: str) -> None:
    try:
        kms.delete_alias(AliasName=alias)
    except kms.exceptions.NotFoundException:
        return


def _empty_bucket(s3: Any, bucket: str) -> None:
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    except s3.exceptions.NoSuchBucket:
        return


def template_url(bucket: str, region: str, key: str) -> str:
    """Where CloudFormation reads a template uploaded to S3 (virtual-hosted style, the bucket's region)."""
    return f"https://{bucket}.s3.{region}.amazonaws.com/{key}"


def _template_action(
    stage: str, name: str, template: dict[str, Any], bucket: str, region: str, parameters: dict[str, str] | None = None
) -> list[Action]:
    """Upload a template under its content hash, then deploy it by URL: CloudFormation takes at most
    51,200 bytes inline (TemplateBody) and 1 MB from S3 (TemplateURL), and ours is larger than the first.
    `parameters`: the values given for the template's parameters (one not given keeps its value)."""
    body = json.dumps(template, separators=(",", ":"))
    key = f"moonsend/{stage}/{name}-{hashlib.sha256(body.encode()).hexdigest()[:16]}.json"
    declared = sorted(template.get("Parameters", {}))
    return [
        Action("upload-template", key, {"bucket": bucket, "body": body}),
        Action(
            "deploy-stack",
            name,
            {"template_url": template_url(bucket, region, key), "parameters": parameters or {}, "declared": declared},
        ),
    ]


def deploy_plan(
    stage: str,
    template_file: Path,
    bundle: Path,
    artifacts_bucket: str,
    *,
    data_file: Path | None = None,
    region: str = "us-east-1",
    parameters: dict[str, str] | None = None,
) -> tuple[list[Action], dict]:
    """Upload the bundle under its content hash; deploy the data stack (tables, the links' key), then the
    app's stack pointing at the bundle, each template by URL."""
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()[:16]
    key = f"moonsend/{stage}/{digest}.zip"
    template = json.loads(template_file.read_text())
    for res in template["Resources"].values():
        if res.get("Type") == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = {"Bucket": artifacts_bucket, "Key": key}
    plan = [Action("upload", key, {"file": str(bundle), "bucket": artifacts_bucket})]
    if data_file is not None:
        data = json.loads(data_file.read_text())
        plan += _template_action(stage, data_stack_name(stage), data, artifacts_bucket, region)
    plan += _template_action(stage, stack_name(stage), template, artifacts_bucket, region, parameters)
    return plan, template


# A stack in one of these states cannot be updated, and holds nothing worth keeping (its resources were
# rolled back, or never made): it is deleted, then created anew.
_DEAD_ON_ARRIVAL = ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "REVIEW_IN_PROGRESS")
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]


def _stack_status(cfn: Any, name: str) -> str | None:
    return _stack_status_and_reason(cfn, name)[0]


# SQS takes no queue of a name deleted less than 60 s before (QueueDeletedRecently): a destroy and a deploy
# within that time fail the create of a named queue, and the stack rolls back. AWS has been seen refusing a
# little past 60 s, hence the margin.
QUEUE_REUSE_WAIT_S = 60.0
QUEUE_REUSE_MARGIN_S = 5.0
_QUEUE_DELETED_RECENTLY = ("QueueDeletedRecently", "You must wait 60 seconds after deleting a queue")
CREATE_ATTEMPTS = 3


def queue_reuse_wait(events: list[dict[str, Any]], now: datetime) -> float | None:
    """How long to wait before creating the stack again, when its create failed because a named queue was
    deleted less than 60 s before (the reason in the stack's events, newest first); None for any other
    failure. The queue went before the failure, so 60 s from the failure (and the margin) is enough."""
    for event in events:
        if event.get("ResourceStatus") == "CREATE_FAILED" and any(
            mark in event.get("ResourceStatusReason", "") for mark in _QUEUE_DELETED_RECENTLY
        ):
            waited = (now - event["Timestamp"]).total_seconds()
            return max(0.0, QUEUE_REUSE_WAIT_S + QUEUE_REUSE_MARGIN_S - waited)
    return None


def _parameters(declared: Iterable[str], given: dict[str, str]) -> list[dict[str, Any]]:
    """CreateChangeSet's Parameters: each given value; each declared one not given keeps the stack's value
    (UsePreviousValue; dropped for a stack's first create, which takes the template's default)."""
    return [
        {"ParameterKey": k, "ParameterValue": given[k]} if k in given else {"ParameterKey": k, "UsePreviousValue": True}
        for k in declared
    ]


def _deploy_stack(
    cfn: Any,
    name: str,
    url: str,
    parameters: list[dict[str, Any]] | None = None,
    *,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """Create or update the stack through a change set (SAM templates need one), and wait for it.

    A first create that failed leaves the stack in ROLLBACK_COMPLETE, which CloudFormation will not update:
    it is deleted first (its resources were rolled back; the data stack's tables go with a failed first
    create, by their RetainExceptOnCreate), so that the next deploy just works. A create that rolled back
    because a named queue was deleted less than 60 s before (a destroy, then a deploy) is made again once
    the rest of SQS's 60 s has passed, saying so."""
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            _deploy_stack_once(cfn, name, url, parameters or [])
            return
        except WaiterError:
            wait = queue_reuse_wait(_recent_events(cfn, name), now()) if attempt < CREATE_ATTEMPTS else None
            if wait is None:
                raise
            say(
                f"{name}: its create rolled back because a queue of its name was deleted less than 60 s ago "
                f"(SQS's QueueDeletedRecently); creating it again in {wait:.0f} s"
            )
            sleep(wait)


def _recent_events(cfn: Any, name: str) -> list[dict[str, Any]]:
    """The stack's latest events, newest first (one page: the failure just happened)."""
    try:
        return list(cfn.describe_stack_events(StackName=name).get("StackEvents", []))
    except cfn.exceptions.ClientError:
        return []


def _deploy_stack_once(cfn: Any, name: str, url: str, parameters: list[dict[str, Any]]) -> None:
    stack = _describe(cfn, name)
    status = str(stack["StackStatus"]) if stack else None
    if status in _DEAD_ON_ARRIVAL:
        cfn.delete_stack(StackName=name)
        cfn.get_waiter("stack_delete_complete").wait(StackName=name)
        status, stack = None, None
    kind = "CREATE" if status is None else "UPDATE"
    # A value is kept only where the stack has one: CloudFormation refuses UsePreviousValue for a parameter
    # the stack never had (a first create; a stack from before the parameter), which then takes its default.
    had = {p["ParameterKey"] for p in (stack or {}).get("Parameters", [])}
    parameters = [p for p in parameters if not p.get("UsePreviousValue") or p["ParameterKey"] in had]
    change_set = f"moonsend-{int(time.time())}"
    cfn.create_change_set(
        StackName=name,
        ChangeSetName=change_set,
        ChangeSetType=kind,
        TemplateURL=url,
        Capabilities=CAPABILITIES,
        Parameters=parameters,
    )
    try:
        cfn.get_waiter("change_set_create_complete").wait(StackName=name, ChangeSetName=change_set)
    except Exception:
        status_reason = cfn.describe_change_set(StackName=name, ChangeSetName=change_set).get("StatusReason", "")
        if "didn't contain changes" in status_reason or "No updates" in status_reason:
            cfn.delete_change_set(StackName=name, ChangeSetName=change_set)
            return
        raise
    cfn.execute_change_set(StackName=name, ChangeSetName=change_set)
    waiter = "stack_create_complete" if kind == "CREATE" else "stack_update_complete"
    cfn.get_waiter(waiter).wait(StackName=name, WaiterConfig={"Delay": 10, "MaxAttempts": 180})
