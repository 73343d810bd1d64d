"""Emulator: the stack created from the packaged template as `make deploy` creates the stage on AWS.

The steps are deploy's own (infra.deploy: upload the bundle, point the functions at it, deploy the
template), against the local endpoint. Between them, two steps AWS does itself:
CloudFormation expands SAM (here aws-sam-translator), and some resource types moto's CloudFormation
cannot create; those are taken out of what is sent to it and stood in for from the same template
(`STOOD_IN`, which docs/local-stack.md lists). What the runtime needs to run each function (its name, handler,
environment, timeout, memory, role, event sources, on-failure destination) is then read back from what
was created (`StackFunction`), never from a second description.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

from infra.cfn import data_stack_name
from infra.deploy import deploy_plan, execute, stack_name, template_url

# Lambda's retries of a failed async event when a function has no EventInvokeConfig (its documented default).
LAMBDA_ASYNC_RETRIES = 2

# Resource types moto's CloudFormation does not create, and what the local stack does with them instead.
STOOD_IN = {
    "AWS::ApiGateway::RestApi": "the app's routes are served by `chalice local` on --api-port",
    "AWS::ApiGateway::Deployment": "(part of the API above)",
    "AWS::ApiGateway::Stage": "(part of the API above)",
    "AWS::SNS::Subscription": "to Lambda: the runtime invokes it for each publish; to SQS or e-mail: Subscribe",
    "AWS::SQS::QueuePolicy": "set as the queue's Policy attribute",
    "AWS::Lambda::EventSourceMapping": (
        "the runtime's SQS and stream pollers (infra.local.sqs_poller, stream_poller), after Lambda's checks"
    ),
    "AWS::SNS::TopicPolicy": "set as the topic's Policy attribute",
    "AWS::CloudWatch::Alarm": "PutMetricAlarm with the template's properties; infra.local.alarms evaluates it",
    "AWS::SES::ConfigurationSet": "created in the SES stand-in",
    "AWS::SES::ConfigurationSetEventDestination": "created in the SES stand-in (it publishes to the topic)",
    "AWS::Lambda::EventInvokeConfig": "the runtime's retries and on-failure destination",
    "AWS::SecretsManager::Secret": "CreateSecret: the link-signing key is the one kept beside the outbox",
}
# Lambda permissions that only API Gateway uses (its source ARN names the stood-in API).
_API_PERMISSION = "APIHandlerInvokePermission"


class TemplateError(Exception):
    """The packaged template cannot be created locally; the message says what and why."""


def translate(sam: dict[str, Any], region: str) -> dict[str, Any]:
    """SAM to plain CloudFormation, as CloudFormation's AWS::Serverless transform does, for `region`."""
    import copy

    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=region))
    # The template names no managed policy: nothing to look up.
    return translator.translate(copy.deepcopy(sam), parameter_values={}, get_managed_policy_map=dict)


