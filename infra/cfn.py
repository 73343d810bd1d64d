"""The CloudFormation Chalice does not write, generated from the same definitions as the local stack.

`chalice package --merge-template` merges `merge_template` into Chalice's SAM template, so the app's stack
holds the functions and what they use and may be replaced: topics (with the policies that let CloudWatch
alarms, SES and the stage's producer accounts publish to them), the dead-letter and free-plan queues, the
free queue's alarm, the payload bucket with its lifecycle rule, the SES configuration set whose event
destination is the events topic, the events queue subscribed to the events topic, and the key of the
topics others publish to. It also edits Chalice's functions: the account id (and, for those that make
links, the API's URL) goes into their environment, and their SNS subscriptions and SQS event sources refer
to the topics and queues of this template (so CloudFormation creates a topic before subscribing to it).
`data_template` is the data stack's: the tables (TTL, streams), the stage's secret for signed links and
the KMS key of the tenants' SES secrets, which outlive the app's stack.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from chalicelib.core.resources import (
    ASYNC_FUNCTION_IDS,
    FUNCTION_IDS,
    WEBHOOKS_MAX_CONCURRENCY,
    Resources,
    TopicDef,
    resources_for,
)
from chalicelib.queueing.tenant_queues import ALARM_PERIOD_S
from chalicelib.send.ses_sender import EVENT_DESTINATION, EVENT_TYPES
from infra.monitoring import Limits, monitoring
from infra.operator_env import stage_variables

CHALICE_CONFIG = Path(__file__).resolve().parents[1] / ".chalice" / "config.json"
# Chalice's logical ids of the functions and of their SNS event (CamelCase of the handler name).
SNS_HANDLERS = {
    "PrecompileEmail": "precompile_topic",
    "SendEmails": "send_topic",
}
# ses_events reads the events queue (the events topic's subscriber), reporting the records that failed.
SQS_HANDLERS = {"SesEvents": "events_queue", "DeliverWebhooks": "webhooks_queue"}
# webhook_events reads the ledger's stream (whose ARN exists only once the table does).
STREAM_HANDLERS = {"WebhookEvents": "ledger_table"}
# The functions that compose email, and so make links (unsubscribe, opens, clicks): each is told where the
# API is. Locally each function sees only its own environment, so one missing here fails its tests.
MAKES_LINKS = ("PrecompileEmail", "SendEmails", "RunDigest")
# Lambda's retries of an async event before it goes to the on-failure destination (its default, stated).
ASYNC_RETRIES = 2
ACCOUNT = "${AWS::AccountId}"
# What the data stack's resources do when the stack goes: kept, unless the stack's first create failed.
KEPT = "RetainExceptOnCreate"
# The key of the topics AWS services publish to. AWS's managed key (alias/aws/sns) would not do: its policy
# cannot be changed, and a service publishing to an encrypted topic needs kms:GenerateDataKey* and
# kms:Decrypt on its key, so CloudWatch's alarms and SES's events would be dropped without a word.
TOPICS_KEY = "TopicsKey"
# Which service publishes to which topic (the topic's policy and the key's policy both say so).
SERVICE_PUBLISHERS = {
    "send_topic": "cloudwatch.amazonaws.com",
    "events_topic": "ses.amazonaws.com",
    "alerts_topic": "cloudwatch.amazonaws.com",
}


def _publish_policy(topic_id: str, sid: str, service: str, condition: dict[str, Any]) -> dict[str, Any]:
    """A topic policy letting one AWS service publish to one topic, under a condition."""
    statement = {
        "Sid": sid,
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sns:Publish",
        "Resource": {"Ref": topic_id},
        "Condition": condition,
    }
    return {
        "Type": "AWS::SNS::TopicPolicy",
        "Properties": {
            "Topics": [{"Ref": topic_id}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [statement]},
        },
    }


def producer_accounts(stage: str, config_file: Path | None = None) -> tuple[str, ...]:
    """The AWS accounts, besides the stage's own, whose producers publish to PrecompileEmail: the stage's
    `producer_accounts` in `.chalice/config.json` (kept with the stage's other settings, so that no deploy
    can drop them by leaving out a flag)."""
    stages = json.loads((config_file or CHALICE_CONFIG).read_text())["stages"]
    accounts = tuple(str(a) for a in stages.get(stage, {}).get("producer_accounts", []))
    bad = [a for a in accounts if not re.fullmatch(r"\d{12}", a)]
    if bad:
        raise ValueError(f"stage {stage}: producer_accounts must be 12-digit AWS account ids, not {bad}")
    return accounts


def _producers_publish(r: Resources, producers: tuple[str, ...]) -> list[dict[str, Any]]:
    """Key-policy statements for PrecompileEmail's publishers: any principal of this account, and of each
    producer account, may use the key through SNS in this region, and for nothing else. (AWS's managed key
    alias/aws/sns allows this account only, and its policy cannot be changed to name another.)"""
    callers: list[Any] = [{"Ref": "AWS::AccountId"}, *producers]
    return [
        {
            "Sid": "PrecompileEmailPublishersThroughSns",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": ["kms:GenerateDataKey*", "kms:Decrypt"],
            "Resource": "*",
            "Condition": {
                "StringEquals": {
                    "kms:CallerAccount": callers,
                    "kms:ViaService": {"Fn::Sub": "sns.${AWS::Region}.amazonaws.com"},
                }
            },
        }
    ]


def _topic_key(r: Resources, producers: tuple[str, ...] = ()) -> dict[str, Any]:
    """The topics' key: the account administers it (through IAM, as with any key), and each service that
    publishes to a topic may use it to encrypt what it publishes there, and for nothing else."""
    statements: list[dict[str, Any]] = [
        {
            "Sid": "AccountAdministersThroughIam",
            "Effect": "Allow",
            "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}},
            "Action": "kms:*",
            "Resource": "*",
        }
    ]
    for attr, service in SERVICE_PUBLISHERS.items():
        statements.append(
            {
                "Sid": f"{service.split('.')[0].capitalize()}PublishesTo{getattr(r, attr).logical_id}",
                "Effect": "Allow",
                "Principal": {"Service": service},
                "Action": ["kms:GenerateDataKey*", "kms:Decrypt"],
                "Resource": "*",
            }
        )
    if producers:
        statements.extend(_producers_publish(r, producers))
    return {
        TOPICS_KEY: {
            "Type": "AWS::KMS::Key",
            "Properties": {
                "Description": f"{r.prefix}: the topics CloudWatch and SES publish to",
                "EnableKeyRotation": True,
                "KeyPolicy": {"Version": "2012-10-17", "Statement": statements},
            },
        }
    }


def _topic_key_id(r: Resources, t: TopicDef, producers: tuple[str, ...] = ()) -> Any:
    published_by_others = {getattr(r, attr).logical_id for attr in SERVICE_PUBLISHERS}
    if producers:
        published_by_others.add(r.precompile_topic.logical_id)
    return {"Ref": TOPICS_KEY} if t.logical_id in published_by_others else "alias/aws/sns"


def _producer_topic_policy(r: Resources, producers: tuple[str, ...]) -> dict[str, Any]:
    """The producer accounts may publish to PrecompileEmail (and do nothing else with it)."""
    statement = {
        "Sid": "ProducerAccountsPublish",
        "Effect": "Allow",
        "Principal": {"AWS": [{"Fn::Sub": f"arn:${{AWS::Partition}}:iam::{a}:root"} for a in producers]},
        "Action": "sns:Publish",
        "Resource": {"Ref": r.precompile_topic.logical_id},
    }
    return {
        "PrecompileEmailTopicPolicy": {
            "Type": "AWS::SNS::TopicPolicy",
            "Properties": {
                "Topics": [{"Ref": r.precompile_topic.logical_id}],
                "PolicyDocument": {"Version": "2012-10-17", "Statement": [statement]},
            },
        }
    }


def _topics(r: Resources, producers: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = _topic_key(r, producers)
    for t in r.topics:
        out[t.logical_id] = {
            "Type": "AWS::SNS::Topic",
            "Properties": {"TopicName": t.name, "KmsMasterKeyId": _topic_key_id(r, t, producers)},
        }
    if producers:
        out.update(_producer_topic_policy(r, producers))
    out["SendEmailsTopicPolicy"] = _publish_policy(
        r.send_topic.logical_id,
        "QueueAlarmsOfThisAccount",
        "cloudwatch.amazonaws.com",
        {"StringEquals": {"AWS:SourceAccount": {"Ref": "AWS::AccountId"}}},
    )
    out["OperatorAlertsTopicPolicy"] = _publish_policy(
        r.alerts_topic.logical_id,
        "StageAlarmsOfThisAccount",
        "cloudwatch.amazonaws.com",
        {"StringEquals": {"AWS:SourceAccount": {"Ref": "AWS::AccountId"}}},
    )
    # SES of any account, but only through a configuration set of the stage's name: paid tenants send
    # from their own accounts. The handler then trusts an event only from the account that sent that
    # tenant's email (chalicelib.feedback.ses_events).
    configuration_set = {"Fn::Sub": "arn:${AWS::Partition}:ses:*:*:configuration-set/" + r.configuration_set}
    out["SesEventsTopicPolicy"] = _publish_policy(
        r.events_topic.logical_id,
        "SesEventsThroughTheStagesConfigurationSet",
        "ses.amazonaws.com",
        {"ArnLike": {"AWS:SourceArn": configuration_set}},
    )
    return out


def _tables(r: Resources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in r.tables:
        props: dict[str, Any] = {
            "TableName": t.name,
            "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": t.key_schema(),
            "AttributeDefinitions": t.attribute_definitions(),
            "SSESpecification": {"SSEEnabled": True},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        }
        if t.ttl_attribute:
            props["TimeToLiveSpecification"] = {"AttributeName": t.ttl_attribute, "Enabled": True}
        if t.stream:
            props["StreamSpecification"] = {"StreamViewType": "NEW_AND_OLD_IMAGES"}
        if t.indexes:
            props["GlobalSecondaryIndexes"] = t.index_definitions()
        # The tenants' records outlive even the data stack, once it was created: deleting it by mistake keeps
        # them (`moonsend destroy --delete-data` deletes them itself). A create that fails takes them with it,
        # so that the next create does not meet a table of the same name.
        out[t.logical_id] = {
            "Type": "AWS::DynamoDB::Table",
            "DeletionPolicy": KEPT,
            "UpdateReplacePolicy": "Retain",
            "Properties": props,
        }
    return out


def _queues(r: Resources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for q in r.queues:
        props: dict[str, Any] = {
            "QueueName": q.name,
            "VisibilityTimeout": q.visibility_timeout,
            "MessageRetentionPeriod": q.retention_seconds,
            "SqsManagedSseEnabled": True,
        }
        if q.dead_letter:
            dlq = next(d for d in r.queues if d.name == q.dead_letter)
            props["RedrivePolicy"] = {
                "deadLetterTargetArn": {"Fn::GetAtt": [dlq.logical_id, "Arn"]},
                "maxReceiveCount": q.max_receive_count,
            }
        out[q.logical_id] = {"Type": "AWS::SQS::Queue", "Properties": props}
    out["FreePlanQueueAlarm"] = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmName": f"{r.free_queue.name}-not-empty",
            "Namespace": "AWS/SQS",
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": [r.free_queue.logical_id, "QueueName"]}}],
            "Statistic": "Maximum",
            "Period": ALARM_PERIOD_S,
            "EvaluationPeriods": 1,
            "DatapointsToAlarm": 1,
            "Threshold": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            "AlarmActions": [{"Ref": r.send_topic.logical_id}],
        },
    }
    return out


def _events_queue(r: Resources) -> dict[str, Any]:
    """The events topic delivers each event to the events queue as it is (raw: no SNS envelope), which
    lets the topic, and only it, send there."""
    topic, queue = r.events_topic.logical_id, r.events_queue.logical_id
    return {
        "SesEventsQueueSubscription": {
            "Type": "AWS::SNS::Subscription",
            "Properties": {
                "TopicArn": {"Ref": topic},
                "Protocol": "sqs",
                "Endpoint": {"Fn::GetAtt": [queue, "Arn"]},
                "RawMessageDelivery": True,
            },
        },
        "SesEventsQueuePolicy": {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "Queues": [{"Ref": queue}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "TheEventsTopicSendsHere",
                            "Effect": "Allow",
                            "Principal": {"Service": "sns.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": {"Fn::GetAtt": [queue, "Arn"]},
                            "Condition": {"ArnEquals": {"aws:SourceArn": {"Ref": topic}}},
                        }
                    ],
                },
            },
        },
    }


def _bucket(r: Resources) -> dict[str, Any]:
    b = r.payload_bucket
    return {
        b.logical_id: {
            "Type": "AWS::S3::Bucket",
            "Properties": {
                "BucketName": {"Fn::Sub": f"{r.prefix}-payloads-{ACCOUNT}"},
                "BucketEncryption": {
                    "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
                },
                "PublicAccessBlockConfiguration": {
                    "BlockPublicAcls": True,
                    "BlockPublicPolicy": True,
                    "IgnorePublicAcls": True,
                    "RestrictPublicBuckets": True,
                },
                # A browser's upload of recipients (the console's send page) POSTs its file here by a presigned
                # form, from the console's origin: S3 answers it (and its preflight) for any origin, since the
                # form's signed policy, not the origin, is what allows an upload (chalicelib.stores.upload_files).
                "CorsConfiguration": {
                    "CorsRules": [
                        {"AllowedMethods": ["POST"], "AllowedOrigins": ["*"], "AllowedHeaders": ["*"], "MaxAge": 3000}
                    ]
                },
                "LifecycleConfiguration": {
                    "Rules": [
                        {
                            "Id": f"expire-{prefix.strip('/')}",
                            "Status": "Enabled",
                            "Prefix": prefix,
                            "ExpirationInDays": days,
                        }
                        for prefix, days in b.expiry_rules
                    ]
                },
            },
        }
    }


def _ses(r: Resources) -> dict[str, Any]:
    return {
        "SesConfigurationSet": {
            "Type": "AWS::SES::ConfigurationSet",
            "Properties": {"Name": r.configuration_set},
        },
        "SesEventDestination": {
            "Type": "AWS::SES::ConfigurationSetEventDestination",
            "DependsOn": ["SesEventsTopicPolicy"],
            "Properties": {
                "ConfigurationSetName": {"Ref": "SesConfigurationSet"},
                "EventDestination": {
                    "Name": EVENT_DESTINATION,
                    "Enabled": True,
                    "MatchingEventTypes": [t.lower() for t in EVENT_TYPES],
                    "SnsDestination": {"TopicARN": {"Ref": r.events_topic.logical_id}},
                },
            },
        },
    }


def _secret(r: Resources) -> dict[str, Any]:
    """The key of the stage's signed links: kept with the data, so that the unsubscribe links already sent
    keep working across a destroy and a new deploy (CAN-SPAM asks for 30 days at least)."""
    return {
        "LinkSigningSecret": {
            "Type": "AWS::SecretsManager::Secret",
            "DeletionPolicy": KEPT,
            "UpdateReplacePolicy": "Retain",
            "Properties": {
                "Name": r.link_secret_name,
                "Description": "HMAC key of the stage's signed links (unsubscribe, tracking)",
                "GenerateSecretString": {"PasswordLength": 64, "ExcludePunctuation": True},
            },
        }
    }


TENANT_SECRETS_KEY = "TenantSecretsKey"


def _tenant_secrets_key(r: Resources) -> dict[str, Any]:
    """The key of the tenants' SES secrets (chalicelib.stores.tenant_secrets): kept with the tables whose
    rows it encrypts (a new key could not decrypt them). The account administers it through IAM, as any
    key; infra/iam.py lets precompile_email and send_emails use it, by its alias and for one tenant's
    encryption context at a time, and no other function."""
    return {
        TENANT_SECRETS_KEY: {
            "Type": "AWS::KMS::Key",
            "DeletionPolicy": KEPT,
            "UpdateReplacePolicy": "Retain",
            "Properties": {
                "Description": f"{r.prefix}: each tenant's SES secret in the tenants table",
                "EnableKeyRotation": True,
                "KeyPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "AccountAdministersThroughIam",
                            "Effect": "Allow",
                            "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}},
                            "Action": "kms:*",
                            "Resource": "*",
                        }
                    ],
                },
            },
        },
        "TenantSecretsKeyAlias": {
            "Type": "AWS::KMS::Alias",
            "DeletionPolicy": KEPT,
            "UpdateReplacePolicy": "Retain",
            "Properties": {"AliasName": r.tenant_secrets_alias, "TargetKeyId": {"Ref": TENANT_SECRETS_KEY}},
        },
    }


def _digest_scheduler(r: Resources) -> dict[str, Any]:
    """The role EventBridge Scheduler invokes run_digest with: each digest's schedule names it
    (chalicelib.digest.schedules). Trusted by Scheduler for this account's schedules only (the
    confused-deputy guard AWS's Scheduler guide gives)."""
    return {
        "DigestSchedulerRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "RoleName": r.digest_scheduler_role,
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "scheduler.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                            "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}},
                        }
                    ],
                },
                "Policies": [
                    {
                        "PolicyName": "InvokeRunDigest",
                        "PolicyDocument": {
                            "Version": "2012-10-17",
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Action": "lambda:InvokeFunction",
                                    "Resource": {"Fn::GetAtt": ["RunDigest", "Arn"]},
                                }
                            ],
                        },
                    }
                ],
            },
        }
    }


