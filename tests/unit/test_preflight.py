"""`moonsend deploy`'s preflight (infra/preflight.py): each check's ok, warn and fail, and a deploy that
stops on a failed check having changed nothing.

Every AWS answer here comes from botocore's service models, never from our code: the responses have the
output shapes of botocore/data/<service>/<version>/service-2.json (sesv2 2019-09-27, lambda 2015-03-31,
s3 2006-03-01, sts 2011-06-15; each named where it is used), and botocore's Stubber checks each against
that model as it is given (and each request's parameters against the input shape). The errors are those
the model lists for the operation; where it lists none (s3 GetBucketLocation, sts GetCallerIdentity), the
AWS page each is cited from. No network: Stubber answers before anything is sent.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.credentials import CredentialResolver
from botocore.stub import Stubber

from infra import preflight

REGION = "eu-west-1"
ACCOUNT = "111122223333"

# A packaged template's functions as infra/cfn.py and Chalice make them (build/dev/sam.json): send_emails on
# its topic, deliver_webhooks on its queue capped at 20 (infra.cfn.subscribe_to_own_topics), ses_events on
# its queue uncapped, the API, one schedule. None reserves concurrency.
TEMPLATE: dict[str, Any] = {
    "Resources": {
        "SendEmails": {
            "Type": "AWS::Serverless::Function",
            "Properties": {
                "Environment": {"Variables": {"MOONSEND_FREE_RATE": "1"}},
                "Events": {"SendEmailsSnsSubscription": {"Type": "SNS", "Properties": {}}},
            },
        },
        "DeliverWebhooks": {
            "Type": "AWS::Serverless::Function",
            "Properties": {
                "Events": {
                    "DeliverWebhooksSqsEventSource": {
                        "Type": "SQS",
                        "Properties": {"ScalingConfig": {"MaximumConcurrency": 20}},
                    }
                }
            },
        },
        "SesEvents": {
            "Type": "AWS::Serverless::Function",
            "Properties": {"Events": {"SesEventsSqsEventSource": {"Type": "SQS", "Properties": {}}}},
        },
        "APIHandler": {"Type": "AWS::Serverless::Function", "Properties": {}},
        "SweepQueues": {
            "Type": "AWS::Serverless::Function",
            "Properties": {"Events": {"SweepQueuesEvent": {"Type": "Schedule", "Properties": {}}}},
        },
        "PayloadBucket": {"Type": "AWS::S3::Bucket", "Properties": {}},
    }
}
EXPECTED = preflight.EXPECTED_DRAINS + 20 + preflight.SQS_STARTING_CONCURRENCY + 1 + 1


def _client(service: str, region: str = REGION) -> Any:
    return boto3.client(service, region_name=region, aws_access_key_id="x", aws_secret_access_key="x")


@contextlib.contextmanager
def _stubbed(service: str, region: str = REGION) -> Iterator[tuple[Any, Stubber]]:
    client = _client(service, region)
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


# --- answers, shaped by the models ------------------------------------------------------------------------

# sts GetCallerIdentityResponse (UserId, Account, Arn).
IDENTITY = {"UserId": "AROAEXAMPLE:ops", "Account": ACCOUNT, "Arn": f"arn:aws:sts::{ACCOUNT}:assumed-role/admin/ops"}


def _account(
    *, production: bool = True, sending: bool = True, enforcement: str | None = "HEALTHY", rate=14.0, day=50000.0
) -> dict[str, Any]:
    """sesv2 GetAccountResponse. EnforcementStatus is a string whose documentation in the model names
    HEALTHY, PROBATION and SHUTDOWN; Details.ReviewDetails.Status is the model's enum."""
    answer: dict[str, Any] = {
        "DedicatedIpAutoWarmupEnabled": False,
        "ProductionAccessEnabled": production,
        "SendQuota": {"Max24HourSend": day, "MaxSendRate": rate, "SentLast24Hours": 0.0},
        "SendingEnabled": sending,
    }
    if enforcement is not None:
        answer["EnforcementStatus"] = enforcement
    if not production:
        answer["Details"] = {"MailType": "MARKETING", "ReviewDetails": {"Status": "PENDING", "CaseId": "1"}}
    return answer


def _identity(kind: str, verified: bool, status: str) -> dict[str, Any]:
    """sesv2 GetEmailIdentityResponse: IdentityType and VerificationStatus are the model's enums."""
    return {"IdentityType": kind, "VerifiedForSendingStatus": verified, "VerificationStatus": status}


