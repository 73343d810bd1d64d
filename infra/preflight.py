"""`moonsend deploy`'s preflight: what a first deploy in a fresh account depends on, checked before the
deploy changes anything (before the artifacts bucket is created or anything uploaded).

Decided as data, then done, as aws/chalice's deployer plans before it executes: each check is a small
function of the clients it reads (and the stage, its packaged template, the options) that makes only
read calls and answers a `Check`: ok, warn, fail or skip (not checked, and why), what it found, what to do,
and the AWS call it made. `cmd_deploy` prints every check and stops (exit 2) if any failed. The checks,
their calls and their rules are in docs/deploying.md (the preflight); the AWS answers they read are those
of botocore's service models (tests/package/test_preflight.py feeds them through botocore's Stubber).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

Status = Literal["ok", "warn", "fail", "skip"]

# Lambda keeps at least this many concurrent executions unreserved: it refuses a reservation
# (PutFunctionConcurrency, a function's ReservedConcurrentExecutions) that would leave fewer (AWS Lambda
# Developer Guide, "Configuring reserved concurrency"). An account whose whole limit is below what the
# stage reserves plus this cannot take the stage's reservations; below 100 with none, it is a new
# account's reduced quota (often 10), at which a few drains take every execution (docs/deploying.md, 3).
LAMBDA_MIN_UNRESERVED = 100
# The warning's expected peak of the stage's concurrent executions (stage_concurrency): a sizing
# assumption, not a measurement. Each queue being drained holds one send_emails execution for up to 15
# minutes (a tenant above MOONSEND_DRAINER_MAX_RATE several): fifty queues drained at once is the free
# queue and a few dozen paid tenants sending in the same quarter hour, a busy hour of a first production
# stage. Change it when the stage's traffic is known.
EXPECTED_DRAINS = 50
# An SQS event source with no MaximumConcurrency (ses_events) starts with five concurrent batches and
# scales up from there as its queue deepens (AWS Lambda Developer Guide, "Using Lambda with Amazon SQS",
# scaling): five are counted as its steady use.
SQS_STARTING_CONCURRENCY = 5
DRAINER_FUNCTION = "SendEmails"  # send_emails' logical id in the packaged template
API_FUNCTION = "APIHandler"  # the API's function, which mails the console's sign-in links
QUOTA_ADVICE = (
    "ask for more (1,000 is the usual default): Service Quotas, AWS Lambda, Concurrent executions, or "
    "aws service-quotas request-service-quota-increase --service-code lambda --quota-code L-B99A9384 "
    "--desired-value 1000"
)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    found: str  # what the check found
    todo: str = ""  # what to do about it (warn, fail, skip)
    call: str = ""  # the AWS call it made ("" for none)

    def __str__(self) -> str:
        line = f"{self.status:<5}{self.name:<20}{self.found}"
        if self.call:
            line += f"  ({self.call})"
        return line + (f"\n{'':<25}{self.todo}" if self.todo else "")


def failed(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]


def stop(checks: list[Check], *, last: bool, say: Callable[[str], None] = print) -> bool:
    """Whether the deploy must stop here. The checks are said when one failed, or when they are all in
    (`last`): a first part that passed is said with the rest."""
    bad = failed(checks)
    if bad or last:
        say("\n".join(str(c) for c in checks))
    if bad:
        print(f"preflight: {len(bad)} check(s) failed; nothing was changed", file=sys.stderr)
    return bool(bad)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _said(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        message = exc.response.get("Error", {}).get("Message", "")
        return f"{_code(exc)}: {message}" if message else _code(exc)
    return str(exc)


# --- before any client: the stage and the region ---------------------------------------------------------


def stage(name: str) -> Check:
    """The local stage is the local stack's (`moonsend up`, `make demo`), created from its packaged
    template by infra.local; its config names the local stack's account and never an AWS one."""
    if name == "local":
        return Check(
            "stage",
            "fail",
            "stage local is the local stack's, never deployed to AWS",
            "deploy dev or prod; the local stack is started with moonsend up",
        )
    return Check("stage", "ok", f"{name}")


