"""CloudFormation's template quotas at the local endpoint (infra/local/cfn_limits.py): the decision as data,
then through boto3 against the running stack, where moto alone accepts what AWS refuses."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from botocore.exceptions import ClientError

from infra.deploy import template_url
from infra.local.cfn_limits import (
    TEMPLATE_BODY_MAX_BYTES,
    TEMPLATE_OBJECT_MAX_BYTES,
    NoSuchBucket,
    Refusal,
    refusal,
    s3_location,
)

S3_DOCS = "For more information check http://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html"
BODY_TOO_LONG = "' at 'templateBody' failed to satisfy constraint: Member must have length less than or equal to 51200"


@dataclass
class Obj:
    value: bytes

    @property
    def size(self) -> int:
        return len(self.value)


class Bucket:
    """An S3 lookup over a dict: {bucket: {key: body}}."""

    def __init__(self, objects: dict[str, dict[str, bytes]]) -> None:
        self.objects = objects
        self.asked: list[tuple[str, str]] = []

    def __call__(self, bucket: str, key: str) -> Obj | None:
        self.asked.append((bucket, key))
        if bucket not in self.objects:
            raise NoSuchBucket(bucket)
        body = self.objects[bucket].get(key)
        return None if body is None else Obj(body)


NOTHING = Bucket({})


def template(resources: int = 1, outputs: int = 0, parameters: int = 0, **extra: object) -> dict:
    t: dict = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Resources": {f"H{i}": {"Type": "AWS::CloudFormation::WaitConditionHandle"} for i in range(resources)},
    }
    if outputs:
        t["Outputs"] = {f"O{i}": {"Value": "x"} for i in range(outputs)}
    if parameters:
        t["Parameters"] = {f"P{i}": {"Type": "String", "Default": "x"} for i in range(parameters)}
    return {**t, **extra}


def padded(size: int, char: str = "x") -> str:
    """A one-resource JSON template of exactly `size` bytes (UTF-8), padded in its Description with `char`."""
    shell = json.dumps(template(Description=""), ensure_ascii=False)
    room = size - len(shell.encode())
    width = len(char.encode())
    fill = char * (room // width) + "x" * (room % width)
    body = json.dumps(template(Description=fill), ensure_ascii=False)
    assert len(body.encode()) == size
    return body


# --- TemplateBody: 51,200 bytes ------------------------------------------------------------------------


def test_a_body_of_51200_bytes_is_accepted_and_one_more_byte_is_refused() -> None:
    assert refusal("CreateStack", {"TemplateBody": padded(TEMPLATE_BODY_MAX_BYTES)}, NOTHING) is None
    body = padded(TEMPLATE_BODY_MAX_BYTES + 1)
    refused = refusal("CreateStack", {"TemplateBody": body}, NOTHING)
    assert refused == Refusal(
        "ValidationError",
        f"1 validation error detected: Value '{body}' at 'templateBody' failed to satisfy constraint: "
        "Member must have length less than or equal to 51200",
        400,
    )


def test_the_body_is_measured_in_bytes_not_characters() -> None:
    body = padded(TEMPLATE_BODY_MAX_BYTES + 1, "é")  # two bytes a character
    assert len(body) < TEMPLATE_BODY_MAX_BYTES < len(body.encode())
    refused = refusal("CreateStack", {"TemplateBody": body}, NOTHING)
    assert refused is not None and refused.message.endswith(BODY_TOO_LONG)
    assert refusal("CreateStack", {"TemplateBody": padded(TEMPLATE_BODY_MAX_BYTES, "€")}, NOTHING) is None


@pytest.mark.parametrize("action", ["CreateStack", "UpdateStack", "CreateChangeSet", "ValidateTemplate"])
def test_every_call_deploy_makes_is_checked(action: str) -> None:
    refused = refusal(action, {"TemplateBody": padded(TEMPLATE_BODY_MAX_BYTES + 1)}, NOTHING)
    assert refused is not None and refused.code == "ValidationError"


def test_other_calls_are_not_looked_at() -> None:
    assert refusal("DescribeStacks", {"TemplateBody": padded(TEMPLATE_BODY_MAX_BYTES + 1)}, NOTHING) is None
    assert refusal("UpdateStack", {"UsePreviousTemplate": "true"}, NOTHING) is None


# --- counts ----------------------------------------------------------------------------------------------


def body(**counts: int) -> dict[str, str]:
    return {"TemplateBody": json.dumps(template(**counts), separators=(",", ":"))}


def test_500_resources_are_accepted_and_501_refused() -> None:
    assert refusal("CreateStack", body(resources=500), NOTHING) is None
    assert refusal("CreateStack", body(resources=501), NOTHING) == Refusal(
        "ValidationError", "Template format error: Number of resources, 501, is greater than maximum allowed, 500"
    )


def test_200_outputs_are_accepted_and_201_refused() -> None:
    assert refusal("CreateChangeSet", body(outputs=200), NOTHING) is None
    assert refusal("CreateChangeSet", body(outputs=201), NOTHING) == Refusal(
        "ValidationError", "Template format error: Outputs count 201 is greater than max allowed 200"
    )


def test_200_parameters_are_accepted_and_201_refused() -> None:
    assert refusal("ValidateTemplate", body(parameters=200), NOTHING) is None
    assert refusal("ValidateTemplate", body(parameters=201), NOTHING) == Refusal(
        "ValidationError", "Template format error: Parameter count 201 is greater than max allowed 200"
    )


def test_a_template_that_is_not_json_is_not_counted() -> None:
    handle = "    Type: AWS::CloudFormation::WaitConditionHandle\n"
    yaml = "Resources:\n" + "".join(f"  H{i}:\n{handle}" for i in range(501))
    assert len(yaml.encode()) <= TEMPLATE_BODY_MAX_BYTES
    assert refusal("CreateStack", {"TemplateBody": yaml}, NOTHING) is None


# --- TemplateURL -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "location"),
    [
        ("https://b-1.s3.us-east-1.amazonaws.com/moonsend/local/t.json", ("b-1", "moonsend/local/t.json")),
        ("https://b-1.s3.amazonaws.com/t.json", ("b-1", "t.json")),
        ("https://b-1.s3-eu-west-1.amazonaws.com/t.json", ("b-1", "t.json")),
        ("https://dotted.bucket.s3.eu-west-1.amazonaws.com/a/t.json", ("dotted.bucket", "a/t.json")),
        ("https://s3.eu-west-1.amazonaws.com/b-1/a/t.json", ("b-1", "a/t.json")),
        ("https://s3.amazonaws.com/b-1/t.json", ("b-1", "t.json")),
        ("https://s3-eu-west-1.amazonaws.com/b-1/t.json", ("b-1", "t.json")),
        ("https://b-1.s3.us-east-1.amazonaws.com/a%20b.json?versionId=3", ("b-1", "a b.json")),
        ("http://localhost:4566/b-1/a/t.json", ("b-1", "a/t.json")),  # moto's own local form
        ("https://raw.githubusercontent.com/o/r/main/t.json", None),
        ("s3://b-1/t.json", None),
        ("https://b-1.s3.amazonaws.com/", None),
    ],
)
def test_the_url_forms_aws_and_moto_read(url: str, location: tuple[str, str] | None) -> None:
    assert s3_location(url) == location


URL = "https://templates-1.s3.us-east-1.amazonaws.com/moonsend/local/t.json"


def stored(data: bytes) -> Bucket:
    return Bucket({"templates-1": {"moonsend/local/t.json": data}})


def test_an_object_of_1000000_bytes_is_accepted_and_one_more_byte_is_refused() -> None:
    # The quotas page says "1 MB"; AWS's message names 1000000 (not 1,048,576).
    assert refusal("CreateStack", {"TemplateURL": URL}, stored(b" " * TEMPLATE_OBJECT_MAX_BYTES)) is None
    for size in (TEMPLATE_OBJECT_MAX_BYTES + 1, 1_048_576, 1_048_577):
        assert refusal("CreateStack", {"TemplateURL": URL}, stored(b" " * size)) == Refusal(
            "ValidationError", "Template may not exceed 1000000 bytes in size."
        )


def test_a_missing_object_is_refused_with_s3s_error() -> None:
    assert refusal("CreateStack", {"TemplateURL": URL}, Bucket({"templates-1": {}})) == Refusal(
        "ValidationError", f"S3 error: The specified key does not exist.\n{S3_DOCS}"
    )
    assert refusal("CreateChangeSet", {"TemplateURL": URL}, NOTHING) == Refusal(
        "ValidationError", f"S3 error: The specified bucket does not exist\n{S3_DOCS}"
    )


def test_a_url_that_names_no_s3_object_is_refused() -> None:
    for url in ("https://example.com/t.json", "s3://templates-1/moonsend/local/t.json"):
        assert refusal("CreateStack", {"TemplateURL": url}, NOTHING) == Refusal(
            "ValidationError", "TemplateURL must be a supported URL."
        )


def test_a_url_longer_than_5120_characters_is_refused_before_anything_is_read() -> None:
    lookup = stored(b"{}")
    url = URL + "x" * (5121 - len(URL))
    refused = refusal("CreateStack", {"TemplateURL": url}, lookup)
    assert refused is not None and refused.message.endswith(
        "' at 'templateURL' failed to satisfy constraint: Member must have length less than or equal to 5120"
    )
    assert lookup.asked == []


def test_the_object_at_the_url_is_counted() -> None:
    big = json.dumps(template(resources=501)).encode()
    refused = refusal("CreateStack", {"TemplateURL": URL}, stored(big))
    assert refused is not None and refused.message.startswith("Template format error: Number of resources, 501")
    ok = json.dumps(template(resources=500, Description="x" * 60_000)).encode()
    assert refusal("UpdateStack", {"TemplateURL": URL}, stored(ok)) is None


def test_validate_template_uses_the_body_when_both_are_given() -> None:
    lookup = Bucket({})
    assert refusal("ValidateTemplate", {**body(resources=1), "TemplateURL": URL}, lookup) is None
    assert lookup.asked == []


def test_the_refusal_is_cloudformations_query_error() -> None:
    status, headers, xml = Refusal("ValidationError", "a < b & 'c'").response("req-1")
    assert status == 400 and headers["x-amzn-RequestId"] == "req-1"
    assert xml.decode() == (
        '<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error><Type>Sender</Type>'
        "<Code>ValidationError</Code><Message>a &lt; b &amp; 'c'</Message></Error>"
        "<RequestId>req-1</RequestId></ErrorResponse>"
    )


# --- through boto3, on the local stack ---------------------------------------------------------------------


@pytest.fixture
def bucket(stack, uid):
    s3 = stack.client("s3")
    name = f"cfn-limits-{uid}"
    s3.create_bucket(Bucket=name)
    yield name
    for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=obj["Key"])
    s3.delete_bucket(Bucket=name)


def big_template() -> str:
    """A valid template over 51,200 bytes: one wait condition handle (moto creates nothing for it), padded."""
    return json.dumps(template(resources=1, Metadata={"Padding": "x" * 60_000}))


@pytest.mark.e2e
def test_an_oversize_body_is_refused_as_aws_refuses_it(stack, uid) -> None:
    cfn = stack.client("cloudformation")
    with pytest.raises(ClientError) as caught:
        cfn.create_stack(StackName=f"cfn-limits-{uid}", TemplateBody=big_template())
    error = caught.value.response["Error"]
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert (error["Code"], error["Type"]) == ("ValidationError", "Sender")
    assert error["Message"] == f"1 validation error detected: Value '{big_template()}{BODY_TOO_LONG}"
    with pytest.raises(ClientError, match="Member must have length less than or equal to 51200"):
        cfn.validate_template(TemplateBody=big_template())
    names = [s["StackName"] for s in cfn.describe_stacks()["Stacks"]]
    assert f"cfn-limits-{uid}" not in names


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:Tried to parse AWS..CloudFormation..WaitConditionHandle")
def test_the_same_template_by_url_is_accepted(stack, uid, bucket) -> None:
    """deploy's URL form (infra.deploy.template_url: https://BUCKET.s3.REGION.amazonaws.com/KEY) is read
    by the limits and by moto's CreateStack and CreateChangeSet alike."""
    s3, cfn = stack.client("s3"), stack.client("cloudformation")
    key = f"moonsend/local/cfn-limits-{uid}.json"
    s3.put_object(Bucket=bucket, Key=key, Body=big_template().encode())
    url = template_url(bucket, stack.config.region, key)
    assert url == f"https://{bucket}.s3.{stack.config.region}.amazonaws.com/{key}"
    name = f"cfn-limits-{uid}"
    try:
        cfn.create_stack(StackName=name, TemplateURL=url)
        created = cfn.describe_stacks(StackName=name)["Stacks"][0]
        assert created["StackStatus"] == "CREATE_COMPLETE"
        assert cfn.get_template(StackName=name)["TemplateBody"] == json.loads(big_template())  # botocore parses it
    finally:
        cfn.delete_stack(StackName=name)
    by_change_set = f"cfn-limits-cs-{uid}"
    try:
        cfn.create_change_set(
            StackName=by_change_set, ChangeSetName=f"c-{uid}", ChangeSetType="CREATE", TemplateURL=url
        )
        described = cfn.describe_change_set(StackName=by_change_set, ChangeSetName=f"c-{uid}")
        assert described["Status"] == "CREATE_COMPLETE"
    finally:
        cfn.delete_stack(StackName=by_change_set)
    assert cfn.validate_template(TemplateURL=url)["Parameters"] == []


