"""Deployment, checked without an AWS account: the packaged templates, their IAM, the bundle, the plans."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chalicelib.core.resources import FUNCTION_IDS, resources_for
from infra import api_gateway, iam
from infra.deploy import deploy_plan, destroy_plan
from infra.package import package
from infra.smoke import smoke_messages

pytestmark = pytest.mark.package
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["dev", "prod"])
def packaged(request, tmp_path_factory):
    report = package(request.param, tmp_path_factory.mktemp(request.param) / "out")
    return request.param, report, json.loads(Path(report.template).read_text())


@pytest.fixture(scope="module")
def data(packaged):
    """The data stack's template of the same stage (tables, the links' key)."""
    return json.loads(Path(packaged[1].data_template).read_text())


@pytest.mark.parametrize("which", ["template", "data_template"])
def test_the_packaged_templates_pass_cfn_lint(packaged, which):
    _stage, report, _template = packaged
    lint = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), getattr(report, which)], capture_output=True, text=True
    )
    assert lint.returncode & 2 == 0, lint.stdout  # bit 2: errors (4 and 8 are warnings and notes)
    assert lint.returncode == 0, lint.stdout  # and, today, not even a warning


def test_the_app_template_is_too_large_to_send_inline_and_both_fit_by_url(packaged, data):
    """CloudFormation's quotas: 51,200 bytes in TemplateBody, 1 MB by TemplateURL, 500 resources, 200
    outputs. The app's template is over the first, so deploy must upload it (the local stack refuses
    it inline too, as CloudFormation does)."""
    _stage, _report, template = packaged
    compact = len(json.dumps(template, separators=(",", ":")).encode())
    assert compact > 51_200
    for t in (template, data):
        assert len(json.dumps(t, separators=(",", ":")).encode()) < 1_000_000
        assert len(t["Resources"]) <= 500 and len(t.get("Outputs", {})) <= 200


def test_the_data_stack_keeps_the_tables_and_the_links_key_unless_its_first_create_fails(packaged, data):
    stage, _report, template = packaged
    r = resources_for("moonsend", stage, "${AWS::AccountId}")
    kept = {k: v for k, v in data["Resources"].items()}
    assert {v["Properties"].get("TableName") for v in kept.values()} - {None} == {t.name for t in r.tables}
    for logical_id, res in kept.items():
        assert res["DeletionPolicy"] == "RetainExceptOnCreate", logical_id
        assert res["UpdateReplacePolicy"] == "Retain", logical_id
    assert kept["LinkSigningSecret"]["Properties"]["Name"] == r.link_secret_name
    # None of it is in the app's stack, which a destroy deletes.
    assert not any(
        v["Type"] in ("AWS::DynamoDB::Table", "AWS::SecretsManager::Secret") for v in template["Resources"].values()
    )
    # The ledger's stream reaches the app's stack as the data stack's export.
    (export,) = [o["Export"]["Name"] for o in data["Outputs"].values() if "Export" in o]
    (stream,) = template["Resources"]["WebhookEvents"]["Properties"]["Events"].values()
    assert stream["Properties"]["Stream"] == {"Fn::ImportValue": export}


def test_the_tenants_secrets_key_is_the_data_stacks_and_only_the_sender_and_precompile_may_use_it(packaged, data):
    """The key outlives the app's stack with the rows it encrypts; a role that only tracks queues (the jobs)
    reads the tenants table but may not decrypt what it holds."""
    stage, _report, template = packaged
    r = resources_for("moonsend", stage, "${AWS::AccountId}")
    key, alias = data["Resources"]["TenantSecretsKey"], data["Resources"]["TenantSecretsKeyAlias"]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True
    assert alias["Properties"] == {"AliasName": r.tenant_secrets_alias, "TargetKeyId": {"Ref": "TenantSecretsKey"}}
    assert not any(v["Type"] == "AWS::KMS::Alias" for v in template["Resources"].values())
    granted = {}
    for role_id, res in template["Resources"].items():
        if res["Type"] != "AWS::IAM::Role":
            continue
        for policy in res["Properties"].get("Policies", []):
            for st in policy["PolicyDocument"]["Statement"]:
                actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                if any(a.startswith("kms:") for a in actions):
                    granted[role_id] = (sorted(actions), st["Condition"])
    condition = {
        "ForAnyValue:StringEquals": {"kms:ResourceAliases": r.tenant_secrets_alias},
        "Null": {"kms:EncryptionContext:moonsend:tenant": "false"},
        "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["moonsend:tenant"]},  # and no other key
    }
    assert granted == {
        "PrecompileEmailRole": (["kms:Decrypt", "kms:Encrypt"], condition),
        "SendEmailsRole": (["kms:Decrypt"], condition),
    }


def test_each_function_logs_only_to_its_own_log_group_which_the_stack_makes_with_retention(packaged):
    """No role may create a log group: one made by a function outside the stack has no retention, and
    blocks the next create of the stack's group of that name."""
    stage, _report, template = packaged
    r = resources_for("moonsend", stage)
    groups = {
        v["Properties"]["LogGroupName"]["Fn::Sub"]: v["Properties"]["RetentionInDays"]
        for v in template["Resources"].values()
        if v["Type"] == "AWS::Logs::LogGroup"
    }
    functions = [k for k, v in template["Resources"].items() if v["Type"] == "AWS::Serverless::Function"]
    assert set(groups) == {"/aws/lambda/${" + fn + "}" for fn in functions}
    assert set(groups.values()) == {14 if stage == "dev" else 90}
    for st in _statements(template):
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        assert "logs:CreateLogGroup" not in actions
        if any(a.startswith("logs:") for a in actions):
            assert all(res.split(":log-group:/aws/lambda/")[1].startswith(r.prefix) for res in st["Resource"])