def _function_edits(r: Resources) -> dict[str, Any]:
    """What the merge adds to Chalice's functions: their names, the account id, where links in emails
    point, and where an async event goes when every attempt failed.

    Names are explicit (`moonsend-dev-send_emails`): the sweeper, the releaser, the API and send_emails
    itself invoke send_emails by name, and IAM grants name it; a name CloudFormation made up would be known
    to none of them. The API's own handler is not told its URL: it only checks links, and its URL depends
    on it."""
    out: dict[str, Any] = {}
    failed = {"Fn::GetAtt": [r.failed_invocations_queue.logical_id, "Arn"]}
    for fn, handler in FUNCTION_IDS.items():
        variables: dict[str, Any] = {"MOONSEND_ACCOUNT_ID": {"Ref": "AWS::AccountId"}}
        if fn in MAKES_LINKS:
            variables["MOONSEND_API_URL"] = {
                "Fn::Sub": "https://${RestAPI}.execute-api.${AWS::Region}.${AWS::URLSuffix}/api"
            }
        props: dict[str, Any] = {"FunctionName": r.function_name(handler), "Environment": {"Variables": variables}}
        if fn == "UploadJobs":
            # An upload's recipients and refused rows are written to /tmp before they go to S3: a file of 1 GiB
            # may make more than the 512 MB Lambda gives by default (each row's column names repeated).
            props["EphemeralStorage"] = {"Size": UPLOAD_JOBS_TMP_MB}
        if fn in ASYNC_FUNCTION_IDS:
            props["EventInvokeConfig"] = {
                "MaximumRetryAttempts": ASYNC_RETRIES,
                "DestinationConfig": {"OnFailure": {"Type": "SQS", "Destination": failed}},
            }
        out[fn] = {"Properties": props}
    # A name of its own (SAM would take the API's from its Swagger title; CloudFormation stand-ins need one).
    out["RestAPI"] = {"Properties": {"Name": r.prefix}}
    return out


