"""infra.deploy's calls to CloudFormation, checked against botocore's model of the API (Stubber validates
every request's parameters and shapes the answers as CloudFormation's)."""

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.exceptions import WaiterError
from botocore.stub import ANY, Stubber

from infra.deploy import _deploy_stack, destroy_plan, email_at_risk
from infra.smoke import simulator_addresses, smoke_messages

URL = "https://my-artifacts.s3.us-east-1.amazonaws.com/moonsend/dev/moonsend-dev-0123.json"


@pytest.fixture
def cfn():
    client = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def _stack(status):
    return {"Stacks": [{"StackName": "moonsend-dev", "CreationTime": "2026-11-25T00:00:00Z", "StackStatus": status}]}


def _missing(stub):
    stub.add_client_error(
        "describe_stacks", "ValidationError", "Stack with id moonsend-dev does not exist", expected_params=None
    )


def _create_through_a_change_set(stub, kind):
    stub.add_response(
        "create_change_set",
        {"Id": "arn:cs", "StackId": "arn:stack"},
        {
            "StackName": "moonsend-dev",
            "ChangeSetName": ANY,
            "ChangeSetType": kind,
            "TemplateURL": URL,
            "Capabilities": ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
        },
    )
    stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE", "ExecutionStatus": "AVAILABLE"}, None)
    stub.add_response("execute_change_set", {}, None)
    stub.add_response("describe_stacks", _stack(f"{kind}_COMPLETE"), None)


def test_a_new_stage_is_created_from_the_template_by_url(cfn):
    client, stub = cfn
    _missing(stub)
    _create_through_a_change_set(stub, "CREATE")
    _deploy_stack(client, "moonsend-dev", URL)


def test_a_stack_whose_first_create_rolled_back_is_deleted_then_created_again(cfn):
    """CloudFormation refuses to update a stack in ROLLBACK_COMPLETE: the next deploy would fail for ever."""
    client, stub = cfn
    stub.add_response("describe_stacks", _stack("ROLLBACK_COMPLETE"), {"StackName": "moonsend-dev"})
    stub.add_response("delete_stack", {}, {"StackName": "moonsend-dev"})
    _missing(stub)  # the waiter: a deleted stack is one that no longer exists
    _create_through_a_change_set(stub, "CREATE")
    _deploy_stack(client, "moonsend-dev", URL)


def test_an_existing_stack_is_updated(cfn):
    client, stub = cfn
    stub.add_response("describe_stacks", _stack("UPDATE_COMPLETE"), {"StackName": "moonsend-dev"})
    _create_through_a_change_set(stub, "UPDATE")
    _deploy_stack(client, "moonsend-dev", URL)


def test_the_smoke_mails_simulator_addresses_labelled_with_its_campaign_so_it_can_run_again():
    """The simulator's bounce and complaint addresses land on the suppression list after a first smoke: a
    second smoke of the same stage to the same addresses would be suppressed and fail."""
    first, second = simulator_addresses("smoke-1a2b"), simulator_addresses("smoke-3c4d")
    assert set(first) == {
        "success+smoke-1a2b@simulator.amazonses.com",
        "bounce+smoke-1a2b@simulator.amazonses.com",
        "complaint+smoke-1a2b@simulator.amazonses.com",
    }
    assert not set(first) & set(second)
    (message,) = smoke_messages("ops@example.com", "smoke-1a2b")
    assert [r["email"] for r in message["recipients"]] == list(first)


def test_email_still_queued_or_scheduled_is_named_before_a_destroy(stack, uid):
    from chalicelib import wiring

    c = wiring.container()
    queue = f"moonsend-local-t-risk{uid}"
    url = c.queues.ensure(queue, f"risk{uid}")
    sqs, s3 = stack.client("sqs"), stack.client("s3")
    before = email_at_risk("local", sqs, s3, "123456789012")
    assert not any(queue in line for line in before)
    sqs.send_message(QueueUrl=url, MessageBody="{}")
    bucket = stack.settings.resources.payload_bucket.name
    s3.put_object(Bucket=bucket, Key=f"scheduled/risk{uid}/batch", Body=b"{}")
    try:
        at_risk = email_at_risk("local", sqs, s3, "123456789012")
        assert f"queue {queue}: about 1 queued email message(s)" in at_risk
        assert any("scheduled batch" in line for line in at_risk)
    finally:
        sqs.purge_queue(QueueUrl=url)
        s3.delete_object(Bucket=bucket, Key=f"scheduled/risk{uid}/batch")


def _destroy_plan(stack, *, delete_data):
    sqs, cloudwatch, scheduler = (stack.client(n) for n in ("sqs", "cloudwatch", "scheduler"))
    return destroy_plan("dev", sqs, cloudwatch, scheduler, delete_data=delete_data, account_id="123456789012")


