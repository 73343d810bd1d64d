"""Creating moonsend's platform resources from their definitions (chalicelib.resources).

Used by the local stack against moto. Idempotent: run it twice and nothing changes. Deployment to AWS
generates CloudFormation from the same definitions instead of calling these APIs.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.config import Settings
from chalicelib.ses_sender import ensure_configuration_set
from chalicelib.tenant_queues import not_empty_alarm


def provision(settings: Settings, clients: dict[str, Any]) -> dict[str, str]:
    """Create topics, tables, queues and the bucket; returns {logical id: ARN or URL or name}."""
    r = settings.resources
    sns, sqs, ddb, s3 = clients["sns"], clients["sqs"], clients["dynamodb"], clients["s3"]
    cloudwatch = clients["cloudwatch"]
    out: dict[str, str] = {}
    for topic in r.topics:
        out[topic.logical_id] = sns.create_topic(Name=topic.name)["TopicArn"]
    for table in r.tables:
        keys, attrs = table.key_schema(), table.attribute_definitions()
        try:
            ddb.create_table(
                TableName=table.name,
                KeySchema=keys,
                AttributeDefinitions=attrs,
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceInUseException":
                raise
        if table.ttl_attribute:
            ddb.update_time_to_live(
                TableName=table.name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
            )
        out[table.logical_id] = table.name
    for q in r.queues:
        attributes = {
            "VisibilityTimeout": str(q.visibility_timeout),
            "MessageRetentionPeriod": str(q.retention_seconds),
            "SqsManagedSseEnabled": "true",
        }
        if q.dead_letter:
            attributes["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": settings.queue_arn(q.dead_letter),
                    "maxReceiveCount": str(q.max_receive_count),
                }
            )
        out[q.logical_id] = sqs.create_queue(QueueName=q.name, Attributes=attributes)["QueueUrl"]
    # The free-plan queue is drained like a tenant queue: it needs the same not-empty alarm.
    cloudwatch.put_metric_alarm(**not_empty_alarm(settings, r.free_queue.name))
    b = r.payload_bucket
    try:
        if settings.region == "us-east-1":
            s3.create_bucket(Bucket=b.name)
        else:
            s3.create_bucket(Bucket=b.name, CreateBucketConfiguration={"LocationConstraint": settings.region})
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    s3.put_bucket_lifecycle_configuration(
        Bucket=b.name,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": f"expire-{prefix.strip('/')}",
                    "Status": "Enabled",
                    "Filter": {"Prefix": prefix},
                    "Expiration": {"Days": days},
                }
                for prefix, days in b.expiry_rules
            ]
        },
    )
    out[b.logical_id] = b.name
    if "sesv2" in clients:
        out["ConfigurationSet"] = configure_ses_events(settings, clients["sesv2"])
    return out


def configure_ses_events(settings: Settings, sesv2: Any) -> str:
    """The platform account's configuration set, publishing Send and Reject events to the events topic.

    (Tenants' own SES accounts get theirs from the sender on first use: chalicelib.ses_sender.)"""
    r = settings.resources
    ensure_configuration_set(sesv2, r.configuration_set, settings.topic_arn(r.events_topic.name))
    return r.configuration_set