def region(name: str | None) -> Check:
    """The region the clients resolved (--region, the profile's, AWS_DEFAULT_REGION)."""
    if not name:
        return Check(
            "region",
            "fail",
            "no AWS region",
            "pass --region, or set one in the profile (aws configure set region eu-west-1), or AWS_DEFAULT_REGION",
        )
    return Check("region", "ok", name)


# --- the account ------------------------------------------------------------------------------------------


def credentials(sts: Any) -> tuple[Check, str | None]:
    """The credentials resolve, and to which account (the default artifacts bucket is named by it)."""
    call = "sts GetCallerIdentity"
    todo = "sign in (aws sso login --profile ...), or set AWS_PROFILE to a profile with credentials for the account"
    try:
        me = sts.get_caller_identity()
    except NoCredentialsError:
        return Check("credentials", "fail", "no credentials found", todo, call), None
    except (ClientError, BotoCoreError) as exc:
        return Check("credentials", "fail", f"refused: {_said(exc)}", todo, call), None
    return Check("credentials", "ok", f"account {me['Account']} as {me['Arn']}", call=call), str(me["Account"])


def ses_tenants(sesv2: Any, stage_name: str, region_name: str) -> Check:
    """SES's tenant API answers in the region: GetTenant of the smoke tenant's SES tenant, the call the
    functions make first for a free tenant (chalicelib.stores.ses_tenants). NotFoundException is an
    answer (the tenant is made on its first send)."""
    from chalicelib.stores.ses_tenants import tenant_name
    from infra.smoke import SMOKE_TENANT

    name = tenant_name(f"moonsend-{stage_name}", SMOKE_TENANT)
    call = f"sesv2 GetTenant {name}"
    try:
        sesv2.get_tenant(TenantName=name)
        found = f"SES tenants answer in {region_name} ({name} exists)"
    except ClientError as exc:
        if _code(exc) != "NotFoundException":
            return _no_tenants(region_name, _said(exc), call)
        found = f"SES tenants answer in {region_name}"
    except BotoCoreError as exc:
        return _no_tenants(region_name, _said(exc), call)
    return Check("ses-tenants", "ok", found, call=call)


def _no_tenants(region_name: str, said: str, call: str) -> Check:
    return Check(
        "ses-tenants",
        "warn",
        f"SES tenants did not answer in {region_name}: {said}",
        "without them every free tenant shares the platform account's reputation (one tenant's bounces can "
        "pause all); pick a region where aws sesv2 list-tenants answers, or deploy knowing that",
        call,
    )


