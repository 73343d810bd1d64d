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
        if service == "sts":
            stub = Stubber(made)
            stub.add_response(
                "get_caller_identity", {"Account": ACCOUNT, "Arn": "arn:aws:iam::x:user/op", "UserId": "AID"}
            )
            stub.activate()
            calls.append(made.meta.endpoint_url)
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client)
    return calls


def test_a_deployed_stage_is_reached_at_aws_with_the_credentials_account_and_region(shell):
    cli.client_env(None, "dev")
    assert "AWS_ENDPOINT_URL" not in os.environ  # moonsend sets no endpoint of its own for AWS
    assert shell == ["https://sts.eu-west-1.amazonaws.com"]
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
