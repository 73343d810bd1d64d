"""A digest's EventBridge Scheduler schedule, as the Scheduler API takes it (botocore's own model checks
every request here: a parameter Scheduler does not know, or a missing required one, fails the test)."""

import json

import boto3
from botocore.stub import Stubber

from chalicelib.digest.schedules import SCHEDULED_TIME, DigestSchedules

TARGET = "arn:aws:lambda:us-east-1:123456789012:function:moonsend-dev-run_digest"
ROLE = "arn:aws:iam::123456789012:role/moonsend-dev-digest-scheduler"


def _schedules():
    client = boto3.client("scheduler", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    return client, DigestSchedules(client, "moonsend-dev-d-", TARGET, ROLE)


def test_a_schedule_name_is_what_scheduler_allows_whatever_the_ids_hold_and_differs_per_digest():
    _, schedules = _schedules()
    names = {schedules.name(u, d) for u, d in (("t1", "weekly"), ("t2", "weekly"), ("t1", "daily"), ("t1#x", "é/ü"))}
    assert len(names) == 4
    for name in names:
        assert len(name) <= 64 and name.startswith("moonsend-dev-d-")
        assert all(c.isalnum() or c in "-_." for c in name)


def test_put_creates_the_schedule_and_updates_it_when_it_exists():
    client, schedules = _schedules()
    stub = Stubber(client)
    expected = {
        "Name": schedules.name("t1", "weekly"),
        "GroupName": "default",
        "ScheduleExpression": "cron(0 13 ? * WED *)",
        "ScheduleExpressionTimezone": "UTC",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "State": "ENABLED",
        "Description": "moonsend digest weekly",
        "Target": {
            "Arn": TARGET,
            "RoleArn": ROLE,
            "Input": json.dumps({"userId": "t1", "digestId": "weekly", "scheduledAt": SCHEDULED_TIME}),
            "RetryPolicy": {"MaximumRetryAttempts": 3, "MaximumEventAgeInSeconds": 3600},
        },
    }
    stub.add_response("create_schedule", {"ScheduleArn": "arn:aws:scheduler:::schedule/default/x"}, expected)
    stub.add_client_error("create_schedule", "ConflictException", "exists", 409, expected_params=expected)
    stub.add_response("update_schedule", {"ScheduleArn": "arn:aws:scheduler:::schedule/default/x"}, expected)
    with stub:
        schedules.put("t1", "weekly", "cron(0 13 ? * WED *)")
        schedules.put("t1", "weekly", "cron(0 13 ? * WED *)")
        stub.assert_no_pending_responses()