def _limits(total: int, unreserved: int) -> dict[str, Any]:
    """lambda GetAccountSettingsResponse: AccountLimit and AccountUsage."""
    return {
        "AccountLimit": {
            "TotalCodeSize": 80530636800,
            "CodeSizeUnzipped": 262144000,
            "CodeSizeZipped": 52428800,
            "ConcurrentExecutions": total,
            "UnreservedConcurrentExecutions": unreserved,
        },
        "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0},
    }


# --- stage and region: no call ----------------------------------------------------------------------------


def test_the_local_stage_is_never_deployed_and_the_others_are():
    assert preflight.stage("local").status == "fail"
    assert preflight.stage("dev").status == preflight.stage("prod").status == "ok"


def test_a_region_must_be_set():
    missing = preflight.region(None)
    assert missing.status == "fail" and "--region" in missing.todo
    assert preflight.region(REGION).status == "ok"


# --- credentials ------------------------------------------------------------------------------------------


def test_credentials_resolve_to_an_account():
    with _stubbed("sts") as (sts, stub):
        stub.add_response("get_caller_identity", IDENTITY, {})
        check, account = preflight.credentials(sts)
    assert check.status == "ok" and account == ACCOUNT and ACCOUNT in check.found
    assert check.call == "sts GetCallerIdentity"


def test_credentials_the_account_does_not_know_fail():
    # The model lists no error for GetCallerIdentity. InvalidClientTokenId (HTTP 403, "The X.509 certificate
    # or AWS access key ID provided does not exist in our records.") is one of STS's common errors:
    # https://docs.aws.amazon.com/STS/latest/APIReference/CommonErrors.html
    with _stubbed("sts") as (sts, stub):
        stub.add_client_error(
            "get_caller_identity",
            "InvalidClientTokenId",
            "The security token included in the request is invalid.",
            http_status_code=403,
        )
        check, account = preflight.credentials(sts)
    assert check.status == "fail" and account is None and "InvalidClientTokenId" in check.found


def _without_credentials(service: str):
    """A client whose credential chain finds nothing."""
    session = botocore.session.get_session()
    session.register_component("credential_provider", CredentialResolver(providers=[]))
    return session.create_client(service, region_name=REGION)


def test_no_credentials_at_all_fail():
    """A client whose credential chain finds nothing: botocore refuses to sign (NoCredentialsError) before
    anything is sent."""
    check, account = preflight.credentials(_without_credentials("sts"))
    assert check.status == "fail" and account is None and check.found == "no credentials found"


def test_without_credentials_no_other_check_is_tried():
    clients = {"sts": _without_credentials("sts"), "s3": _client("s3")}
    checks = preflight.run(clients, "dev", TEMPLATE)
    assert [c.name for c in checks] == ["credentials"] and preflight.failed(checks)


# --- SES tenants ------------------------------------------------------------------------------------------


def test_ses_tenants_answer_when_the_probe_tenant_is_not_found():
    # GetTenant's errors in the model: NotFoundException (404), TooManyRequestsException, BadRequestException.
    with _stubbed("sesv2") as (ses, stub):
        stub.add_client_error(
            "get_tenant",
            "NotFoundException",
            "Tenant moonsend-dev-moonsend-smoke does not exist.",
            http_status_code=404,
            expected_params={"TenantName": "moonsend-dev-moonsend-smoke"},
        )
        check = preflight.ses_tenants(ses, "dev", REGION)
    assert check.status == "ok" and check.call == "sesv2 GetTenant moonsend-dev-moonsend-smoke"


def test_ses_tenants_answer_with_the_tenant():
    tenant = {  # sesv2 GetTenantResponse: Tenant
        "Tenant": {
            "TenantName": "moonsend-dev-moonsend-smoke",
            "TenantId": "t-1",
            "TenantArn": f"arn:aws:ses:{REGION}:{ACCOUNT}:tenant/moonsend-dev-moonsend-smoke/t-1",
            "SendingStatus": "ENABLED",
        }
    }
    with _stubbed("sesv2") as (ses, stub):
        stub.add_response("get_tenant", tenant, {"TenantName": "moonsend-dev-moonsend-smoke"})
        assert preflight.ses_tenants(ses, "dev", REGION).status == "ok"