@pytest.mark.e2e
def test_a_missing_or_oversize_object_is_refused(stack, uid, bucket) -> None:
    s3, cfn = stack.client("s3"), stack.client("cloudformation")
    region = stack.config.region
    with pytest.raises(ClientError) as caught:
        cfn.create_stack(StackName=f"cfn-limits-{uid}", TemplateURL=template_url(bucket, region, "none.json"))
    assert caught.value.response["Error"]["Code"] == "ValidationError"
    assert caught.value.response["Error"]["Message"] == f"S3 error: The specified key does not exist.\n{S3_DOCS}"
    key = "huge.json"
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(template(Metadata={"P": "x" * 1_000_000})).encode())
    with pytest.raises(ClientError) as caught:
        cfn.validate_template(TemplateURL=template_url(bucket, region, key))
    assert caught.value.response["Error"]["Message"] == "Template may not exceed 1000000 bytes in size."


def test_a_change_sets_parameters_are_decided_as_cloudformation_decides_them() -> None:
    """A value given; the stack's before (UsePreviousValue); the template's default; and, as AWS, no
    UsePreviousValue for a parameter the stack does not have (deploy then leaves it to its default)."""
    import pytest

    from infra.local.cfn_transform import ChangeSetRefused, _parameter_values

    declared = {"Parameters": {"OperatorEmail": {"Type": "String", "Default": ""}, "Other": {"Type": "String"}}}
    given = {"Parameters.member.1.ParameterKey": "OperatorEmail", "Parameters.member.1.ParameterValue": "a@x.org"}
    assert _parameter_values(given, declared, {}) == {"OperatorEmail": "a@x.org", "Other": ""}
    keep = {"Parameters.member.1.ParameterKey": "OperatorEmail", "Parameters.member.1.UsePreviousValue": "true"}
    assert _parameter_values(keep, declared, {"OperatorEmail": "b@x.org"})["OperatorEmail"] == "b@x.org"
    with pytest.raises(ChangeSetRefused) as refused:
        _parameter_values(keep, declared, {})  # a stack from before the parameter
    status, _headers, body = refused.value.refusal.response()
    assert status == 400 and b"<Code>ValidationError</Code>" in body and b"usePreviousValue" in body
