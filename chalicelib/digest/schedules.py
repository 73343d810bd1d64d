"""Each digest's EventBridge Scheduler schedule: it invokes run_digest at the digest's times.

One schedule per digest (named from a hash of the tenant and the digest, which may hold any characters),
put when a definition gives a schedule the digest was not yet scheduled with. The schedule's input names
the digest and its scheduled time (`<aws.scheduler.scheduled-time>`, which Scheduler fills in): a run
retried, by Scheduler or by Lambda, mails for the same period, so the period's ledger keeps it exactly
once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from botocore.exceptions import ClientError

SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
# Scheduler's own retries when the invocation itself fails (throttled, the function missing); Lambda's two
# async retries then cover a run that raised (another run holding the digest).
RETRIES = 3
MAX_EVENT_AGE_S = 3600


def run_input(user_id: str, digest_id: str, scheduled_at: str = SCHEDULED_TIME) -> dict[str, str]:
    """What run_digest is invoked with: the digest, and the time its run was scheduled for (ISO 8601)."""
    return {"userId": user_id, "digestId": digest_id, "scheduledAt": scheduled_at}


class DigestSchedules:
    def __init__(self, client: Any, name_prefix: str, target_arn: str, role_arn: str) -> None:
        self._client = client
        self._prefix = name_prefix
        self._target_arn = target_arn
        self._role_arn = role_arn

    def name(self, user_id: str, digest_id: str) -> str:
        """At most 64 characters of [0-9a-zA-Z-_.], as Scheduler requires, whatever the ids hold."""
        digest = hashlib.sha256(f"{user_id}\0{digest_id}".encode()).hexdigest()
        return f"{self._prefix}{digest[: 64 - len(self._prefix)][:32]}"

    def put(self, user_id: str, digest_id: str, expression: str) -> None:
        """Create the digest's schedule, or change its expression (ClientError if Scheduler refuses it)."""
        args = {
            "Name": self.name(user_id, digest_id),
            "GroupName": "default",
            "ScheduleExpression": expression,
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "State": "ENABLED",
            "Description": f"moonsend digest {digest_id[:200]}",
            "Target": {
                "Arn": self._target_arn,
                "RoleArn": self._role_arn,
                "Input": json.dumps(run_input(user_id, digest_id)),
                "RetryPolicy": {"MaximumRetryAttempts": RETRIES, "MaximumEventAgeInSeconds": MAX_EVENT_AGE_S},
            },
        }
        try:
            self._client.create_schedule(**args)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConflictException":
                raise
            self._client.update_schedule(**args)

    def get(self, user_id: str, digest_id: str) -> dict[str, Any] | None:
        """The digest's schedule as Scheduler holds it, or None."""
        try:
            return dict(self._client.get_schedule(Name=self.name(user_id, digest_id), GroupName="default"))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return None
            raise