def test_a_region_whose_ses_does_not_answer_for_tenants_is_said_with_what_it_means():
    """What SES answers in a region without tenants is not documented; any answer but the tenant or
    NotFoundException is taken for it. Fed here: BadRequestException, which the model lists for GetTenant."""
    with _stubbed("sesv2") as (ses, stub):
        stub.add_client_error("get_tenant", "BadRequestException", "Unsupported operation.", http_status_code=400)
        check = preflight.ses_tenants(ses, "dev", REGION)
    assert check.status == "warn" and "BadRequestException" in check.found
    assert "reputation" in check.todo and "list-tenants" in check.todo


# --- the SES account --------------------------------------------------------------------------------------


def _ses_account(answer: dict[str, Any], free_rate: float = 1.0) -> preflight.Check:
    with _stubbed("sesv2") as (ses, stub):
        stub.add_response("get_account", answer, {})
        return preflight.ses_account(ses, REGION, free_rate)


def test_an_account_with_production_access_and_sending_enabled_is_ok_with_its_quota():
    check = _ses_account(_account())
    assert check.status == "ok" and check.call == "sesv2 GetAccount"
    assert "production access" in check.found and "50,000 a day at 14 a second" in check.found
    assert "HEALTHY" in check.found


def test_the_sandbox_warns_what_it_means_for_tenants():
    check = _ses_account(_account(production=False, rate=1.0, day=200.0))
    assert check.status == "warn" and "sandbox" in check.found and "200 a day at 1 a second" in check.found
    assert "verified addresses" in check.todo and "200 a day and 1 a second" in check.todo
    assert "tenants' campaigns to real recipients are refused" in check.todo and "PENDING" in check.todo


def test_an_account_under_review_warns():
    assert _ses_account(_account(enforcement="PROBATION")).status == "warn"


def test_a_free_rate_above_the_accounts_rate_warns():
    check = _ses_account(_account(rate=14.0), free_rate=20.0)
    assert check.status == "warn" and "MOONSEND_FREE_RATE 20" in check.todo


def test_an_account_without_enforcement_status_is_read_without_it():
    check = _ses_account(_account(enforcement=None))
    assert check.status == "ok" and "enforcement" not in check.found


def test_sending_disabled_stops_the_deploy():
    check = _ses_account(_account(sending=False))
    assert check.status == "fail" and "sending disabled" in check.found and "no email would go out" in check.todo


def test_a_shut_down_account_stops_the_deploy():
    assert _ses_account(_account(enforcement="SHUTDOWN")).status == "fail"


def test_an_account_that_cannot_be_read_stops_the_deploy():
    # GetAccount's errors in the model: TooManyRequestsException (429), BadRequestException.
    with _stubbed("sesv2") as (ses, stub):
        stub.add_client_error("get_account", "TooManyRequestsException", "Too many requests.", http_status_code=429)
        check = preflight.ses_account(ses, REGION, 1.0)
    assert check.status == "fail" and "TooManyRequestsException" in check.found


# --- the smoke's sender -----------------------------------------------------------------------------------


def _not_found(stub: Stubber, name: str) -> None:
    # GetEmailIdentity's errors in the model: NotFoundException (404), TooManyRequestsException, BadRequestException.
    stub.add_client_error(
        "get_email_identity",
        "NotFoundException",
        f"Email identity {name} does not exist.",
        http_status_code=404,
        expected_params={"EmailIdentity": name},
    )


def test_without_a_smoke_sender_nothing_is_listed_and_the_smoke_is_said_to_need_one():
    with _stubbed("sesv2") as (ses, _stub):
        check = preflight.smoke_sender(ses, None, REGION)  # no call: the stub has nothing queued
    assert check.status == "skip" and "needs an address at a verified identity" in check.todo


def test_a_verified_address_is_ok():
    with _stubbed("sesv2") as (ses, stub):
        stub.add_response(
            "get_email_identity",
            _identity("EMAIL_ADDRESS", True, "SUCCESS"),
            {"EmailIdentity": "smoke@example.com"},
        )
        check = preflight.smoke_sender(ses, "smoke@example.com", REGION)
    assert check.status == "ok" and check.found == "smoke@example.com is verified"


def test_an_address_at_a_verified_domain_is_ok():
    with _stubbed("sesv2") as (ses, stub):
        _not_found(stub, "smoke@example.com")
        stub.add_response("get_email_identity", _identity("DOMAIN", True, "SUCCESS"), {"EmailIdentity": "example.com"})
        check = preflight.smoke_sender(ses, "smoke@example.com", REGION)
    assert check.status == "ok" and "covered by verified example.com" in check.found
    assert check.call == "sesv2 GetEmailIdentity smoke@example.com, sesv2 GetEmailIdentity example.com"