def ses_account(sesv2: Any, region_name: str, free_rate: float) -> Check:
    """The platform account's sending status in the region (GetAccount): sending enabled (else nothing
    goes out: stop), the enforcement status (SHUTDOWN: stop; PROBATION: warn), production access (the
    sandbox: warn), and the quota, which the free plan's rate must stay within."""
    call = "sesv2 GetAccount"
    try:
        account = sesv2.get_account()
    except (ClientError, BotoCoreError) as exc:
        return Check("ses-account", "fail", f"cannot read the SES account: {_said(exc)}", "", call)
    quota = account.get("SendQuota") or {}
    max_rate = quota.get("MaxSendRate")
    max_day = quota.get("Max24HourSend")
    enforcement = account.get("EnforcementStatus")
    production = bool(account.get("ProductionAccessEnabled"))
    facts = [
        "production access" if production else "sandbox",
        "sending enabled" if account.get("SendingEnabled") else "sending disabled",
        f"quota {_num(max_day)} a day at {_num(max_rate)} a second",
    ]
    if enforcement:
        facts.insert(2, f"enforcement {enforcement}")
    found = ", ".join(facts)
    fails: list[str] = []
    warns: list[str] = []
    if not account.get("SendingEnabled"):
        fails.append(
            f"SES sending is disabled for the account in {region_name}: no email would go out; "
            "see the SES console's account dashboard for why, and have it enabled"
        )
    if enforcement == "SHUTDOWN":
        fails.append("SES has paused the account's sending (SHUTDOWN): correct the cause, then ask AWS to resume it")
    elif enforcement == "PROBATION":
        warns.append("SES has the account under review (PROBATION): bounces and complaints must come down")
    if not production:
        review = ((account.get("Details") or {}).get("ReviewDetails") or {}).get("Status")
        warns.append(
            "in the SES sandbox: email goes only to verified addresses and the mailbox simulator, at most "
            "200 a day and 1 a second, so tenants' campaigns to real recipients are refused (the smoke works); "
            "request production access (docs/deploying.md, 2)" + (f"; the request is {review}" if review else "")
        )
    if max_rate is not None and free_rate > float(max_rate):
        warns.append(
            f"the free plan's rate (MOONSEND_FREE_RATE {_num(free_rate)}) is above MaxSendRate "
            f"{_num(max_rate)}: free-plan sends would be throttled; lower it or ask for a higher quota"
        )
    status: Status = "fail" if fails else "warn" if warns else "ok"
    return Check("ses-account", status, found, "; ".join(fails + warns), call)


def _num(value: Any) -> str:
    if value is None:
        return "?"
    f = float(value)
    return f"{f:,.0f}" if f == int(f) else f"{f:,}"


def smoke_sender(sesv2: Any, address: str | None, region_name: str) -> Check:
    """The smoke's sender is verified for sending: its own identity, or else its domain's (SES sends from
    the domain's identity when the address's is missing or not verified)."""
    if not address:
        return Check(
            "smoke-sender",
            "skip",
            "not checked",
            "the smoke (make smoke SENDER=...) needs an address at a verified identity; "
            "--smoke-sender ADDRESS checks it now",
        )
    return _verified(sesv2, "smoke-sender", address, region_name)


def console_from(sesv2: Any, address: str | None, region_name: str) -> Check:
    """The console's From address (MOONSEND_CONSOLE_FROM, in the stage's variables) is verified for sending
    in the platform's account: else every sign-in link and invitation SES refuses, and nobody but a key
    holder signs in. Unset, the console signs in with API keys only: a warning, not a failure."""
    if not address:
        return Check(
            "console-from",
            "warn",
            "MOONSEND_CONSOLE_FROM is not set: the console emails no sign-in links (API keys only)",
            "set it in .chalice/config.json's stage environment_variables to an address at a verified "
            "identity (docs/deploying.md, the console's email)",
        )
    return _verified(sesv2, "console-from", address, region_name)


def _verified(sesv2: Any, check: str, given: str, region_name: str) -> Check:
    """`given` (an address, or `Name <address>`) is covered by a verified identity of the platform's account:
    its own, or its domain's."""
    address = parseaddr(given)[1] or given
    local, at, domain = address.rpartition("@")
    if not (local and at and domain):
        return Check(check, "fail", f"{address!r} is not an email address", "pass an address, a@example.com")
    seen: list[str] = []
    calls: list[str] = []
    for name in (address, domain):
        calls.append(f"sesv2 GetEmailIdentity {name}")
        try:
            identity = sesv2.get_email_identity(EmailIdentity=name)
        except ClientError as exc:
            if _code(exc) != "NotFoundException":
                return Check(check, "fail", f"cannot read {name}: {_said(exc)}", "", ", ".join(calls))
            seen.append(f"{name}: no identity")
            continue
        if identity.get("VerifiedForSendingStatus"):
            found = f"{address} is verified" if name == address else f"{address} is covered by verified {domain}"
            return Check(check, "ok", found, call=", ".join(calls))
        seen.append(f"{name}: not verified ({identity.get('VerificationStatus', 'no status')})")
    return Check(
        check,
        "fail",
        "; ".join(seen),
        f"verify the domain {domain} in {region_name} (docs/deploying.md, 2), or the address "
        f"(aws sesv2 create-email-identity --email-identity {address}, then the link SES mails to it)",
        ", ".join(calls),
    )