def split(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(what moto's CloudFormation creates, {logical id: resource} the stack stands in for).

    A stood-in resource's logical id becomes a template parameter, so that a `Ref` to it still resolves
    (a `Fn::GetAtt` of it cannot, and is refused)."""
    stood_in = {k: v for k, v in template["Resources"].items() if v["Type"] in STOOD_IN or k == _API_PERMISSION}
    created = {k: v for k, v in template["Resources"].items() if k not in stood_in}
    for logical_id, res in created.items():
        for target in _get_atts(res):
            if target in stood_in:
                raise TemplateError(f"{logical_id} reads an attribute of {target}, which moto cannot create")
    params = dict(template.get("Parameters", {}))
    params.update({k: {"Type": "String", "Default": stood_in_ref(k, v)} for k, v in stood_in.items()})
    return {**template, "Parameters": params, "Resources": created}, stood_in


def stood_in_ref(logical_id: str, resource: dict[str, Any]) -> str:
    """What `Ref` gives for a resource the stack stands in for: what AWS's gives where the template says it
    (a configuration set's `Name`: "Ref returns the name of the configuration set"), else the lower-cased
    logical id. The configuration set's event destination was once registered under `sesconfigurationset`
    while the functions send with the set's name, so the platform's own sends (the free plan) published no
    events locally, and a free-plan email whose drainer died after SES accepted it went out twice."""
    name = resource.get("Properties", {}).get("Name")
    if resource.get("Type") == "AWS::SES::ConfigurationSet" and isinstance(name, str):
        return name
    return logical_id.lower()


def _get_atts(value: Any) -> list[str]:
    if isinstance(value, dict):
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return [target[0] if isinstance(target, list) else target.split(".")[0]]
        return [t for v in value.values() for t in _get_atts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _get_atts(v)]
    return []


@dataclass(frozen=True)
class StackFunction:
    """One Lambda function as the stack created it: what the local runtime runs, and how."""

    logical_id: str
    name: str
    handler: str  # "app.send_emails"
    timeout_s: float
    memory_mb: int
    environment: dict[str, str]
    role_arn: str
    policies: tuple[str, ...]  # the role's policy documents (JSON), as the template gives them
    on_failure: str | None  # the on-failure destination's ARN (an SQS queue), or None
    async_retries: int  # Lambda's retries of a failed async event (EventInvokeConfig; Lambda's default: 2)

    @property
    def handler_name(self) -> str:
        return self.handler.split(".", 1)[1]


@dataclass(frozen=True)
class EventSource:
    """An SQS event source mapping: Lambda's poller gives the function the queue's messages in batches."""

    queue_arn: str
    function_name: str
    batch_size: int
    window_s: float  # MaximumBatchingWindowInSeconds: how long the poller gathers a batch
    reports_failures: bool  # FunctionResponseTypes has ReportBatchItemFailures
    enabled: bool
    max_concurrency: int | None = None  # ScalingConfig.MaximumConcurrency: the most batches at once


@dataclass(frozen=True)
class StreamSource:
    """A DynamoDB stream event source mapping."""

    stream_arn: str
    function_name: str
    batch_size: int
    window_s: float
    starting_position: str  # TRIM_HORIZON or LATEST
    reports_failures: bool
    enabled: bool
    bisect: bool = False  # BisectBatchOnFunctionError
    max_retries: int = -1  # MaximumRetryAttempts (-1: until the record expires)
    max_record_age_s: int = -1  # MaximumRecordAgeInSeconds (-1: until the record expires)
    on_failure: str | None = None  # DestinationConfig.OnFailure's ARN: where what is given up on is told

    @property
    def table_name(self) -> str:
        return self.stream_arn.split(":table/", 1)[1].split("/stream/", 1)[0]


def _event_source(props: dict[str, Any], by_arn: dict[str, str]) -> EventSource | StreamSource:
    """The mapping's properties, with the defaults AWS documents for an SQS or a DynamoDB stream source."""
    arn = str(props["EventSourceArn"])
    function = str(props["FunctionName"])
    name = by_arn.get(function) or function.rsplit(":", 1)[-1]
    if ":dynamodb:" in arn and "/stream/" in arn:
        return StreamSource(
            stream_arn=arn,
            function_name=name,
            batch_size=int(props.get("BatchSize", 100)),
            window_s=float(props.get("MaximumBatchingWindowInSeconds", 0)),
            starting_position=str(props.get("StartingPosition", "")),
            reports_failures="ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
            enabled=str(props.get("Enabled", True)).lower() != "false",
            bisect=str(props.get("BisectBatchOnFunctionError", False)).lower() == "true",
            max_retries=int(props.get("MaximumRetryAttempts", -1)),
            max_record_age_s=int(props.get("MaximumRecordAgeInSeconds", -1)),
            on_failure=props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination"),
        )
    if ":sqs:" not in arn:
        raise TemplateError(f"event source {arn}: the local stack polls SQS queues and DynamoDB streams only")
    return EventSource(
        queue_arn=arn,
        function_name=name,
        batch_size=int(props.get("BatchSize", 10)),
        window_s=float(props.get("MaximumBatchingWindowInSeconds", 0)),
        reports_failures="ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
        enabled=str(props.get("Enabled", True)).lower() != "false",
        max_concurrency=_max_concurrency(props),
    )


def _max_concurrency(props: dict[str, Any]) -> int | None:
    cap = (props.get("ScalingConfig") or {}).get("MaximumConcurrency")
    if cap is None:
        return None
    if not isinstance(cap, int) or isinstance(cap, bool) or not 2 <= cap <= 1000:
        raise TemplateError(f"ScalingConfig.MaximumConcurrency {cap!r}: Lambda takes an integer from 2 to 1000")
    return cap


@dataclass(frozen=True)
class CreatedStack:
    """What the runtime reads off the created stack."""

    name: str
    physical: dict[str, str]  # logical id -> physical id (ARN, URL or name, as CloudFormation's Ref gives)
    functions: dict[str, StackFunction]  # by function name
    subscriptions: list[tuple[str, str]]  # (topic ARN, function name) of every Lambda subscription
    event_sources: list[EventSource]  # every SQS event source mapping
    stream_sources: list[StreamSource]  # every DynamoDB stream event source mapping
    schedules: list[tuple[str, str, str]]  # (rule ARN, schedule expression, function name)
    outputs: dict[str, str]
    stood_in: tuple[str, ...]  # logical ids created by the stack instead of moto's CloudFormation
    api: dict[str, Any]  # the REST API's Swagger body, as API Gateway would be given it (infra.local.api_gateway)
    api_compression: int | None = None  # its MinimumCompressionSize: bodies this big or more are gzipped
    # (rule ARN, event pattern, function name) of every rule with an event pattern (infra.local.event_bus)
    event_rules: tuple[tuple[str, str, str], ...] = ()


class Resolver:
    """CloudFormation's intrinsic functions over a created stack: Ref, Fn::GetAtt, Fn::Sub, Fn::Join."""

    def __init__(
        self,
        physical: dict[str, str],
        types: dict[str, str],
        region: str,
        account: str,
        stream_arns: dict[str, str] | None = None,
        exports: dict[str, str] | None = None,
    ) -> None:
        self._physical = physical
        self._exports = exports or {}  # other stacks' exports, by name (Fn::ImportValue)
        self._types = types
        self._stream_arns = stream_arns or {}  # table logical id -> its LatestStreamArn
        self._pseudo = {
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
        }
        self._region, self._account = region, account

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Fn::GetAtt":
                target, attr = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.get_att(target, attr)
            if key == "Fn::Sub":
                text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self(arg[1]))
                return re.sub(
                    r"\$\{([^}]+)\}", lambda m: str(variables[m[1]] if m[1] in variables else self._sub(m[1])), text
                )
            if key == "Fn::Join":
                return str(arg[0]).join(str(self(v)) for v in arg[1])
            if key == "Fn::ImportValue":
                name = str(self(arg))
                if name not in self._exports:
                    raise TemplateError(f"Fn::ImportValue {name}: no stack exports it")
                return self._exports[name]
            if key.startswith("Fn::"):
                raise TemplateError(f"{key} is not resolved by the local stack (add it to Resolver)")
        return {k: self(v) for k, v in value.items()}

    def _sub(self, name: str) -> str:
        if "." in name:
            target, attr = name.split(".", 1)
            return self.get_att(target, attr)
        return self.ref(name)

    def ref(self, name: str) -> str:
        if name in self._pseudo:
            return self._pseudo[name]
        if name not in self._physical:
            raise TemplateError(f"Ref to {name}, which the stack did not create")
        return self._physical[name]

    def get_att(self, target: str, attr: str) -> str:
        kind, ref = self._types.get(target), self.ref(target)
        r, a = self._region, self._account
        if attr == "Arn":
            if kind == "AWS::Lambda::Function":
                return f"arn:aws:lambda:{r}:{a}:function:{ref}"
            if kind == "AWS::SQS::Queue":
                return f"arn:aws:sqs:{r}:{a}:{ref.rsplit('/', 1)[-1]}"
            if kind == "AWS::IAM::Role":
                return f"arn:aws:iam::{a}:role/{ref}"
        if kind == "AWS::SQS::Queue" and attr == "QueueName":
            return ref.rsplit("/", 1)[-1]
        if kind == "AWS::SNS::Topic" and attr == "TopicName":
            return ref.rsplit(":", 1)[-1]
        if kind == "AWS::DynamoDB::Table" and attr == "StreamArn" and target in self._stream_arns:
            return self._stream_arns[target]
        raise TemplateError(f"Fn::GetAtt {target}.{attr} is not known to the local stack")


def create(
    sam_file: Path,
    bundle: Path,
    stage: str,
    clients: dict[str, Any],
    region: str,
    account: str,
    secret_values: dict[str, str] | None = None,
    data_file: Path | None = None,
) -> CreatedStack:
    """Deploy the packaged templates to the local endpoint (the data stack, then the app's), each by URL
    from S3 as deploy sends them, stand in for what moto cannot create, and read back what the runtime
    needs. `clients` are the operator's (the stack's own) clients; `secret_values` gives generated secrets a
    value of the caller's (by secret name)."""
    bucket = f"moonsend-artifacts-{account}-{region}"
    _ensure_bucket(clients["s3"], bucket, region)
    plan, sam = deploy_plan(stage, sam_file, bundle, bucket, region=region)
    execute([a for a in plan if a.kind == "upload"], clients, say=_quiet)
    parts: list[_Created] = []
    if data_file is not None:
        data = json.loads(data_file.read_text())
        parts.append(_create_one(data_stack_name(stage), data, bucket, clients, region, account, secret_values, {}))
    exports = {k: v for part in parts for k, v in part.exports.items()}
    app = _create_one(
        stack_name(stage), translate(sam, region), bucket, clients, region, account, secret_values, exports
    )
    parts.append(app)
    physical = {k: v for part in parts for k, v in part.physical.items()}
    stood_in = app.stood_in
    functions = _functions(app.template, stood_in, app.resolve, clients["lambda"])
    by_arn = {app.resolve.get_att(f.logical_id, "Arn"): f.name for f in functions.values()}
    subscriptions = [
        (app.resolve(res["Properties"]["TopicArn"]), by_arn[app.resolve(res["Properties"]["Endpoint"])])
        for res in stood_in.values()
        if res["Type"] == "AWS::SNS::Subscription" and res["Properties"].get("Protocol") == "lambda"
    ]
    sources = [
        _event_source(app.resolve(res["Properties"]), by_arn)
        for res in stood_in.values()
        if res["Type"] == "AWS::Lambda::EventSourceMapping"
    ]
    rest_api: dict[str, Any] = next(
        (r["Properties"] for r in stood_in.values() if r["Type"] == "AWS::ApiGateway::RestApi"), {}
    )
    return CreatedStack(
        app.name,
        physical,
        functions,
        subscriptions,
        [s for s in sources if isinstance(s, EventSource)],
        [s for s in sources if isinstance(s, StreamSource)],
        _rules(clients["events"], by_arn, "ScheduleExpression"),
        app.outputs,
        tuple(k for part in parts for k in part.stood_in),
        rest_api.get("Body", {}),
        rest_api.get("MinimumCompressionSize"),
        tuple(_rules(clients["events"], by_arn, "EventPattern")),
    )


@dataclass(frozen=True)
class _Created:
    """One stack as created: its template (what moto made), the stood-in resources, and how to resolve them."""

    name: str
    template: dict[str, Any]
    stood_in: dict[str, dict[str, Any]]
    physical: dict[str, str]
    resolve: Resolver
    outputs: dict[str, str]
    exports: dict[str, str]


def _create_one(
    name: str,
    template_in: dict[str, Any],
    bucket: str,
    clients: dict[str, Any],
    region: str,
    account: str,
    secret_values: dict[str, str] | None,
    exports: dict[str, str],
) -> _Created:
    template, stood_in = split(template_in)
    body = json.dumps(template, separators=(",", ":"))
    key = f"moonsend/local/{name}-{hashlib.sha256(body.encode()).hexdigest()[:16]}.json"
    clients["s3"].put_object(Bucket=bucket, Key=key, Body=body.encode("utf-8"))
    cfn = clients["cloudformation"]
    # CreateStack rather than deploy's change set: moto works out a change set's outputs before its
    # resources exist, so the stack would have none (the smoke reads the topic's ARN from them). The
    # template goes by URL, as deploy sends it: CloudFormation takes 51,200 bytes at most inline.
    url = template_url(bucket, region, key)
    cfn.create_stack(StackName=name, TemplateURL=url, Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"])
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    if stack["StackStatus"] not in ("CREATE_COMPLETE", "UPDATE_COMPLETE"):
        raise TemplateError(f"stack {name}: {stack['StackStatus']} {stack.get('StackStatusReason', '')}")
    summaries = [
        s
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=name)
        for s in page["StackResourceSummaries"]
    ]
    physical = {s["LogicalResourceId"]: s.get("PhysicalResourceId", "") for s in summaries}
    physical.update({k: stood_in_ref(k, v) for k, v in stood_in.items()})
    # The template's own parameters, at their defaults (a local stack is created with none given).
    physical.update({k: str(p.get("Default", "")) for k, p in template_in.get("Parameters", {}).items()})
    types = {k: v["Type"] for k, v in template["Resources"].items()} | {k: v["Type"] for k, v in stood_in.items()}
    streams = {
        k: clients["dynamodb"].describe_table(TableName=physical[k])["Table"]["LatestStreamArn"]
        for k, v in template["Resources"].items()
        if v["Type"] == "AWS::DynamoDB::Table" and "StreamSpecification" in v.get("Properties", {})
    }
    resolve = Resolver(physical, types, region, account, streams, exports)
    holds = Conditions(template_in.get("Conditions", {}), resolve)
    _stand_in({k: v for k, v in stood_in.items() if holds(v.get("Condition"))}, resolve, clients, secret_values or {})
    _bucket_cors(template, physical, clients["s3"])
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    own_exports = {
        str(resolve(o["Export"]["Name"])): str(resolve(o["Value"]))
        for o in template.get("Outputs", {}).values()
        if "Export" in o
    }
    return _Created(name, template, stood_in, physical, resolve, outputs, own_exports)


def _bucket_cors(template: dict[str, Any], physical: dict[str, str], s3: Any) -> None:
    """A bucket's CorsConfiguration, which moto's CloudFormation does not apply, put as S3's API puts it (the
    console's send page uploads to the payload bucket from its own origin)."""
    for logical_id, res in template["Resources"].items():
        rules = res.get("Properties", {}).get("CorsConfiguration", {}).get("CorsRules")
        if res["Type"] != "AWS::S3::Bucket" or not rules:
            continue
        cors = [
            {
                **{k: rule[k] for k in ("AllowedMethods", "AllowedOrigins", "AllowedHeaders") if k in rule},
                **({"MaxAgeSeconds": rule["MaxAge"]} if "MaxAge" in rule else {}),
            }
            for rule in rules
        ]
        s3.put_bucket_cors(Bucket=physical[logical_id], CORSConfiguration={"CORSRules": cors})


def _quiet(_line: str) -> None:
    pass


def _ensure_bucket(s3: Any, bucket: str, region: str) -> None:
    kwargs = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    try:
        s3.create_bucket(Bucket=bucket, **kwargs)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise


def _functions(
    template: dict[str, Any], stood_in: dict[str, dict[str, Any]], resolve: Resolver, lam: Any
) -> dict[str, StackFunction]:
    configs = {
        resolve(res["Properties"]["FunctionName"]): res["Properties"]
        for res in stood_in.values()
        if res["Type"] == "AWS::Lambda::EventInvokeConfig"
    }
    out: dict[str, StackFunction] = {}
    for logical_id, res in template["Resources"].items():
        if res["Type"] != "AWS::Lambda::Function":
            continue
        cfg = lam.get_function_configuration(FunctionName=resolve.ref(logical_id))
        name = cfg["FunctionName"]
        role_id = _get_atts(res["Properties"]["Role"])[0]
        role = template["Resources"][role_id]["Properties"]
        policies = tuple(json.dumps(resolve(p["PolicyDocument"])) for p in role.get("Policies", []))
        if role.get("ManagedPolicyArns"):
            raise TemplateError(f"{role_id}: managed policies are not evaluated by the local stack")
        out[name] = StackFunction(
            logical_id=logical_id,
            name=name,
            handler=cfg["Handler"],
            timeout_s=float(cfg["Timeout"]),
            memory_mb=int(cfg["MemorySize"]),
            environment=dict(cfg.get("Environment", {}).get("Variables", {})),
            role_arn=cfg["Role"],
            policies=policies,
            on_failure=resolve(
                configs.get(name, {}).get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
            ),
            async_retries=int(configs.get(name, {}).get("MaximumRetryAttempts", LAMBDA_ASYNC_RETRIES)),
        )
    return out


def _rules(events: Any, by_arn: dict[str, str], kind: str) -> list[tuple[str, str, str]]:
    """(rule ARN, its `kind`: ScheduleExpression or EventPattern, function name) of each enabled rule of that
    kind whose target is one of the stack's functions."""
    out = []
    for page in events.get_paginator("list_rules").paginate():
        for rule in page["Rules"]:
            if kind not in rule or rule.get("State") != "ENABLED":
                continue
            for target in events.list_targets_by_rule(Rule=rule["Name"])["Targets"]:
                if target["Arn"] in by_arn:
                    out.append((rule["Arn"], rule[kind], by_arn[target["Arn"]]))
    return out


class Conditions:
    """A template's Conditions, as CloudFormation evaluates them (the ones our templates use)."""

    def __init__(self, conditions: dict[str, Any], resolve: Resolver) -> None:
        self._conditions = conditions
        self._resolve = resolve

    def __call__(self, name: str | None) -> bool:
        return True if name is None else self._holds(self._conditions[name])

    def _holds(self, value: Any) -> bool:
        ((key, arg),) = value.items()
        if key == "Fn::Equals":
            left, right = (self._resolve(v) for v in arg)
            return bool(left == right)
        if key == "Fn::Not":
            return not self._holds(arg[0])
        if key == "Fn::And":
            return all(self._holds(v) for v in arg)
        if key == "Fn::Or":
            return any(self._holds(v) for v in arg)
        if key == "Condition":
            return self(arg)
        raise TemplateError(f"condition {key} is not evaluated by the local stack (add it to Conditions)")


def _stand_in(
    stood_in: dict[str, dict[str, Any]], resolve: Resolver, clients: dict[str, Any], secret_values: dict[str, str]
) -> None:
    """Create, through the endpoint's own APIs, the stood-in resources that exist as AWS resources."""
    for res in stood_in.values():
        props = resolve(res.get("Properties", {}))
        kind = res["Type"]
        if kind == "AWS::CloudWatch::Alarm":
            clients["cloudwatch"].put_metric_alarm(**_alarm(props))
        elif kind == "AWS::SNS::TopicPolicy":
            for topic in props["Topics"]:
                clients["sns"].set_topic_attributes(
                    TopicArn=topic, AttributeName="Policy", AttributeValue=json.dumps(props["PolicyDocument"])
                )
        elif kind == "AWS::SQS::QueuePolicy":
            for url in props["Queues"]:
                clients["sqs"].set_queue_attributes(
                    QueueUrl=url, Attributes={"Policy": json.dumps(props["PolicyDocument"])}
                )
        elif kind == "AWS::SNS::Subscription" and props.get("Protocol") == "sqs":
            attributes = {"RawMessageDelivery": str(props.get("RawMessageDelivery", False)).lower()}
            clients["sns"].subscribe(
                TopicArn=props["TopicArn"], Protocol="sqs", Endpoint=props["Endpoint"], Attributes=attributes
            )
        elif kind == "AWS::SNS::Subscription" and props.get("Protocol") == "email":  # the operator's alerts
            clients["sns"].subscribe(TopicArn=props["TopicArn"], Protocol="email", Endpoint=props["Endpoint"])
        elif kind == "AWS::SES::ConfigurationSet":
            _ensure_configuration_set(clients["sesv2"], props["Name"])
        elif kind == "AWS::SecretsManager::Secret":
            _ensure_secret(clients["secretsmanager"], props, secret_values.get(props["Name"]))
    for res in stood_in.values():  # after the configuration sets they belong to
        if res["Type"] == "AWS::SES::ConfigurationSetEventDestination":
            props = resolve(res["Properties"])
            dest = props["EventDestination"]
            clients["sesv2"].create_configuration_set_event_destination(
                ConfigurationSetName=props["ConfigurationSetName"],
                EventDestinationName=dest["Name"],
                EventDestination={
                    "Enabled": dest.get("Enabled", False),
                    "MatchingEventTypes": [t.upper() for t in dest["MatchingEventTypes"]],
                    "SnsDestination": {"TopicArn": dest["SnsDestination"]["TopicARN"]},
                },
            )


def _ensure_configuration_set(sesv2: Any, name: str) -> None:
    try:
        sesv2.create_configuration_set(ConfigurationSetName=name)
    except ClientError as exc:
        if "AlreadyExists" not in exc.response["Error"]["Code"]:
            raise


def _ensure_secret(sm: Any, props: dict[str, Any], value: str | None) -> None:
    if value is None:
        spec = props.get("GenerateSecretString", {})
        value = sm.get_random_password(
            PasswordLength=int(spec.get("PasswordLength", 32)), ExcludePunctuation=bool(spec.get("ExcludePunctuation"))
        )["RandomPassword"]
    try:
        sm.create_secret(Name=props["Name"], Description=props.get("Description", ""), SecretString=value)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceExistsException":
            raise


_ALARM_KEYS = (
    "AlarmName",
    "AlarmDescription",
    "Namespace",
    "MetricName",
    "Dimensions",
    "Statistic",
    "Period",
    "EvaluationPeriods",
    "DatapointsToAlarm",
    "Threshold",
    "ComparisonOperator",
    "TreatMissingData",
    "AlarmActions",
    "OKActions",
    "InsufficientDataActions",
)


def _alarm(props: dict[str, Any]) -> dict[str, Any]:
    unknown = set(props) - set(_ALARM_KEYS)
    if unknown:
        raise TemplateError(f"alarm {props.get('AlarmName')}: properties the local stack does not know: {unknown}")
    out = {k: props[k] for k in _ALARM_KEYS if k in props}
    for k in ("Period", "EvaluationPeriods", "DatapointsToAlarm"):
        if k in out:
            out[k] = int(out[k])
    if "Threshold" in out:
        out["Threshold"] = float(out["Threshold"])
    return out


def point_api_output(stack_name: str, url: str, account: str, region: str) -> None:
    """The app stack's `EndpointURL` output names the API where this stack serves it.

    On AWS the output is API Gateway's URL, where the API answers, and the operator's commands read it for
    what the functions are told (the links' base). Here the API is chalice's local server: moto resolved
    the output to an execute-api URL nothing answers, so the output is pointed at the local server (with
    the trailing slash API Gateway's output has)."""
    from moto.cloudformation.models import cloudformation_backends

    for stack in cloudformation_backends[account][region].stacks.values():
        if stack.name == stack_name and "EndpointURL" in stack.output_map.outputs:
            output = stack.output_map["EndpointURL"]
            if output is not None:
                output.value = url.rstrip("/") + "/"
