"""The CloudFormation Chalice does not write, generated from the same definitions as the local stack.

`chalice package --merge-template` merges this into Chalice's SAM template, so one stack holds the
functions and everything they use: topics (with the policies that let CloudWatch alarms and SES publish
to them), tables with TTL, the dead-letter and free-plan queues, the free queue's alarm, the payload
bucket with its lifecycle rule, the SES configuration set whose event destination is the events topic,
and the stage's secret for signed links. It also edits Chalice's functions: the account id goes into
their environment, and their SNS subscriptions refer to the topics of this template (so CloudFormation
creates a topic before subscribing to it).
"""

from __future__ import annotations

from typing import Any

from chalicelib.core.resources import ASYNC_FUNCTION_IDS, FUNCTION_IDS, Resources, resources_for
from chalicelib.queueing.tenant_queues import ALARM_PERIOD_S
from chalicelib.send.ses_sender import EVENT_DESTINATION, EVENT_TYPES

# Chalice's logical ids of the functions and of their SNS event (CamelCase of the handler name).
SNS_HANDLERS = {
    "PrecompileEmail": "precompile_topic",
    "SendEmails": "send_topic",
    "SesEvents": "events_topic",
}
# Lambda's retries of an async event before it goes to the on-failure destination (its default, stated).
ASYNC_RETRIES = 2
ACCOUNT = "${AWS::AccountId}"


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


def _topics(r: Resources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in r.topics:
        out[t.logical_id] = {
            "Type": "AWS::SNS::Topic",
            "Properties": {"TopicName": t.name, "KmsMasterKeyId": "alias/aws/sns"},
        }
    out["SendEmailsTopicPolicy"] = _publish_policy(
        r.send_topic.logical_id,
        "QueueAlarmsOfThisAccount",
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
        # The ledger and counters are the tenants' records: kept if the stack goes (`make destroy` says so).
        out[t.logical_id] = {
            "Type": "AWS::DynamoDB::Table",
            "DeletionPolicy": "Retain",
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
    return {
        "LinkSigningSecret": {
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {
                "Name": r.link_secret_name,
                "Description": "HMAC key of the stage's signed links (unsubscribe, tracking)",
                "GenerateSecretString": {"PasswordLength": 64, "ExcludePunctuation": True},
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
        if fn in ("PrecompileEmail", "SendEmails"):
            variables["MOONSEND_API_URL"] = {
                "Fn::Sub": "https://${RestAPI}.execute-api.${AWS::Region}.${AWS::URLSuffix}/api"
            }
        props: dict[str, Any] = {"FunctionName": r.function_name(handler), "Environment": {"Variables": variables}}
        if fn in ASYNC_FUNCTION_IDS:
            props["EventInvokeConfig"] = {
                "MaximumRetryAttempts": ASYNC_RETRIES,
                "DestinationConfig": {"OnFailure": {"Type": "SQS", "Destination": failed}},
            }
        out[fn] = {"Properties": props}
    # A name of its own (SAM would take the API's from its Swagger title; CloudFormation stand-ins need one).
    out["RestAPI"] = {"Properties": {"Name": r.prefix}}
    return out


def subscribe_to_own_topics(template: dict[str, Any], stage: str) -> dict[str, Any]:
    """Point Chalice's SNS subscriptions at this template's topics (`Ref`), after the merge (and mend one
    reference Chalice gets wrong).

    Chalice writes the topic as an ARN string built from its name, which does not make CloudFormation
    create the topic first; a merge cannot replace that value (it merges dicts key by key), so the
    packaged template is edited here instead."""
    r = resources_for("moonsend", stage, ACCOUNT)
    for fn, attr in SNS_HANDLERS.items():
        event = template["Resources"][fn]["Properties"]["Events"][f"{fn}SnsSubscription"]
        event["Properties"]["Topic"] = {"Ref": getattr(r, attr).logical_id}
    # Chalice 1.34 names the API function `APIHandler` but its log group `${ApiHandler}`.
    group = template["Resources"].get("ApiHandlerLogGroup", {}).get("Properties", {})
    if group.get("LogGroupName") == {"Fn::Sub": "/aws/lambda/${ApiHandler}"}:
        group["LogGroupName"] = {"Fn::Sub": "/aws/lambda/${APIHandler}"}
    return template


def merge_template(stage: str) -> dict[str, Any]:
    """The template `chalice package --merge-template` merges into Chalice's for this stage."""
    r = resources_for("moonsend", stage, ACCOUNT)
    resources: dict[str, Any] = {}
    for part in (_topics(r), _tables(r), _queues(r), _bucket(r), _ses(r), _secret(r), _function_edits(r)):
        resources.update(part)
    return {
        "Description": f"moonsend ({stage}): multi-tenant email sending on SES",
        "Resources": resources,
        "Outputs": {
            "PrecompileEmailTopicArn": {"Value": {"Ref": r.precompile_topic.logical_id}},
            "DeadLetterQueueUrl": {"Value": {"Ref": r.dead_letter_queue.logical_id}},
            "FailedInvocationsQueueUrl": {"Value": {"Ref": r.failed_invocations_queue.logical_id}},
        },
    }