# The ledger stream's mapping gives up on a record rather than hold every tenant's events behind it for
# the stream's 24 hours: retried at most this many times (a batch that raises is halved first, which
# spends none of them), and never once it is older than this. What it gives up on goes to the on-failure
# queue as Lambda's shard pointers; its events webhook_events has already held for replay.
STREAM_RETRIES = 10
UPLOAD_JOBS_TMP_MB = 4096
STREAM_MAX_RECORD_AGE_S = 6 * 3600


def subscribe_to_own_topics(template: dict[str, Any], stage: str) -> dict[str, Any]:
    """Point Chalice's SNS subscriptions, SQS event sources and stream at this template's topics, queues
    and ledger table, after the merge (and mend one reference Chalice gets wrong).

    Chalice writes the topic or queue as an ARN string built from its name, which does not make
    CloudFormation create it first; a merge cannot replace that value (it merges dicts key by key), so
    the packaged template is edited here instead. Chalice has no setting for partial batch responses:
    they are switched on here too, or Lambda would take the handler's answer for success and delete the
    records it names as failed. Nor for a stream's retries, bisecting and on-failure destination."""
    r = resources_for("moonsend", stage, ACCOUNT)
    for fn, attr in SNS_HANDLERS.items():
        event = template["Resources"][fn]["Properties"]["Events"][f"{fn}SnsSubscription"]
        event["Properties"]["Topic"] = {"Ref": getattr(r, attr).logical_id}
    for fn, attr in SQS_HANDLERS.items():
        event = template["Resources"][fn]["Properties"]["Events"][f"{fn}SqsEventSource"]
        event["Properties"]["Queue"] = {"Fn::GetAtt": [getattr(r, attr).logical_id, "Arn"]}
        event["Properties"]["FunctionResponseTypes"] = ["ReportBatchItemFailures"]
    # Chalice has no setting for an SQS source's most concurrent invocations either.
    deliveries = template["Resources"]["DeliverWebhooks"]["Properties"]["Events"]["DeliverWebhooksSqsEventSource"]
    deliveries["Properties"]["ScalingConfig"] = {"MaximumConcurrency": WEBHOOKS_MAX_CONCURRENCY}
    for fn, attr in STREAM_HANDLERS.items():
        (event,) = (e for e in template["Resources"][fn]["Properties"]["Events"].values() if e["Type"] == "DynamoDB")
        # The table is the data stack's: its stream's ARN is that stack's export.
        event["Properties"]["Stream"] = {"Fn::ImportValue": stream_export(r, getattr(r, attr))}
        event["Properties"].update(
            FunctionResponseTypes=["ReportBatchItemFailures"],
            BisectBatchOnFunctionError=True,
            MaximumRetryAttempts=STREAM_RETRIES,
            MaximumRecordAgeInSeconds=STREAM_MAX_RECORD_AGE_S,
            # No `Type`: SAM would add its own grant to the role; infra/iam.py gives the one it needs.
            DestinationConfig={
                "OnFailure": {"Destination": {"Fn::GetAtt": [r.failed_invocations_queue.logical_id, "Arn"]}}
            },
        )
    # Chalice 1.34 names the API function `APIHandler` but its log group `${ApiHandler}`.
    group = template["Resources"].get("ApiHandlerLogGroup", {}).get("Properties", {})
    if group.get("LogGroupName") == {"Fn::Sub": "/aws/lambda/${ApiHandler}"}:
        group["LogGroupName"] = {"Fn::Sub": "/aws/lambda/${APIHandler}"}
    return template


