"""Emulator: what CloudFormation does with deploy's change sets that moto's CloudFormation does not.

`moonsend deploy` sends each template by URL in a change set (infra.deploy), as it does to AWS. moto's
CloudFormation cannot take the app's template as it is: it has no AWS::Serverless transform, and some
resource types it cannot create (infra.local.cloudformation.STOOD_IN). So, for a change set made from a
template at a URL:

- before moto sees it, the template is expanded from SAM (aws-sam-translator, as CloudFormation's
  transform does) and split: what moto can create is stored beside the original object and the request
  points at that copy; the rest is kept for the change set;
- a resource kept when its stack is deleted except after a failed create (`RetainExceptOnCreate`) is
  given to moto as `Retain`, the only policy moto's CloudFormation keeps (see `kept_on_delete`);
- once moto has executed the change set, the stack is given its template's outputs (`give_outputs`), and
  the kept resources that are AWS resources (alarms, topic and
  queue policies, SQS and e-mail subscriptions, SES configuration sets and their destinations, secrets) are
  made through the endpoint's own APIs, as the local stack makes them for itself, those with a Condition
  only when it holds for the change set's parameters.

Lambda's event sources and SNS-to-Lambda subscriptions, and the API, are left out: no runtime runs a stage
deployed this way (a deploy rehearsal operates it; the local stack runs the stage it creates itself).
The local stack's own create (infra.local.cloudformation.create) sends a template already split: nothing
is done to it here.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from infra.local.cfn_limits import Refusal, moto_objects, s3_location

_SAM = "AWS::Serverless-2016-10-31"
# The kept resources made through the endpoint's APIs once the change set ran (by infra.local.cloudformation).
MADE_AFTER = frozenset(
    {
        "AWS::CloudWatch::Alarm",
        "AWS::SNS::TopicPolicy",
        "AWS::SQS::QueuePolicy",
        "AWS::SNS::Subscription",
        "AWS::SES::ConfigurationSet",
        "AWS::SES::ConfigurationSetEventDestination",
        "AWS::SecretsManager::Secret",
    }
)


class ChangeSetTransforms:
    def __init__(self, client: Callable[[str], Any], region: str) -> None:
        self._client = client  # the operator's client of a service, to the endpoint
        self._region = region
        # (stack, change set) -> what it stood in for, and the values its conditions are decided with
        self._kept: dict[tuple[str, str], _Kept] = {}
        self._lock = threading.Lock()

    def rewrite(self, params: Mapping[str, str], account: str) -> bytes | None:
        """The request body moto is given instead, for a CreateChangeSet by URL that needs it (else None)."""
        from infra.local.cloudformation import split, translate

        if params.get("Action") != "CreateChangeSet" or not params.get("TemplateURL"):
            return None
        location = s3_location(params["TemplateURL"])
        found = moto_objects(account, self._region)(*location) if location else None
        if found is None:
            return None  # refused already (infra.local.cfn_limits), or moto's to answer
        template = json.loads(found.value)
        sam = _SAM in _transforms(template)
        if sam:
            template = translate(template, self._region)
        created, stood_in = split(template)
        created, retained = kept_on_delete(created)
        if not stood_in and not sam and not retained:
            return None
        body = json.dumps(created, separators=(",", ":")).encode()
        assert location is not None
        bucket, key = location
        local_key = f"{key}.local-{hashlib.sha256(body).hexdigest()[:12]}.json"
        self._client("s3").put_object(Bucket=bucket, Key=local_key, Body=body)
        values = _parameter_values(params, template, self._previous(params["StackName"]))
        with self._lock:
            self._kept[(params["StackName"], params["ChangeSetName"])] = _Kept(
                stood_in, values, template.get("Conditions", {})
            )
        url = params["TemplateURL"].replace(key, local_key)
        return urlencode({**params, "TemplateURL": url}).encode()

    def executed(self, params: Mapping[str, str]) -> None:
        """After moto executed a change set: make the resources it kept out of it."""
        from infra.local.cloudformation import Conditions, Resolver, _stand_in, stood_in_ref

        if params.get("Action") != "ExecuteChangeSet":
            return
        stack, change_set = params.get("StackName", ""), params.get("ChangeSetName", "")
        account = self._client("sts").get_caller_identity()["Account"]
        give_outputs(stack, account, self._region)
        with self._lock:
            kept = self._kept.pop((stack, change_set), None)
        if kept is None:
            return
        # Only what exists as an AWS resource of its own; the runtime's parts (event sources, Lambda
        # subscriptions, retries) and the API have nothing to run them here.
        stood_in = {k: v for k, v in kept.stood_in.items() if v["Type"] in MADE_AFTER}
        if not stood_in:
            return
        cfn = self._client("cloudformation")
        summaries = [
            s
            for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack)
            for s in page["StackResourceSummaries"]
        ]
        physical = {s["LogicalResourceId"]: s.get("PhysicalResourceId", "") for s in summaries}
        types = {s["LogicalResourceId"]: s["ResourceType"] for s in summaries}
        physical.update({k: stood_in_ref(k, v) for k, v in stood_in.items()})
        physical.update(kept.parameters)
        types.update({k: v["Type"] for k, v in stood_in.items()})
        exports = {
            e["Name"]: e["Value"] for page in cfn.get_paginator("list_exports").paginate() for e in page["Exports"]
        }
        resolve = Resolver(physical, types, self._region, account, None, exports)
        holds = Conditions(kept.conditions, resolve)
        stood_in = {k: v for k, v in stood_in.items() if holds(v.get("Condition"))}
        clients = {n: self._client(n) for n in ("cloudwatch", "sns", "sqs", "sesv2", "secretsmanager")}
        _stand_in(stood_in, resolve, clients, {})

    def _previous(self, stack: str) -> dict[str, str]:
        """The stack's parameter values now (before the change set), for those a change set keeps."""
        try:
            found = self._client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
        except Exception:  # no such stack yet: a create
            return {}
        return {p["ParameterKey"]: p.get("ParameterValue", "") for p in found.get("Parameters", [])}