def test_an_unverified_address_falls_back_to_its_domain():
    with _stubbed("sesv2") as (ses, stub):
        stub.add_response(
            "get_email_identity", _identity("EMAIL_ADDRESS", False, "PENDING"), {"EmailIdentity": "smoke@example.com"}
        )
        stub.add_response("get_email_identity", _identity("DOMAIN", True, "SUCCESS"), {"EmailIdentity": "example.com"})
        assert preflight.smoke_sender(ses, "smoke@example.com", REGION).status == "ok"


def test_a_sender_with_no_identity_fails():
    with _stubbed("sesv2") as (ses, stub):
        _not_found(stub, "smoke@example.com")
        _not_found(stub, "example.com")
        check = preflight.smoke_sender(ses, "smoke@example.com", REGION)
    assert check.status == "fail" and "example.com: no identity" in check.found
    assert "create-email-identity" in check.todo


def test_a_sender_whose_domain_is_pending_fails():
    with _stubbed("sesv2") as (ses, stub):
        _not_found(stub, "smoke@example.com")
        stub.add_response("get_email_identity", _identity("DOMAIN", False, "PENDING"), {"EmailIdentity": "example.com"})
        check = preflight.smoke_sender(ses, "smoke@example.com", REGION)
    assert check.status == "fail" and "example.com: not verified (PENDING)" in check.found


def test_a_sender_that_is_not_an_address_fails_without_a_call():
    with _stubbed("sesv2") as (ses, _stub):
        assert preflight.smoke_sender(ses, "example.com", REGION).status == "fail"


def test_the_consoles_from_unset_warns_that_only_keys_sign_in_and_calls_nothing():
    with _stubbed("sesv2") as (ses, _stub):
        check = preflight.console_from(ses, None, REGION)
    assert check.status == "warn" and "emails no sign-in links" in check.found and check.call == ""


def test_the_consoles_from_at_a_verified_domain_is_ok_and_unverified_stops_the_deploy():
    with _stubbed("sesv2") as (ses, stub):
        _not_found(stub, "sign-in@example.com")
        stub.add_response("get_email_identity", _identity("DOMAIN", True, "SUCCESS"), {"EmailIdentity": "example.com"})
        ok = preflight.console_from(ses, "sign-in@example.com", REGION)
        _not_found(stub, "sign-in@example.com")
        stub.add_response("get_email_identity", _identity("DOMAIN", False, "PENDING"), {"EmailIdentity": "example.com"})
        pending = preflight.console_from(ses, "sign-in@example.com", REGION)
    assert (ok.name, ok.status) == ("console-from", "ok") and "covered by verified example.com" in ok.found
    assert pending.status == "fail" and "example.com: not verified (PENDING)" in pending.found


def test_the_consoles_from_is_read_from_the_packaged_api_function():
    template = {"Resources": {"APIHandler": {"Properties": {"Environment": {"Variables": {}}}}}}
    assert preflight.console_from_of(template) is None
    variables = template["Resources"]["APIHandler"]["Properties"]["Environment"]["Variables"]
    variables["MOONSEND_CONSOLE_FROM"] = "sign-in@example.com"
    assert preflight.console_from_of(template) == "sign-in@example.com"


# --- Lambda's concurrency ---------------------------------------------------------------------------------


def _concurrency(total: int, unreserved: int, template: dict[str, Any] = TEMPLATE) -> preflight.Check:
    with _stubbed("lambda") as (lam, stub):
        stub.add_response("get_account_settings", _limits(total, unreserved), {})
        return preflight.lambda_concurrency(lam, template)


def test_the_stage_expects_its_drains_its_capped_and_uncapped_pollers_and_one_of_each_other_function():
    assert preflight.stage_concurrency(TEMPLATE) == preflight.StageConcurrency(reserved=0, expected=EXPECTED)


def test_the_default_quota_is_ok():
    check = _concurrency(1000, 1000)
    assert check.status == "ok" and check.call == "lambda GetAccountSettings"
    assert f"reserves 0 and may use about {EXPECTED} at once" in check.found


def test_a_new_accounts_quota_of_ten_fails():
    check = _concurrency(10, 10)
    assert check.status == "fail" and "below 100" in check.todo and "L-B99A9384" in check.todo