def stream_export(r: Resources, table: Any) -> str:
    """The name under which the data stack exports a table's stream ARN (exports are per account and region)."""
    return f"{r.prefix}-{table.logical_id}-StreamArn"


def data_stack_name(stage: str) -> str:
    return f"moonsend-{stage}-data"


def data_template(stage: str) -> dict[str, Any]:
    """The stage's data stack: the tables and the link-signing key, which outlive the app's stack.

    Stateful resources in a stack of their own (AWS's advice for CDK apps too): the app's stack can be
    destroyed, fail its first create or be replaced, and a new one finds the tenants' records, and the key
    of every link already sent, where they were. Each resource is kept even if this stack is deleted,
    unless its first create failed (`RetainExceptOnCreate`)."""
    r = resources_for("moonsend", stage, ACCOUNT)
    resources: dict[str, Any] = {**_tables(r), **_secret(r), **_tenant_secrets_key(r)}
    outputs: dict[str, Any] = {
        f"{t.logical_id}StreamArn": {
            "Value": {"Fn::GetAtt": [t.logical_id, "StreamArn"]},
            "Export": {"Name": stream_export(r, t)},
        }
        for t in r.tables
        if t.stream
    }
    # The app's functions find the key by its alias (infra/iam.py grants by it); its ARN for operators.
    outputs["TenantSecretsKeyArn"] = {"Value": {"Fn::GetAtt": [TENANT_SECRETS_KEY, "Arn"]}}
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": f"moonsend ({stage}): the tenants' records and the links' key, kept across deploys",
        "Resources": resources,
        "Outputs": outputs,
    }