def _statements(template):
    for res in template["Resources"].values():
        if res["Type"] == "AWS::IAM::Role":
            for policy in res["Properties"].get("Policies", []):
                yield from policy["PolicyDocument"]["Statement"]


def test_no_policy_grants_a_wildcard_action(packaged):
    _stage, _report, template = packaged
    statements = list(_statements(template))
    assert len(statements) > 10
    for st in statements:
        assert "NotAction" not in st
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        for action in actions:
            assert action != "*" and not action.endswith(":*") and "*" not in action.split(":")[1], st
        if st["Resource"] == "*":  # only the actions AWS gives no resource-level permission for
            assert set(actions) <= {
                *("sqs:ListQueues", "ses:GetAccount", "dynamodb:ListStreams"),
                *("cloudwatch:GetMetricData", "cloudwatch:PutMetricData"),  # no resource types (AWS SAR)
            }, st


def test_each_function_has_its_own_role_with_only_its_own_actions(packaged):
    _stage, _report, template = packaged
    roles = {k: v for k, v in template["Resources"].items() if v["Type"] == "AWS::IAM::Role"}
    # The role EventBridge Scheduler invokes run_digest with: Scheduler's for this account, that one action.
    scheduler = roles.pop("DigestSchedulerRole")["Properties"]
    (trust,) = scheduler["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    (grant,) = scheduler["Policies"][0]["PolicyDocument"]["Statement"]
    assert (grant["Action"], grant["Resource"]) == ("lambda:InvokeFunction", {"Fn::GetAtt": ["RunDigest", "Arn"]})
    assert scheduler["RoleName"] == f"moonsend-{_stage}-digest-scheduler"
    assert set(roles) == {
        "RunDigestRole",
        "PrecompileEmailRole",
        "SendEmailsRole",
        "SesEventsRole",
        "SesSendingStatusRole",
        "SweepQueuesRole",
        "ReleaseScheduledRole",
        "RetireIdleQueuesRole",
        "ReconcileDeadLettersRole",
        "RecountCampaignsRole",
        "WebhookEventsRole",
        "DeliverWebhooksRole",
        "WebhookJobsRole",
        "UploadJobsRole",
        "ApiHandlerRole",
    }

    def actions(role):
        doc = roles[role]["Properties"]["Policies"][0]["PolicyDocument"]
        return {
            a
            for st in doc["Statement"]
            if st.get("Sid") != "OnFailureDestination"  # Lambda's own use of the role (checked below)
            for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
        }

    assert "ses:SendEmail" in actions("SendEmailsRole") and "ses:SendEmail" not in actions("PrecompileEmailRole")
    # Only precompile_email puts schedules, and passes only the scheduler's role; a digest's run cannot send.
    assert {r for r in roles if "scheduler:CreateSchedule" in actions(r)} == {"PrecompileEmailRole"}
    passes = [
        st["Resource"]
        for r in roles
        for st in roles[r]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        if "iam:PassRole" in st["Action"]
    ]
    assert passes == [[f"arn:aws:iam::*:role/moonsend-{_stage}-digest-scheduler"]]
    assert "ses:SendEmail" not in actions("RunDigestRole") and "sqs:SendMessage" in actions("RunDigestRole")
    # The recount reads the ledger and writes only the counters and its notes: no email, no queue.
    assert {a.split(":")[0] for a in actions("RecountCampaignsRole")} == {"dynamodb", "logs"}
    assert "dynamodb:PutItem" not in actions("RecountCampaignsRole")
    assert "sqs:CreateQueue" in actions("PrecompileEmailRole") and "sqs:CreateQueue" not in actions("SendEmailsRole")
    # ses_events neither sends nor invokes; of SES it reads only its SES tenants' status (the guard).
    ses_events_ses = {a for a in actions("SesEventsRole") if a.startswith(("ses:", "lambda:"))}
    assert ses_events_ses == {"ses:GetTenant", "ses:GetReputationEntity"}
    # SES's status events are followed by reading SES's status: the follower cannot send or set SES's status,
    # and invokes only the sender (a drain for the email it puts back).
    status_ses = {a for a in actions("SesSendingStatusRole") if a.startswith(("ses:", "lambda:"))}
    assert status_ses == {"ses:GetTenant", "ses:GetReputationEntity", "lambda:InvokeFunction"}
    # ses_events reads its own queue, as Lambda's poller does with the role, and no other queue.
    sqs = [
        (st["Action"], st["Resource"])
        for st in roles["SesEventsRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        if any(a.startswith("sqs:") for a in st["Action"])
    ]
    events_queue = f"arn:aws:sqs:*:*:moonsend-{_stage}-ses-events"
    assert sqs == [(["sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"], [events_queue])]
    # Lambda puts an async function's events that failed for good on the on-failure queue, and only there.
    for name, role in roles.items():
        grants = [
            (st["Action"], st["Resource"])
            for st in role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
            if st.get("Sid") == "OnFailureDestination"
        ]
        want = (
            []
            if name in ("ApiHandlerRole", "SesEventsRole", "WebhookEventsRole", "DeliverWebhooksRole")
            else [(["sqs:SendMessage"], [f"arn:aws:sqs:*:*:moonsend-{_stage}-failed-invocations"])]
        )
        assert grants == want, name
    assert "ses:SendEmail" not in actions("ReleaseScheduledRole") and "sqs:SendMessage" in actions(
        "ReleaseScheduledRole"
    )
    # Only the idle-queue job deletes queues and alarms, and it can neither send nor put email on a queue.
    deleters = {r for r in roles if {"sqs:DeleteQueue", "cloudwatch:DeleteAlarms"} & actions(r)}
    assert deleters == {"RetireIdleQueuesRole"}
    assert not {"sqs:SendMessage", "ses:SendEmail"} & actions("RetireIdleQueuesRole")
    # The dead-letter reconciler reads dead letters and records outcomes; it cannot send, enqueue or delete.
    assert "sqs:ReceiveMessage" in actions("ReconcileDeadLettersRole")
    assert not {"sqs:SendMessage", "sqs:DeleteMessage", "ses:SendEmail"} & actions("ReconcileDeadLettersRole")
    # Webhooks: the ledger's stream is read by webhook_events alone, which may read endpoints and put
    # deliveries, never change the ledger or send; deliver_webhooks reads the delivery queue and nothing else.
    stream = f"arn:aws:dynamodb:*:*:table/moonsend-{_stage}-ledger/stream/*"
    readers = {r for r in roles if "dynamodb:GetRecords" in actions(r)}
    assert readers == {"WebhookEventsRole"}
    (reads,) = [
        st["Resource"]
        for st in roles["WebhookEventsRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        if "dynamodb:GetRecords" in st["Action"]
    ]
    assert reads == [stream]
    assert not {"dynamodb:UpdateItem", "ses:SendEmail", "sqs:ReceiveMessage"} & actions("WebhookEventsRole")
    # The endpoints' table holds their secrets: the webhook functions never put a row there (parked
    # deliveries have their own table), and only deliver_webhooks may update one (to disable it).
    endpoints_table = f"arn:aws:dynamodb:*:*:table/moonsend-{_stage}-webhooks"

    def writes_endpoints(role: str) -> set[str]:
        return {
            a
            for st in roles[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
            if endpoints_table in st["Resource"]
            for a in st["Action"]
            if a in ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
        }

    assert writes_endpoints("WebhookEventsRole") == set()
    assert writes_endpoints("DeliverWebhooksRole") == {"dynamodb:UpdateItem"}
    deliveries = f"arn:aws:sqs:*:*:moonsend-{_stage}-webhook-deliveries"
    deliverer_queues = {
        r
        for st in roles["DeliverWebhooksRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        if any(a.startswith("sqs:") for a in st["Action"])
        for r in st["Resource"]
    }
    # Its SQS actions, SendMessage among them (the deliveries of events it keeps later), reach its own queue only.
    assert deliverer_queues == {deliveries}
    assert not {"ses:SendEmail", "lambda:InvokeFunction"} & actions("DeliverWebhooksRole")
    # webhook_jobs replays and deletes parked deliveries: it never touches the endpoints' table (their secrets),
    # puts deliveries on their queue only, and invokes only itself (a job out of time goes on).
    assert writes_endpoints("WebhookJobsRole") == set() and not any(
        endpoints_table in st["Resource"]
        for st in roles["WebhookJobsRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    )
    jobs_statements = roles["WebhookJobsRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    assert {r for st in jobs_statements if "sqs:SendMessage" in st["Action"] for r in st["Resource"]} == {
        deliveries,
        f"arn:aws:sqs:*:*:moonsend-{_stage}-failed-invocations",
    }
    assert [st["Resource"] for st in jobs_statements if "lambda:InvokeFunction" in st["Action"]] == [
        [f"arn:aws:lambda:*:*:function:moonsend-{_stage}-webhook_jobs"]
    ]
    assert "ses:SendEmail" not in actions("WebhookJobsRole")
    # The API starts jobs; it no longer puts deliveries on the queue or deletes parked ones itself.
    api_statements = roles["ApiHandlerRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    assert not any(deliveries in st["Resource"] for st in api_statements)
    parked_table = f"arn:aws:dynamodb:*:*:table/moonsend-{_stage}-parked-deliveries"
    assert not any(
        parked_table in st["Resource"] and {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} & set(st["Action"])
        for st in api_statements
    )
    # SES tenants: only the sender creates them and associates resources; the guard and the API read status.
    assert {r for r in roles if "ses:CreateTenant" in actions(r)} == {"SendEmailsRole"}
    assert {r for r in roles if "ses:GetReputationEntity" in actions(r)} == {
        "SendEmailsRole",
        "SesEventsRole",
        "SesSendingStatusRole",
        "ApiHandlerRole",
    }
    tenant_grants = {
        res
        for r in roles
        for st in roles[r]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        if any(a in ("ses:CreateTenant", "ses:GetTenant") for a in st["Action"])
        for res in st["Resource"]
    }
    assert tenant_grants == {f"arn:aws:ses:*:*:tenant/moonsend-{_stage}-*"}


def test_every_function_is_told_the_account_id(packaged):
    """Bucket names and topic ARNs are built from it: without it a function would name another account's."""
    _stage, _report, template = packaged
    functions = {k: v for k, v in template["Resources"].items() if v["Type"] == "AWS::Serverless::Function"}
    assert len(functions) == len(FUNCTION_IDS) == 15
    for name, fn in functions.items():
        assert fn["Properties"]["Environment"]["Variables"]["MOONSEND_ACCOUNT_ID"] == {"Ref": "AWS::AccountId"}, name


def test_no_deployed_function_may_deliver_webhooks_to_loopback(packaged):
    """A loopback receiver is for a stack on this machine only (its environment sets the setting); a deployed
    stage's template never does, so a tenant's `http://127.0.0.1` endpoint is refused there."""
    _stage, _report, template = packaged
    functions = [v for v in template["Resources"].values() if v["Type"] == "AWS::Serverless::Function"]
    assert len(functions) == len(FUNCTION_IDS)
    for fn in functions:
        assert "MOONSEND_WEBHOOK_ALLOW_LOOPBACK" not in fn["Properties"]["Environment"]["Variables"]


def test_every_function_that_composes_email_is_told_where_links_point(packaged):
    from infra.cfn import MAKES_LINKS

    _stage, _report, template = packaged
    for fn in (*MAKES_LINKS, "APIHandler", "SweepQueues"):
        env = template["Resources"][fn]["Properties"]["Environment"]["Variables"]
        assert ("MOONSEND_API_URL" in env) == (fn in MAKES_LINKS), fn
    assert {"PrecompileEmail", "SendEmails", "RunDigest"} <= set(MAKES_LINKS)


def test_every_topic_queue_and_table_the_code_names_is_in_the_templates(packaged, data):
    stage, _report, template = packaged
    r = resources_for("moonsend", stage, "${AWS::AccountId}")
    names = {}
    for res in [*template["Resources"].values(), *data["Resources"].values()]:
        p = res.get("Properties", {})
        for key in ("TopicName", "TableName", "QueueName", "Name"):
            if isinstance(p.get(key), str):
                names[p[key]] = res["Type"]
    for topic in r.topics:
        assert names.get(topic.name) == "AWS::SNS::Topic"
    for table in r.tables:
        assert names.get(table.name) == "AWS::DynamoDB::Table"
    for queue in r.queues:
        assert names.get(queue.name) == "AWS::SQS::Queue"
    assert names.get(r.configuration_set) == "AWS::SES::ConfigurationSet"
    bucket = template["Resources"][r.payload_bucket.logical_id]["Properties"]["BucketName"]
    assert bucket == {"Fn::Sub": r.payload_bucket.name}  # the account id filled in by CloudFormation


def test_subscriptions_refer_to_the_templates_own_topics(packaged):
    _stage, _report, template = packaged
    for fn, topic in (("PrecompileEmail", "PrecompileEmailTopic"), ("SendEmails", "SendEmailsTopic")):
        event = template["Resources"][fn]["Properties"]["Events"][f"{fn}SnsSubscription"]
        assert event["Properties"]["Topic"] == {"Ref": topic}
        env = template["Resources"][fn]["Properties"]["Environment"]["Variables"]
        assert env["MOONSEND_ACCOUNT_ID"] == {"Ref": "AWS::AccountId"}
    events = template["Resources"]["SesEvents"]["Properties"]["Events"]["SesEventsSqsEventSource"]["Properties"]
    assert events["Queue"] == {"Fn::GetAtt": ["SesEventsQueue", "Arn"]}
    assert events["FunctionResponseTypes"] == ["ReportBatchItemFailures"]  # else Lambda deletes failed records
    (deliveries,) = template["Resources"]["DeliverWebhooks"]["Properties"]["Events"].values()
    assert deliveries["Properties"]["Queue"] == {"Fn::GetAtt": ["WebhooksQueue", "Arn"]}
    assert deliveries["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert deliveries["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 20}  # a webhook flood's ceiling
    # The ledger's stream, which exists once the table does: the data stack's export, not app.py's placeholder.
    (stream,) = template["Resources"]["WebhookEvents"]["Properties"]["Events"].values()
    assert stream["Type"] == "DynamoDB" and "Fn::ImportValue" in stream["Properties"]["Stream"]
    assert stream["Properties"]["StartingPosition"] == "TRIM_HORIZON"
    # A record that keeps failing holds every tenant's events behind it: failures reported per record,
    # a batch that raises halved, retries and age bounded, and what is given up on told to the on-failure
    # queue (its events are parked by webhook_events itself; Lambda sends only where they were).
    assert stream["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert stream["Properties"]["BisectBatchOnFunctionError"] is True
    assert stream["Properties"]["MaximumRetryAttempts"] == 10
    assert stream["Properties"]["MaximumRecordAgeInSeconds"] == 6 * 3600
    assert stream["Properties"]["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": ["FailedInvocationsQueue", "Arn"]}}
    }


def test_api_gateway_answers_what_no_route_takes_as_problems_and_sam_keeps_it_in_the_rest_api(packaged):
    """Every path's other methods go to the API's function (its router answers 405 with Allow), and every
    gateway response type is the template's; after AWS's SAM transform (aws-sam-translator, nobody's here)
    both are in the RestApi's Body, so they deploy with the API."""
    from infra.local.cloudformation import translate

    stage, report, template = packaged
    body = template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]
    for path, operations in body["paths"].items():
        own = [op for method, op in operations.items() if method in api_gateway.HTTP_METHODS]
        refusal = operations[api_gateway.ANY_METHOD][api_gateway.INTEGRATION]
        assert all(op[api_gateway.INTEGRATION] == refusal for op in own), path
        assert refusal["type"] == "aws_proxy" and "APIHandler.Arn" in refusal["uri"]["Fn::Sub"], path
    assert set(body[api_gateway.GATEWAY_RESPONSES]) == set(api_gateway.ANSWERS)

    _plan, sent = deploy_plan(stage, Path(report.template), Path(report.bundle), "artifacts", region="eu-west-1")
    translated = translate(sent, "eu-west-1")["Resources"]
    (rest_api,) = (r for r in translated.values() if r["Type"] == "AWS::ApiGateway::RestApi")
    assert rest_api["Properties"]["Body"][api_gateway.GATEWAY_RESPONSES] == body[api_gateway.GATEWAY_RESPONSES]
    assert all(api_gateway.ANY_METHOD in ops for ops in rest_api["Properties"]["Body"]["paths"].values())


def test_api_gateway_gzips_answers_of_a_kilobyte_or_more_and_sam_keeps_it_on_the_rest_api(packaged):
    """A console page is about 50 KB of HTML and 5 KB gzipped; a page of 1,000 recipients is 300 KB of JSON:
    API Gateway compresses for clients that accept it (the local gateway does as the template says)."""
    from infra.local.cloudformation import translate

    stage, report, template = packaged
    assert template["Resources"]["RestAPI"]["Properties"]["MinimumCompressionSize"] == 1024
    _plan, sent = deploy_plan(stage, Path(report.template), Path(report.bundle), "artifacts", region="eu-west-1")
    translated = translate(sent, "eu-west-1")["Resources"]
    (rest_api,) = (r for r in translated.values() if r["Type"] == "AWS::ApiGateway::RestApi")
    assert rest_api["Properties"]["MinimumCompressionSize"] == 1024


def test_the_ledger_streams_new_and_old_images(data):
    ledger = data["Resources"]["LedgerTable"]["Properties"]
    assert ledger["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}


def test_a_topic_an_aws_service_publishes_to_is_encrypted_with_a_key_that_service_may_use(packaged):
    """AWS's rule for encrypted topics: a service that publishes (CloudWatch's alarms, SES's events) needs
    kms:GenerateDataKey* and kms:Decrypt on the topic's key, which AWS's managed key (alias/aws/sns) cannot
    grant: on that key the alarm's notification, and every SES event, would be dropped."""
    _stage, _report, template = packaged
    res = template["Resources"]
    publishers = [
        (st["Principal"]["Service"], st["Resource"]["Ref"])
        for policy in res.values()
        if policy["Type"] == "AWS::SNS::TopicPolicy"
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
        if "Service" in st.get("Principal", {})
    ]
    assert {service for service, _ in publishers} == {"cloudwatch.amazonaws.com", "ses.amazonaws.com"}
    for service, topic in publishers:
        key = res[topic]["Properties"]["KmsMasterKeyId"]
        assert isinstance(key, dict), f"{topic} is encrypted with {key}, which {service} cannot use"
        statements = res[key["Ref"]]["Properties"]["KeyPolicy"]["Statement"]
        granted = {a for st in statements if st["Principal"] == {"Service": service} for a in st["Action"]}
        assert {"kms:GenerateDataKey*", "kms:Decrypt"} <= granted, (topic, service)
    # The topic only the platform's producers publish to keeps AWS's managed key (they need no key grant).
    assert res["PrecompileEmailTopic"]["Properties"]["KmsMasterKeyId"] == "alias/aws/sns"


def test_the_bundle_has_no_dev_only_package_and_imports_with_only_itself(packaged):
    _stage, report, _template = packaged
    assert report.dev_only_packages == []
    assert report.import_app_ms > 0  # measured by importing app from the bundle alone (-S: no site-packages)
    assert report.zipped_mb < 50  # Lambda's limit for a direct upload


def test_the_template_created_in_cloudformation_names_each_function_as_the_code_invokes_it(packaged, data):
    """Translated by aws-sam-translator and created in moto's CloudFormation, as on AWS (offline): the data
    stack first, then the app's, each by URL from S3 as deploy sends them."""
    from infra.local.access import allowed
    from infra.local.cloudformation import split, translate

    stage, _report, template = packaged
    template = json.loads(json.dumps(template))  # the module's other tests share the packaged one
    for res in template["Resources"].values():
        if res["Type"] == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = {"Bucket": "artifacts", "Key": "bundle.zip"}
    created, _stood_in = split(translate(template, "us-east-1"))
    r = resources_for("moonsend", stage)
    # In a process of its own: moto's in-process mock resets the backends the session's local stack uses.
    script = (
        "import json, sys, boto3\n"
        "from moto import mock_aws\n"
        "with mock_aws():\n"
        "    s3 = boto3.client('s3', region_name='us-east-1')\n"
        "    s3.create_bucket(Bucket='artifacts')\n"
        "    s3.put_object(Bucket='artifacts', Key='bundle.zip', Body=b'PK')\n"
        "    cfn = boto3.client('cloudformation', region_name='us-east-1')\n"
        "    data, app = json.loads(sys.stdin.read())\n"
        "    for name, t in (('d', data), ('s', app)):\n"
        "        s3.put_object(Bucket='artifacts', Key=name, Body=json.dumps(t).encode())\n"
        "        url = 'https://artifacts.s3.us-east-1.amazonaws.com/' + name\n"
        "        cfn.create_stack(StackName=name, TemplateURL=url, Capabilities=['CAPABILITY_IAM'])\n"
        "        assert cfn.describe_stacks(StackName=name)['Stacks'][0]['StackStatus'] == 'CREATE_COMPLETE'\n"
        "    print(json.dumps(boto3.client('lambda', region_name='us-east-1').list_functions()['Functions'],"
        " default=str))\n"
    )
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("AWS_ENDPOINT_URL", None)
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        input=json.dumps([split(data)[0], created]),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    functions = json.loads(out.stdout.strip().splitlines()[-1])
    names = {f["FunctionName"] for f in functions}
    assert names == {r.function_name(h) for h in FUNCTION_IDS.values()}
    send_arn = next(f["FunctionArn"] for f in functions if f["FunctionName"] == r.function_name("send_emails"))
    roles = {k: v for k, v in template["Resources"].items() if v["Type"] == "AWS::IAM::Role"}
    for role in ("SendEmailsRole", "SweepQueuesRole", "ReleaseScheduledRole", "ApiHandlerRole"):
        docs = tuple(json.dumps(p["PolicyDocument"]) for p in roles[role]["Properties"]["Policies"])
        assert allowed(docs, "lambda:InvokeFunction", send_arn), role  # every grant names the real function


def test_async_functions_send_what_fails_for_good_to_the_on_failure_queue(packaged):
    stage, _report, template = packaged
    r = resources_for("moonsend", stage)
    for logical_id, res in template["Resources"].items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        config = res["Properties"].get("EventInvokeConfig")
        if logical_id in ("APIHandler", "SesEvents", "WebhookEvents", "DeliverWebhooks"):
            assert config is None  # invoked synchronously: by API Gateway, by Lambda's SQS and stream pollers
            continue
        assert config["MaximumRetryAttempts"] == 2
        assert config["DestinationConfig"]["OnFailure"] == {
            "Type": "SQS",
            "Destination": {"Fn::GetAtt": [r.failed_invocations_queue.logical_id, "Arn"]},
        }


def test_every_aws_client_the_code_makes_can_be_made_from_the_bundle_alone(packaged):
    """The pruned bundle keeps the model of every service the functions call (a missing one fails on AWS)."""
    import re
    import tempfile
    import zipfile

    _stage, report, _template = packaged
    code = "\n".join(p.read_text() for p in [ROOT / "app.py", *sorted((ROOT / "chalicelib").rglob("*.py"))])
    services = sorted(set(re.findall(r'(?:client|send_client|tenant_client)\("([a-z0-9]+)"', code)))
    assert {"sqs", "sesv2", "secretsmanager"} <= set(services)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import boto3\n"
        "for s in sys.argv[2:]: boto3.client(s, region_name='us-east-1')\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(report.bundle) as z:
            z.extractall(tmp)
        # -S: only the bundle and the standard library, as on Lambda.
        run = subprocess.run([sys.executable, "-S", "-c", script, tmp, *services], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


def test_committed_policy_files_are_what_the_generator_writes():
    for stage in ("local", "dev", "prod"):
        for fn, doc in iam.policies(resources_for("moonsend", stage), iam.console_from_of(stage)).items():
            committed = (ROOT / ".chalice" / iam.policy_file(stage, fn)).read_text()
            assert committed == iam.render(doc), f"run `moonsend package --stage {stage}`"


def test_deploy_plan_uploads_the_bundle_by_content_and_deploys_the_data_stack_then_the_app_by_url(tmp_path):
    template = {
        "Resources": {"F": {"Type": "AWS::Serverless::Function", "Properties": {"CodeUri": "./deployment.zip"}}}
    }
    (tmp_path / "sam.json").write_text(json.dumps(template))
    (tmp_path / "data.json").write_text(json.dumps({"Resources": {}}))
    (tmp_path / "deployment.zip").write_bytes(b"bundle")
    plan, out = deploy_plan(
        "dev",
        tmp_path / "sam.json",
        tmp_path / "deployment.zip",
        "my-artifacts",
        data_file=tmp_path / "data.json",
        region="eu-west-1",
    )
    assert [(a.kind, a.target.split("/")[-1].split("-")[0]) for a in plan] == [
        ("upload", plan[0].target.split("/")[-1].split("-")[0]),
        ("upload-template", "moonsend"),
        ("deploy-stack", "moonsend"),
        ("upload-template", "moonsend"),
        ("deploy-stack", "moonsend"),
    ]
    assert [a.target for a in plan if a.kind == "deploy-stack"] == ["moonsend-dev-data", "moonsend-dev"]
    key = plan[0].target
    assert key.startswith("moonsend/dev/") and key.endswith(".zip")
    assert out["Resources"]["F"]["Properties"]["CodeUri"] == {"Bucket": "my-artifacts", "Key": key}
    # Each template is uploaded as it is deployed, and read by CloudFormation from the bucket's region.
    app_upload, app_deploy = plan[3], plan[4]
    assert json.loads(app_upload.params["body"]) == out
    assert app_deploy.params["template_url"] == f"https://my-artifacts.s3.eu-west-1.amazonaws.com/{app_upload.target}"
    assert "template" not in app_deploy.params  # never inline (TemplateBody): ours is over 51,200 bytes


def test_destroy_plan_removes_schedules_tenant_queues_and_alarms_and_keeps_the_tables_unless_asked(stack, uid):
    from chalicelib import wiring

    c = wiring.container()
    queue = f"moonsend-local-t-gone{uid}"
    c.queues.ensure(queue, f"gone{uid}")
    # Its alarm, as a stage with queue alarms (MOONSEND_QUEUE_ALARMS) gives it: destroy removes those too.
    from chalicelib.queueing.tenant_queues import not_empty_alarm

    stack.client("cloudwatch").put_metric_alarm(**not_empty_alarm(c.settings, queue))
    c.digest_schedules.put(f"gone{uid}", "weekly", "cron(0 13 ? * WED *)")
    clients = (stack.client("sqs"), stack.client("cloudwatch"), stack.client("scheduler"))
    plan = destroy_plan("local", *clients, delete_data=False, account_id="123456789012")
    kinds = [(a.kind, a.target.rsplit("/", 1)[-1]) for a in plan]
    assert ("delete-queue", queue) in kinds and ("delete-alarm", f"{queue}-not-empty") in kinds
    assert ("delete-schedule", c.digest_schedules.name(f"gone{uid}", "weekly")) in kinds
    assert kinds[-2] == ("delete-stack", "moonsend-local") and not any(k == "delete-table" for k, _ in kinds)
    assert ("delete-stack", "moonsend-local-data") not in kinds  # the data stack is kept
    # The digests are kept, their schedules not: each one's note that its schedule is put is cleared.
    assert kinds[-1] == ("forget-schedules", "moonsend-local-digests")
    with_data = destroy_plan("local", *clients, delete_data=True, account_id="123456789012")
    assert {t for k, t in ((a.kind, a.target) for a in with_data) if k == "delete-table"} == {
        t.name for t in stack.settings.resources.tables
    }
    deletions = [(a.kind, a.target) for a in with_data if a.kind.startswith("delete-") and a.kind != "delete-table"]
    assert deletions[-4:] == [
        ("delete-stack", "moonsend-local"),
        ("delete-stack", "moonsend-local-data"),
        ("delete-secret", "moonsend-local/link-signing-key"),
        ("delete-alias", "alias/moonsend-local-tenant-secrets"),  # its key scheduled for deletion first
    ]


def test_the_smoke_campaign_is_a_valid_message():
    from chalicelib.core.message_parser import parse_precompile_message

    (msg,) = smoke_messages("ops@example.com", "smoke-1")
    req = parse_precompile_message(json.dumps(msg))
    assert req.plan == "free" and len(req.recipients) == 3 and req.rejected == []