def test_what_the_stage_reserves_must_leave_lambdas_hundred():
    reserving = json.loads(json.dumps(TEMPLATE))
    reserving["Resources"]["SendEmails"]["Properties"]["ReservedConcurrentExecutions"] = 950
    assert preflight.stage_concurrency(reserving).reserved == 950
    assert _concurrency(1000, 1000, reserving).status == "fail"
    assert _concurrency(1050, 1050, reserving).status == "ok"


def test_an_unreserved_pool_below_the_expected_peak_warns():
    check = _concurrency(1000, EXPECTED - 1)
    assert check.status == "warn" and "expected peak" in check.todo


def test_settings_that_cannot_be_read_fail():
    # GetAccountSettings' errors in the model: ServiceException (500), TooManyRequestsException.
    with _stubbed("lambda") as (lam, stub):
        stub.add_client_error("get_account_settings", "ServiceException", "Internal error.", http_status_code=500)
        assert preflight.lambda_concurrency(lam, TEMPLATE).status == "fail"


# --- the artifacts bucket ---------------------------------------------------------------------------------


def _location(stub: Stubber, bucket: str, constraint: str | None) -> None:
    # s3 GetBucketLocationOutput: LocationConstraint, "null" for us-east-1 and "EU" for eu-west-1 (its
    # documentation in the model); botocore parses an empty LocationConstraint element as None.
    answer = {} if constraint is None else {"LocationConstraint": constraint}
    stub.add_response("get_bucket_location", answer, {"Bucket": bucket})


def _bucket_error(stub: Stubber, code: str, message: str, status: int) -> None:
    # The model lists no error for GetBucketLocation; its documentation links S3's list of error codes,
    # https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html#ErrorCodeList: NoSuchBucket ("The
    # specified bucket does not exist.", 404), AccessDenied ("Access Denied", 403).
    stub.add_client_error("get_bucket_location", code, message, http_status_code=status)


def test_a_bucket_in_the_stacks_region_is_ok():
    with _stubbed("s3") as (s3, stub):
        _location(stub, "my-artifacts", REGION)
        assert preflight.artifacts_bucket(s3, "my-artifacts", REGION, given=True).status == "ok"


def test_the_location_constraints_that_are_not_region_names():
    with _stubbed("s3", "us-east-1") as (s3, stub):
        _location(stub, "b1", None)
        assert preflight.artifacts_bucket(s3, "b1", "us-east-1", given=True).status == "ok"
    with _stubbed("s3") as (s3, stub):
        _location(stub, "b2", "EU")
        assert preflight.artifacts_bucket(s3, "b2", "eu-west-1", given=True).status == "ok"
    assert preflight.bucket_region("") == "us-east-1"


def test_a_bucket_in_another_region_fails():
    with _stubbed("s3") as (s3, stub):
        _location(stub, "my-artifacts", "us-west-2")
        check = preflight.artifacts_bucket(s3, "my-artifacts", REGION, given=True)
    assert check.status == "fail" and check.found == f"my-artifacts is in us-west-2, the stack in {REGION}"


def test_a_default_bucket_not_made_yet_is_ok_and_a_given_one_missing_fails():
    with _stubbed("s3") as (s3, stub):
        _bucket_error(stub, "NoSuchBucket", "The specified bucket does not exist", 404)
        _bucket_error(stub, "NoSuchBucket", "The specified bucket does not exist", 404)
        default = preflight.artifacts_bucket(s3, "moonsend-artifacts-1-eu-west-1", REGION, given=False)
        given = preflight.artifacts_bucket(s3, "my-artifacts", REGION, given=True)
    assert default.status == "ok" and "will be created" in default.found
    assert given.status == "fail" and given.found == "no bucket my-artifacts"


def test_a_default_bucket_name_another_account_holds_fails():
    with _stubbed("s3") as (s3, stub):
        _bucket_error(stub, "AccessDenied", "Access Denied", 403)
        check = preflight.artifacts_bucket(s3, "moonsend-artifacts-1-eu-west-1", REGION, given=False)
    assert check.status == "fail" and "another account" in check.todo


def test_the_default_bucket_is_the_one_deploy_makes():
    from infra.cli import _artifacts_bucket

    with _stubbed("sts") as (sts, sts_stub), _stubbed("s3") as (s3, s3_stub):
        sts_stub.add_response("get_caller_identity", IDENTITY, {})
        s3_stub.add_response("head_bucket", {}, None)  # s3 HeadBucketOutput: every member optional
        made = _artifacts_bucket({"sts": sts, "s3": s3}, create=False)
    assert made == preflight.default_artifacts_bucket(ACCOUNT, REGION)