def merge_template(stage: str) -> dict[str, Any]:
    """The template `chalice package --merge-template` merges into Chalice's for this stage (the app's
    stack: everything but the data stack's tables and key)."""
    r = resources_for("moonsend", stage, ACCOUNT)
    resources: dict[str, Any] = {}
    parts = (
        _topics(r, producer_accounts(stage)),
        _queues(r),
        _events_queue(r),
        _bucket(r),
        _ses(r),
        _digest_scheduler(r),
        _function_edits(r),
    )
    for part in parts:
        resources.update(part)
    watch = monitoring(r, Limits.of(stage_variables(stage)))
    resources.update(watch["Resources"])
    return {
        "Description": f"moonsend ({stage}): multi-tenant email sending on SES",
        "Parameters": watch["Parameters"],
        "Conditions": watch["Conditions"],
        "Resources": resources,
        "Outputs": {
            "PrecompileEmailTopicArn": {"Value": {"Ref": r.precompile_topic.logical_id}},
            "DeadLetterQueueUrl": {"Value": {"Ref": r.dead_letter_queue.logical_id}},
            "FailedInvocationsQueueUrl": {"Value": {"Ref": r.failed_invocations_queue.logical_id}},
            "OperatorAlertsTopicArn": {"Value": {"Ref": r.alerts_topic.logical_id}},
            "DashboardName": {"Value": {"Ref": "Dashboard"}},
        },
    }
