"""The operator's process: which stage it operates, at which endpoint, and what it knows of that stage.

An operator's command runs in the operator's own shell, with the operator's credentials and nothing a
deployed function is given. What a function is told by CloudFormation (the API's URL, for links) the
command reads from the stage's stack outputs, so that `moonsend digest run --stage prod` composes the
same links `run_digest` would. What a function is told by `.chalice/config.json` is read from there.

A shell set up for the local stack (docs/local-stack.md says to export `AWS_ENDPOINT_URL`) must not send a
deployed stage's commands, signed with the operator's credentials, to whatever listens on loopback: a
deployed stage ignores a loopback endpoint from the shell unless `--endpoint` names it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"
LOCAL_STAGE = "local"
_CONFIG = Path(__file__).resolve().parents[1] / ".chalice" / "config.json"


def stages() -> list[str]:
    """The stages this project defines (`.chalice/config.json`), in its order."""
    try:
        return list(json.loads(_CONFIG.read_text())["stages"])
    except (OSError, ValueError, KeyError):
        return [LOCAL_STAGE]


def stage_variables(stage: str) -> dict[str, str]:
    """The stage's environment variables from `.chalice/config.json` (what every deployed function is given)."""
    try:
        all_stages = json.loads(_CONFIG.read_text())["stages"]
    except (OSError, ValueError, KeyError):
        return {}
    return {k: str(v) for k, v in all_stages.get(stage, {}).get("environment_variables", {}).items()}


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _endpoint_variables() -> list[str]:
    """AWS_ENDPOINT_URL and its per-service forms (AWS_ENDPOINT_URL_SQS, ...), as the SDK reads them."""
    return [n for n in os.environ if n == "AWS_ENDPOINT_URL" or n.startswith("AWS_ENDPOINT_URL_")]


def choose_endpoint(stage: str, given: str | None) -> None:
    """Set this process's endpoint for `stage`: `given` always; for the local stage the shell's, or the
    local stack's default; for a deployed stage AWS's own, a loopback endpoint from the shell dropped (with
    a note on stderr) and any other kept (a VPC endpoint, a FIPS one)."""
    if given:
        os.environ["AWS_ENDPOINT_URL"] = given
        return
    if stage == LOCAL_STAGE:
        os.environ.setdefault("AWS_ENDPOINT_URL", DEFAULT_ENDPOINT)
        return
    for name in _endpoint_variables():
        if is_loopback(os.environ[name]):
            print(
                f"moonsend: ignoring {name}={os.environ[name]} from the shell: --stage {stage} is deployed to AWS "
                "(--endpoint names an endpoint to use for it)",
                file=sys.stderr,
            )
            del os.environ[name]


def stack_outputs(stage: str) -> dict[str, str]:
    """The stage's app stack outputs ({}: no such stack, or it cannot be read with these credentials)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.deploy import stack_name

    try:
        stack = boto3.client("cloudformation").describe_stacks(StackName=stack_name(stage))["Stacks"][0]
    except (ClientError, BotoCoreError, IndexError):
        return {}
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs") or []}


def client_env(endpoint: str | None, stage: str) -> dict[str, str]:
    """This process's settings for operating a stage, as an operator's own shell has them; returns the
    stage's stack outputs.

    A deployed stage is reached with the operator's credentials (the SDK's chain: AWS_PROFILE, the usual
    variables, SSO) in the profile's region, at AWS's own endpoints (`choose_endpoint`). The account is the
    credentials' own (STS), never a default; the stage's settings are its `.chalice/config.json` variables
    and, for what CloudFormation tells the functions, its stack's outputs: names, limits and links are the
    deployed functions'."""
    choose_endpoint(stage, endpoint)
    if stage == LOCAL_STAGE:
        from infra.local.platform import LOCAL_STAGE_SETTINGS, PLATFORM_ACCESS_KEY, PLATFORM_SECRET_KEY

        os.environ.setdefault("AWS_ACCESS_KEY_ID", PLATFORM_ACCESS_KEY)
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", PLATFORM_SECRET_KEY)
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        for name, value in LOCAL_STAGE_SETTINGS.items():
            os.environ.setdefault(name, value)
    for name, value in stage_variables(stage).items():
        os.environ.setdefault(name, value)
    os.environ["MOONSEND_STAGE"] = stage
    import boto3

    session = boto3.session.Session()
    region = session.region_name
    if not region:
        raise SystemExit("moonsend: no AWS region: set AWS_DEFAULT_REGION, or a region in your profile")
    os.environ.setdefault("AWS_REGION", region)
    try:
        account = session.client("sts").get_caller_identity()["Account"]
    except Exception as exc:  # no credentials, expired ones, no network: the operator must fix them first
        raise SystemExit(f"moonsend: cannot tell which AWS account these credentials are for: {exc}") from None
    os.environ["MOONSEND_ACCOUNT_ID"] = account
    outputs = stack_outputs(stage)
    api = outputs.get("EndpointURL")
    if api:  # what the template gives every function that makes links (infra.cfn, MAKES_LINKS)
        os.environ["MOONSEND_API_URL"] = api.rstrip("/")
    return outputs