@dataclass(frozen=True)
class StageConcurrency:
    reserved: int  # the template's ReservedConcurrentExecutions, summed
    expected: int  # the stage's expected peak from the unreserved pool (see EXPECTED_DRAINS)


def stage_concurrency(template: dict[str, Any]) -> StageConcurrency:
    """What the stage reserves, and its expected peak of concurrent executions from the unreserved pool:
    one of each function without a reservation (schedules, the API, precompile_email, run_digest, the
    stream's webhook_events: each may be running while the others are), an SQS source's
    MaximumConcurrency where the template caps it (deliver_webhooks: 20) or SQS_STARTING_CONCURRENCY, and
    EXPECTED_DRAINS of send_emails."""
    reserved = expected = 0
    for logical_id, res in template.get("Resources", {}).items():
        if res.get("Type") not in ("AWS::Serverless::Function", "AWS::Lambda::Function"):
            continue
        props = res.get("Properties", {})
        if "ReservedConcurrentExecutions" in props:
            reserved += int(props["ReservedConcurrentExecutions"])
            continue
        use = EXPECTED_DRAINS if logical_id == DRAINER_FUNCTION else 1
        for event in (props.get("Events") or {}).values():
            if event.get("Type") == "SQS":
                cap = (event.get("Properties", {}).get("ScalingConfig") or {}).get("MaximumConcurrency")
                use = max(use, int(cap) if cap else SQS_STARTING_CONCURRENCY)
        expected += use
    return StageConcurrency(reserved, expected)


def lambda_concurrency(lambda_: Any, template: dict[str, Any]) -> Check:
    """The account's concurrency leaves room for the stage: fail below what the stage reserves plus
    LAMBDA_MIN_UNRESERVED (Lambda's rule), warn when the unreserved pool is below the stage's expected peak.

    On a first deploy the stage's reservations are not yet taken from UnreservedConcurrentExecutions, and
    Lambda refuses them if the pool would drop under 100; on an update they are already taken. The packaged
    templates reserve nothing today, so the fail rule reads the account's whole limit, which holds either way."""
    call = "lambda GetAccountSettings"
    try:
        limit = lambda_.get_account_settings()["AccountLimit"]
    except (ClientError, BotoCoreError) as exc:
        return Check("lambda-concurrency", "fail", f"cannot read Lambda's account settings: {_said(exc)}", "", call)
    total = int(limit.get("ConcurrentExecutions", 0))
    unreserved = int(limit.get("UnreservedConcurrentExecutions", total))
    need = stage_concurrency(template)
    found = (
        f"limit {total}, unreserved {unreserved}; the stage reserves {need.reserved} and may use about "
        f"{need.expected} at once"
    )
    if total < need.reserved + LAMBDA_MIN_UNRESERVED:
        why = (
            f"below {need.reserved + LAMBDA_MIN_UNRESERVED} (the stage's {need.reserved} reserved + the "
            f"{LAMBDA_MIN_UNRESERVED} Lambda keeps unreserved): a few drains would take every execution"
        )
        return Check("lambda-concurrency", "fail", found, f"{why}; {QUOTA_ADVICE}", call)
    if unreserved < need.expected:
        todo = (
            f"the unreserved pool is below the stage's expected peak ({need.expected}): other functions' "
            f"reservations leave it little; free some, or {QUOTA_ADVICE}"
        )
        return Check("lambda-concurrency", "warn", found, todo, call)
    return Check("lambda-concurrency", "ok", found, call=call)


