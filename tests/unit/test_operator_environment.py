"""The operator's commands reach a deployed stage as a real operator's shell would: AWS's own endpoints,
credentials from the SDK's chain, the account those credentials are for, the stage's own settings."""

import os

import boto3
import pytest
from botocore.stub import Stubber

from infra import cli

ACCOUNT = "111122223333"


@pytest.fixture
def shell(monkeypatch):
    """A clean operator's shell: no moonsend or endpoint variables, a profile's region and keys."""
    for name in list(os.environ):
        if name.startswith(("MOONSEND_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAOPERATOR")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "operator-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    calls = []
    real_client = boto3.session.Session.client

    def client(self, service, *a, **k):
        made = real_client(self, service, *a, **k)
        stub = Stubber(made)
        if service == "sts":
            stub.add_response(
                "get_caller_identity", {"Account": ACCOUNT, "Arn": "arn:aws:iam::x:user/op", "UserId": "AID"}
            )
            calls.append(made.meta.endpoint_url)
        elif service == "cloudformation":
            stub.add_response("describe_stacks", {"Stacks": [STACK]}, {"StackName": STACK["StackName"]})
            calls.append(made.meta.endpoint_url)
        stub.activate()
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client)
    return calls


# DescribeStacks' answer for the dev stage's app stack, in the shape of CloudFormation's model (botocore
# validates it): the EndpointURL output is Chalice's, `https://${RestAPI}.execute-api.${AWS::Region}...`.
API = "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/api/"
STACK = {
    "StackName": "moonsend-dev",
    "CreationTime": "2026-11-27T10:00:00Z",
    "StackStatus": "CREATE_COMPLETE",
    "Outputs": [
        {"OutputKey": "EndpointURL", "OutputValue": API},
        {"OutputKey": "PrecompileEmailTopicArn", "OutputValue": f"arn:aws:sns:eu-west-1:{ACCOUNT}:x"},
    ],
}


def test_a_deployed_stage_is_reached_at_aws_with_the_credentials_account_and_region(shell):
    cli.client_env(None, "dev")
    assert "AWS_ENDPOINT_URL" not in os.environ  # moonsend sets no endpoint of its own for AWS
    assert shell == ["https://sts.eu-west-1.amazonaws.com", "https://cloudformation.eu-west-1.amazonaws.com"]
    assert os.environ["MOONSEND_ACCOUNT_ID"] == ACCOUNT  # never the local default 123456789012
    assert os.environ["AWS_REGION"] == "eu-west-1"  # the profile's, not us-east-1
    assert os.environ["MOONSEND_STAGE"] == "dev"
    assert os.environ["MOONSEND_FREE_RATE"] == "1"  # the dev stage's own settings (.chalice/config.json)
    from chalicelib.core.config import Settings

    settings = Settings.from_env()
    assert settings.topic_arn("t") == f"arn:aws:sns:eu-west-1:{ACCOUNT}:t"


def test_an_endpoint_is_used_only_when_given(shell):
    cli.client_env("https://vpce-0123.sqs.example", "dev")
    assert os.environ["AWS_ENDPOINT_URL"] == "https://vpce-0123.sqs.example"


def test_the_local_stage_talks_to_the_local_stack(shell):
    cli.client_env(None, "local")
    assert os.environ["AWS_ENDPOINT_URL"] == cli.DEFAULT_ENDPOINT


def test_no_region_is_a_clear_error_not_a_guess(shell, monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    with pytest.raises(SystemExit, match="no AWS region"):
        cli.client_env(None, "prod")


def test_credentials_that_do_not_work_are_a_clear_error(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("MOONSEND_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(SystemExit, match="cannot tell which AWS account"):
        cli.client_env(None, "dev")


def test_a_deployed_stage_makes_links_to_its_own_api_read_from_its_stack(shell):
    """What CloudFormation tells the functions that make links, the operator's process reads from the stack:
    `digest run` once failed on every stage with LinksNotConfigured."""
    outputs = cli.client_env(None, "dev")
    assert os.environ["MOONSEND_API_URL"] == API.rstrip("/")
    assert outputs["PrecompileEmailTopicArn"].endswith(":x")
    from chalicelib.core.config import Settings
    from chalicelib.wiring import Container

    settings = Settings.from_env({**os.environ, "MOONSEND_LINK_SECRET": "s" * 32})  # the key: read apart
    assert Container(settings).links.base_url == API.rstrip("/")


@pytest.mark.parametrize("name", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_KMS"])
@pytest.mark.parametrize("loopback", ["http://127.0.0.1:4566", "http://localhost:4566", "http://[::1]:4566"])
def test_a_deployed_stage_ignores_a_loopback_endpoint_left_in_the_shell(shell, monkeypatch, capsys, name, loopback):
    monkeypatch.setenv(name, loopback)
    cli.client_env(None, "prod")
    assert name not in os.environ
    assert shell[0] == "https://sts.eu-west-1.amazonaws.com"  # AWS's own, not the local stack's
    assert f"ignoring {name}={loopback}" in capsys.readouterr().err


def test_a_loopback_endpoint_named_on_the_command_line_is_used_for_a_deployed_stage(shell, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    cli.client_env("http://127.0.0.1:5000", "dev")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5000"


def test_an_endpoint_in_the_shell_that_is_not_loopback_is_kept(shell, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", "https://vpce-0123.sqs.eu-west-1.vpce.amazonaws.com")
    cli.client_env(None, "dev")
    assert os.environ["AWS_ENDPOINT_URL_SQS"] == "https://vpce-0123.sqs.eu-west-1.vpce.amazonaws.com"


def test_the_local_stage_keeps_the_shells_local_endpoint(shell, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4999")
    cli.client_env(None, "local")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4999"


@pytest.mark.parametrize("command", [["status"], ["tenant", "show", "--user", "a"], ["deploy"], ["destroy"]])
def test_a_stage_the_project_does_not_define_is_refused_with_the_ones_it_does(command, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args([*command, "--stage", "Prod"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'Prod'" in err and "'local', 'dev', 'prod'" in err
