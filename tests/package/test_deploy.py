"""infra.deploy's calls to CloudFormation, checked against botocore's model of the API (Stubber validates
every request's parameters and shapes the answers as CloudFormation's)."""

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.exceptions import WaiterError
from botocore.stub import ANY, Stubber

from infra.deploy import Action, _deploy_stack, _parameters, destroy_plan, email_at_risk, execute
from infra.smoke import simulator_addresses, smoke_messages

URL = "https://my-artifacts.s3.us-east-1.amazonaws.com/moonsend/dev/moonsend-dev-0123.json"


@pytest.fixture
def cfn():
    client = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def _stack(status, parameters=()):
    stack = {"StackName": "moonsend-dev", "CreationTime": "2026-11-25T00:00:00Z", "StackStatus": status}
    return {"Stacks": [{**stack, "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in parameters]}]}


def _missing(stub):
    stub.add_client_error(
        "describe_stacks", "ValidationError", "Stack with id moonsend-dev does not exist", expected_params=None
    )


def _create_through_a_change_set(stub, kind, parameters=()):
    stub.add_response(
        "create_change_set",
        {"Id": "arn:cs", "StackId": "arn:stack"},
        {
            "StackName": "moonsend-dev",
            "ChangeSetName": ANY,
            "ChangeSetType": kind,
            "TemplateURL": URL,
            "Capabilities": ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
            "Parameters": list(parameters),
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


def test_the_operators_email_is_kept_by_an_update_that_does_not_give_it_and_set_by_one_that_does(cfn):
    """`moonsend deploy` without --operator-email must not unsubscribe the operator from the stage's alarms."""
    client, stub = cfn
    kept = _parameters(["OperatorEmail"], {})
    assert kept == [{"ParameterKey": "OperatorEmail", "UsePreviousValue": True}]
    had = _stack("UPDATE_COMPLETE", [("OperatorEmail", "ops@example.org")])
    stub.add_response("describe_stacks", had, {"StackName": "moonsend-dev"})
    _create_through_a_change_set(stub, "UPDATE", kept)
    _deploy_stack(client, "moonsend-dev", URL, kept)
    given = _parameters(["OperatorEmail"], {"OperatorEmail": "ops@example.org"})
    assert given == [{"ParameterKey": "OperatorEmail", "ParameterValue": "ops@example.org"}]


def test_a_stack_from_before_the_parameter_and_a_first_create_take_its_default(cfn):
    """CloudFormation refuses UsePreviousValue for a parameter not in the stack's template: a first create,
    and the first update of a stack deployed before the parameter existed."""
    client, stub = cfn
    kept = _parameters(["OperatorEmail"], {})
    stub.add_response("describe_stacks", _stack("UPDATE_COMPLETE"), {"StackName": "moonsend-dev"})  # none
    _create_through_a_change_set(stub, "UPDATE", [])
    _deploy_stack(client, "moonsend-dev", URL, kept)
    _missing(stub)
    _create_through_a_change_set(stub, "CREATE", [])
    _deploy_stack(client, "moonsend-dev", URL, kept)


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
    app = next(a for a in plan if (a.kind, a.target) == ("delete-stack", "moonsend-dev"))
    assert app.params["bucket"] == next(a.target for a in plan if a.kind == "empty-bucket")  # emptied again if need be
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


def _stubbed(service):
    client = boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    return client, Stubber(client)


def test_delete_data_waits_until_each_table_is_gone():
    """DeleteTable returns with the table DELETING: a deploy right after failed creating a table of its name."""
    dynamodb, stub = _stubbed("dynamodb")
    table = "moonsend-dev-ledger"
    stub.add_response(
        "delete_table", {"TableDescription": {"TableName": table, "TableStatus": "DELETING"}}, {"TableName": table}
    )
    deleting = {"Table": {"TableName": table, "TableStatus": "DELETING"}}
    stub.add_response("describe_table", deleting, {"TableName": table})
    stub.add_response("describe_table", deleting, {"TableName": table})
    stub.add_client_error("describe_table", "ResourceNotFoundException", f"Requested resource not found: {table}")
    with stub:
        execute(
            [Action("delete-table", table)],
            {"dynamodb": dynamodb},
            say=lambda _s: None,
            waiter_config={"Delay": 0, "MaxAttempts": 5},
        )
        stub.assert_no_pending_responses()  # asked until DynamoDB no longer knew it


def _secret_deleted(stub, name):
    arn = f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{name}-AbCdEf"
    deleted = datetime(2026, 11, 27, 10, 0, 0, tzinfo=UTC)
    stub.add_response(
        "delete_secret",
        {"ARN": arn, "Name": name, "DeletionDate": deleted},
        {"SecretId": name, "ForceDeleteWithoutRecovery": True},
    )
    return {"ARN": arn, "Name": name, "DeletedDate": deleted}


def test_delete_data_waits_until_the_secret_is_gone():
    """Secrets Manager deletes asynchronously even without a recovery window: until then the name is taken."""
    sm, stub = _stubbed("secretsmanager")
    name = "moonsend-dev/link-signing-key"
    pending = _secret_deleted(stub, name)
    stub.add_response("describe_secret", pending, {"SecretId": name})
    stub.add_response("describe_secret", pending, {"SecretId": name})
    stub.add_client_error("describe_secret", "ResourceNotFoundException", "Secrets Manager can't find the secret.")
    slept = []
    with stub:
        execute([Action("delete-secret", name)], {"secretsmanager": sm}, say=lambda _s: None, sleep=slept.append)
        stub.assert_no_pending_responses()
    assert slept == [5.0, 5.0]  # asked at once, then every 5 s until it was gone


def test_a_secret_that_never_goes_stops_the_destroy_saying_so():
    sm, stub = _stubbed("secretsmanager")
    name = "moonsend-dev/link-signing-key"
    pending = _secret_deleted(stub, name)
    for _ in range(36):
        stub.add_response("describe_secret", pending, {"SecretId": name})
    slept = []
    with stub, pytest.raises(RuntimeError, match=f"secret {name} still exists 180 s after its deletion"):
        execute([Action("delete-secret", name)], {"secretsmanager": sm}, say=lambda _s: None, sleep=slept.append)
    assert len(slept) == 35


BUCKET = "moonsend-dev-payloads-123456789012"
NOT_EMPTY = (
    'Resource handler returned message: "The bucket you tried to delete is not empty (Service: S3, Status Code: '
    '409, Request ID: 5WQH3Y)" (RequestToken: 9c5a, HandlerErrorCode: GeneralServiceException)'
)


def _delete_failed(stub, resource, reason, physical):
    """One delete of the app's stack, failed on `resource` (the waiter, then its state and what failed)."""
    stub.add_response("delete_stack", {}, {"StackName": "moonsend-dev"})
    failed = _stack("DELETE_FAILED")
    failed["Stacks"][0]["StackStatusReason"] = f"The following resource(s) failed to delete: [{resource}]. "
    stub.add_response("describe_stacks", failed, {"StackName": "moonsend-dev"})  # the waiter: a terminal failure
    stub.add_response("describe_stacks", failed, {"StackName": "moonsend-dev"})
    summary = {
        "LogicalResourceId": resource,
        "PhysicalResourceId": physical,
        "ResourceType": "AWS::S3::Bucket" if physical == BUCKET else "AWS::IAM::Role",
        "LastUpdatedTimestamp": datetime(2026, 11, 27, 10, 0, 0, tzinfo=UTC),
        "ResourceStatus": "DELETE_FAILED",
        "ResourceStatusReason": reason,
    }
    stub.add_response("list_stack_resources", {"StackResourceSummaries": [summary]}, {"StackName": "moonsend-dev"})


def _written_late(s3_stub):
    """The bucket holds a payload offloaded after the destroy emptied it; it is emptied again."""
    key = "payloads/t-late/0001.json"
    s3_stub.add_response(
        "list_objects_v2", {"Contents": [{"Key": key}], "IsTruncated": False, "KeyCount": 1}, {"Bucket": BUCKET}
    )
    s3_stub.add_response(
        "delete_objects", {"Deleted": [{"Key": key}]}, {"Bucket": BUCKET, "Delete": {"Objects": [{"Key": key}]}}
    )


def test_a_stack_delete_failed_by_a_late_write_to_the_payload_bucket_empties_it_and_deletes_again(cfn):
    client, stub = cfn
    s3, s3_stub = _stubbed("s3")
    _delete_failed(stub, "PayloadBucket", NOT_EMPTY, BUCKET)
    _written_late(s3_stub)
    stub.add_response("delete_stack", {}, {"StackName": "moonsend-dev"})
    _missing(stub)  # the waiter: deleted
    said = []
    with s3_stub:
        execute(
            [Action("delete-stack", "moonsend-dev", {"bucket": BUCKET})],
            {"cloudformation": client, "s3": s3},
            say=lambda _s: None,
            tell=said.append,
        )
        s3_stub.assert_no_pending_responses()
    (line,) = said
    assert BUCKET in line and "The bucket you tried to delete is not empty" in line
    assert "emptying it again and deleting again (1 of 3)" in line


def test_a_stack_delete_the_bucket_keeps_failing_is_retried_three_times_then_raised(cfn):
    client, stub = cfn
    s3, s3_stub = _stubbed("s3")
    for _ in range(3):
        _delete_failed(stub, "PayloadBucket", NOT_EMPTY, BUCKET)
        _written_late(s3_stub)
    _delete_failed(stub, "PayloadBucket", NOT_EMPTY, BUCKET)
    said = []
    with s3_stub, pytest.raises(RuntimeError, match="after 4 tries: moonsend-dev-payloads-123456789012: Resource"):
        execute(
            [Action("delete-stack", "moonsend-dev", {"bucket": BUCKET})],
            {"cloudformation": client, "s3": s3},
            say=lambda _s: None,
            tell=said.append,
        )
    assert len(said) == 3


def test_a_stack_delete_failed_for_another_reason_is_raised_with_cloudformations_reason(cfn):
    client, stub = cfn
    s3, s3_stub = _stubbed("s3")  # no answers: emptying the bucket again would fail the test
    reason = "Cannot delete entity, must detach all policies first. (Service: Iam, Status Code: 409)"
    _delete_failed(stub, "DrainerRole", reason, "moonsend-dev-DrainerRole-1A2B3C")
    with s3_stub, pytest.raises(RuntimeError, match=r"moonsend-dev-DrainerRole-1A2B3C: Cannot delete entity"):
        execute(
            [Action("delete-stack", "moonsend-dev", {"bucket": BUCKET})],
            {"cloudformation": client, "s3": s3},
            say=lambda _s: None,
            tell=lambda _s: None,
        )