def default_artifacts_bucket(account: str, region_name: str) -> str:
    """The bucket `moonsend deploy` makes when none is given (infra.cli._artifacts_bucket)."""
    return f"moonsend-artifacts-{account}-{region_name}"


def bucket_region(location: str | None) -> str:
    """GetBucketLocation's LocationConstraint as a region: null for us-east-1, EU for eu-west-1 (its
    documentation in botocore's s3 model)."""
    if not location:
        return "us-east-1"
    return "eu-west-1" if location == "EU" else location


def artifacts_bucket(s3: Any, bucket: str, region_name: str, *, given: bool) -> Check:
    """The artifacts bucket is in the stack's region: CloudFormation reads each template by URL from it
    (infra.deploy.template_url). The default bucket may not exist yet: the deploy makes it, in the region."""
    call = f"s3 GetBucketLocation {bucket}"
    try:
        location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
    except ClientError as exc:
        if _code(exc) == "NoSuchBucket":
            if given:
                return Check(
                    "artifacts-bucket",
                    "fail",
                    f"no bucket {bucket}",
                    f"create it in {region_name}, or leave --artifacts-bucket out for the default one",
                    call,
                )
            return Check("artifacts-bucket", "ok", f"{bucket} will be created in {region_name}", call=call)
        todo = (
            "use a bucket of this account in the region (--artifacts-bucket)"
            if given
            else "bucket names are global: another account may own this one; pass --artifacts-bucket"
        )
        return Check("artifacts-bucket", "fail", f"cannot read {bucket}'s region: {_said(exc)}", todo, call)
    except BotoCoreError as exc:
        return Check("artifacts-bucket", "fail", f"cannot read {bucket}'s region: {_said(exc)}", "", call)
    where = bucket_region(location)
    if where != region_name:
        return Check(
            "artifacts-bucket",
            "fail",
            f"{bucket} is in {where}, the stack in {region_name}",
            f"CloudFormation reads the templates from a bucket in the stack's region: pass --artifacts-bucket "
            f"with a bucket in {region_name}, or leave it out for the default one",
            call,
        )
    return Check("artifacts-bucket", "ok", f"{bucket} is in {region_name}", call=call)


def free_rate_of(template: dict[str, Any]) -> float:
    """MOONSEND_FREE_RATE as the packaged send_emails has it (chalicelib.core.config's default, 10)."""
    props = template.get("Resources", {}).get(DRAINER_FUNCTION, {}).get("Properties", {})
    return float((props.get("Environment") or {}).get("Variables", {}).get("MOONSEND_FREE_RATE", "10"))


def console_from_of(template: dict[str, Any]) -> str | None:
    """MOONSEND_CONSOLE_FROM as the packaged API function has it (None: not set)."""
    props = template.get("Resources", {}).get(API_FUNCTION, {}).get("Properties", {})
    return (props.get("Environment") or {}).get("Variables", {}).get("MOONSEND_CONSOLE_FROM") or None


def run(
    clients: dict[str, Any],
    stage_name: str,
    template: dict[str, Any],
    *,
    artifacts_bucket_name: str | None = None,
    smoke_sender_address: str | None = None,
) -> list[Check]:
    """Every check against the account, in the order an operator fixes them (docs/deploying.md). Without
    credentials the others are not tried: each would fail the same way."""
    region_name = str(clients["s3"].meta.region_name)
    who, account = credentials(clients["sts"])
    if account is None:
        return [who]
    bucket = artifacts_bucket_name or default_artifacts_bucket(account, region_name)
    return [
        who,
        ses_tenants(clients["sesv2"], stage_name, region_name),
        ses_account(clients["sesv2"], region_name, free_rate_of(template)),
        smoke_sender(clients["sesv2"], smoke_sender_address, region_name),
        console_from(clients["sesv2"], console_from_of(template), region_name),
        lambda_concurrency(clients["lambda"], template),
        artifacts_bucket(clients["s3"], bucket, region_name, given=artifacts_bucket_name is not None),
    ]