def test_delete_data_also_schedules_the_tenant_secrets_key_for_deletion_and_deletes_its_alias(stack):
    """The key and its alias are kept when the data stack is deleted (RetainExceptOnCreate): left there, the
    alias made the next deploy's create of the data stack fail on its name."""
    plan = _destroy_plan(stack, delete_data=True)
    steps = [(a.kind, a.target) for a in plan]
    alias = "alias/moonsend-dev-tenant-secrets"
    data = steps.index(("delete-stack", "moonsend-dev-data"))
    key, gone = steps.index(("schedule-key-deletion", alias)), steps.index(("delete-alias", alias))
    assert data < key < gone  # the key found by its alias, then the alias deleted
    printed = str(plan[key])
    assert printed.startswith("schedule-key-deletion") and alias in printed
    assert "7 days, the shortest wait KMS allows" in printed
    kept = [(a.kind, a.target) for a in _destroy_plan(stack, delete_data=False)]
    assert not {k for k, _ in kept} & {"schedule-key-deletion", "delete-alias", "delete-table", "delete-secret"}


def _rolled_back_for_a_queue_deleted_recently(stub, failed_at):
    """The create ran and rolled back: a named queue of the stack was deleted less than 60 s before."""
    stub.add_response("describe_stacks", _stack("ROLLBACK_COMPLETE"), None)  # the create's waiter: failed
    reason = (
        'Resource handler returned message: "You must wait 60 seconds after deleting a queue before you can '
        'create another with the same name. (Service: Sqs, Status Code: 400, Request ID: 7503e9ea)"'
    )
    event = {
        "StackId": "arn:stack",
        "EventId": "e1",
        "StackName": "moonsend-dev",
        "LogicalResourceId": "DeadLetterQueue",
        "ResourceType": "AWS::SQS::Queue",
        "Timestamp": failed_at,
        "ResourceStatus": "CREATE_FAILED",
        "ResourceStatusReason": reason,
    }
    stub.add_response("describe_stack_events", {"StackEvents": [event]}, {"StackName": "moonsend-dev"})


def test_a_create_rolled_back_for_a_queue_deleted_under_60_s_ago_is_made_again_after_the_rest_of_it(cfn):
    """Destroy, then deploy at once: SQS refuses a named queue's name for 60 s and the create rolls back. The
    deploy says why, waits out the rest of the 60 s (from the failure, with the margin) and creates again."""
    client, stub = cfn
    failed_at = datetime(2026, 11, 27, 10, 0, 0, tzinfo=UTC)
    _missing(stub)
    stub.add_response("create_change_set", {"Id": "arn:cs", "StackId": "arn:stack"}, None)
    stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE", "ExecutionStatus": "AVAILABLE"}, None)
    stub.add_response("execute_change_set", {}, None)
    _rolled_back_for_a_queue_deleted_recently(stub, failed_at)
    # The second try: the rolled-back stack is deleted (as any ROLLBACK_COMPLETE one), then created.
    stub.add_response("describe_stacks", _stack("ROLLBACK_COMPLETE"), {"StackName": "moonsend-dev"})
    stub.add_response("delete_stack", {}, {"StackName": "moonsend-dev"})
    _missing(stub)
    _create_through_a_change_set(stub, "CREATE")
    said, slept = [], []
    now = failed_at + timedelta(seconds=20)
    _deploy_stack(client, "moonsend-dev", URL, say=said.append, sleep=slept.append, now=lambda: now)
    assert slept == [45.0]  # 60 s from the failure, less the 20 gone, and the 5 s margin
    (line,) = said
    assert "deleted less than 60 s ago" in line and "QueueDeletedRecently" in line and "in 45 s" in line


def test_a_create_rolled_back_for_another_reason_is_not_retried(cfn):
    client, stub = cfn
    _missing(stub)
    stub.add_response("create_change_set", {"Id": "arn:cs", "StackId": "arn:stack"}, None)
    stub.add_response("describe_change_set", {"Status": "CREATE_COMPLETE", "ExecutionStatus": "AVAILABLE"}, None)
    stub.add_response("execute_change_set", {}, None)
    stub.add_response("describe_stacks", _stack("ROLLBACK_COMPLETE"), None)
    event = {
        "StackId": "arn:stack",
        "EventId": "e1",
        "StackName": "moonsend-dev",
        "LogicalResourceId": "Ledger",
        "Timestamp": datetime(2026, 11, 27, 10, 0, 0, tzinfo=UTC),
        "ResourceStatus": "CREATE_FAILED",
        "ResourceStatusReason": "Resource of type 'AWS::DynamoDB::Table' with identifier 'x' already exists.",
    }
    stub.add_response("describe_stack_events", {"StackEvents": [event]}, {"StackName": "moonsend-dev"})
    slept = []
    with pytest.raises(WaiterError):
        _deploy_stack(client, "moonsend-dev", URL, say=lambda _s: None, sleep=slept.append)
    assert not slept