# --- the deploy: the preflight first, and nothing changed when it fails -----------------------------------


@pytest.fixture
def deploy(monkeypatch, tmp_path):
    """`moonsend deploy` with stubbed clients (each call recorded) and a package made of files here."""
    import infra.cli
    import infra.package

    (tmp_path / "sam.json").write_text(json.dumps(TEMPLATE))
    (tmp_path / "data.json").write_text(json.dumps({"Resources": {}}))
    (tmp_path / "deployment.zip").write_bytes(b"PK")
    report = SimpleNamespace(
        template=str(tmp_path / "sam.json"),
        bundle=str(tmp_path / "deployment.zip"),
        data_template=str(tmp_path / "data.json"),
    )

    @contextlib.contextmanager
    def packaged(stage: str) -> Iterator[Any]:
        yield report

    names = ("cloudformation", "s3", "sqs", "cloudwatch", "dynamodb", "sns", "sts", "scheduler")
    names += ("secretsmanager", "sesv2", "kms", "lambda")
    clients = {n: _client(n) for n in names}
    calls: list[str] = []
    stubs = {}
    for name, client in clients.items():
        client.meta.events.register("before-call", lambda model, **kw: calls.append(model.name))
        stubs[name] = Stubber(client)
        stubs[name].activate()
    monkeypatch.setattr(infra.package, "packaged", packaged)
    monkeypatch.setattr(infra.cli, "_aws_clients", lambda region: clients)

    def run(*args: str) -> int:
        parsed = infra.cli.build_parser().parse_args(["deploy", "--stage", "dev", "--region", REGION, *args])
        return int(parsed.func(parsed))

    yield SimpleNamespace(run=run, stubs=stubs, calls=calls)
    for stub in stubs.values():
        stub.assert_no_pending_responses()


READS = {"GetCallerIdentity", "GetTenant", "GetAccount", "GetAccountSettings", "GetBucketLocation", "HeadBucket"}


def _preflight_answers(stubs: dict[str, Stubber], *, sending: bool = True) -> None:
    stubs["sts"].add_response("get_caller_identity", IDENTITY, {})
    stubs["sesv2"].add_client_error("get_tenant", "NotFoundException", "no such tenant", http_status_code=404)
    stubs["sesv2"].add_response("get_account", _account(sending=sending), {})
    stubs["lambda"].add_response("get_account_settings", _limits(1000, 1000), {})
    _location(stubs["s3"], f"moonsend-artifacts-{ACCOUNT}-{REGION}", REGION)


def test_a_failed_check_stops_the_deploy_before_the_bucket_or_any_upload(deploy, capsys):
    _preflight_answers(deploy.stubs, sending=False)
    assert deploy.run() == 2
    out, err = capsys.readouterr()
    assert "fail ses-account" in out and "ok   lambda-concurrency" in out and "ok   credentials" in out
    assert "1 check(s) failed; nothing was changed" in err
    assert set(deploy.calls) <= READS  # no CreateBucket, PutObject, CreateChangeSet, ...
    assert "deploy-stack" not in out


def test_a_dry_run_shows_the_preflight_and_the_plan_and_changes_nothing(deploy, capsys):
    _preflight_answers(deploy.stubs)
    deploy.stubs["sts"].add_response("get_caller_identity", IDENTITY, {})  # the default bucket's name
    deploy.stubs["s3"].add_response("head_bucket", {}, None)
    assert deploy.run("--dry-run") == 0
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("ok   stage") and any(line.startswith("skip smoke-sender") for line in lines)
    assert "deploy-stack           moonsend-dev" in out
    assert set(deploy.calls) <= READS


def test_the_local_stage_and_a_missing_region_stop_before_any_client(deploy, monkeypatch, capsys):
    import infra.cli

    parsed = infra.cli.build_parser().parse_args(["deploy", "--stage", "local", "--region", REGION])
    assert parsed.func(parsed) == 2
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    parsed = infra.cli.build_parser().parse_args(["deploy", "--stage", "dev"])
    assert parsed.func(parsed) == 2
    out, _ = capsys.readouterr()
    assert "fail stage" in out and "fail region" in out
    assert deploy.calls == []