@dataclass(frozen=True)
class _Kept:
    stood_in: dict[str, dict[str, Any]]
    parameters: dict[str, str]  # the template's parameters, as the change set decides them
    conditions: dict[str, Any]


class ChangeSetRefused(Exception):
    """A change set CloudFormation refuses when it is made (the gateway answers with the refusal)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def _parameter_values(params: Mapping[str, str], template: dict[str, Any], previous: dict[str, str]) -> dict[str, str]:
    """Each of the template's parameters: the change set's value, the stack's before (UsePreviousValue), or
    the template's default (the query protocol's `Parameters.member.N.ParameterKey` and so on). As
    CloudFormation, UsePreviousValue for a parameter the stack does not have (a create, a stack from before
    the parameter) is refused."""
    values = {k: str(p.get("Default", "")) for k, p in template.get("Parameters", {}).items()}
    n = 1
    while f"Parameters.member.{n}.ParameterKey" in params:
        key = params[f"Parameters.member.{n}.ParameterKey"]
        if params.get(f"Parameters.member.{n}.UsePreviousValue", "").lower() == "true":
            if key not in previous:
                raise ChangeSetRefused(
                    Refusal(
                        "ValidationError",
                        f"Invalid input for parameter key {key}. Cannot specify usePreviousValue as true "
                        "for a parameter key not in the previous template",
                    )
                )
            values[key] = previous[key]
        else:
            values[key] = params.get(f"Parameters.member.{n}.ParameterValue", "")
        n += 1
    return values


def give_outputs(stack_name: str, account: str, region: str) -> None:
    """The stack's outputs as its template, executed, says them (what DescribeStacks answers on AWS).

    moto makes a stack's outputs when the stack object is made, which for a change set is before its
    template is applied: a stack deployed through change sets had no outputs (nor exports) at all, and the
    operator's commands, which read the API's URL from them (infra.operator_env), could not be rehearsed."""
    from moto.cloudformation.models import cloudformation_backends

    backend = cloudformation_backends[account][region]
    for stack in backend.stacks.values():
        if stack.name == stack_name:
            stack._parse_template()
            stack.output_map = stack._create_output_map()
            for export in stack.exports:  # listed, and removed with the stack, as CloudFormation does
                backend.exports[export.name] = export


def kept_on_delete(template: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The template with each `RetainExceptOnCreate` resource `Retain` (and whether there was one).

    CloudFormation keeps such a resource when its stack is deleted (unless the stack's first create failed):
    the data stack's tables and the tenants' secrets key outlive it, and a destroy must delete them itself.
    moto's CloudFormation keeps only `Retain`'s and would delete them with the stack, hiding what a destroy
    leaves behind on AWS. (moto rolls nothing back, so the create-failed case does not arise here.)"""
    resources = template["Resources"]
    kept = {k for k, v in resources.items() if v.get("DeletionPolicy") == "RetainExceptOnCreate"}
    if not kept:
        return template, False
    changed = {k: {**v, "DeletionPolicy": "Retain"} if k in kept else v for k, v in resources.items()}
    return {**template, "Resources": changed}, True


def _transforms(template: Mapping[str, Any]) -> list[str]:
    given = template.get("Transform", [])
    return [given] if isinstance(given, str) else list(given)


def form(body: bytes) -> dict[str, str]:
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
