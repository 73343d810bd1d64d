"""Emulator: IAM on the local endpoint: a function's call is answered only if its role's policy allows it.

moto's own IAM checks evaluate resource ARNs for SQS alone, so the endpoint decides itself, as AWS
does for an identity-based policy: it finds the caller's role from the request's access key (the
temporary credentials STS gave the function), the action and the resource ARNs from the request (the
operation by each protocol's rules, its resource from the operation's parameters), and evaluates the
role's policy documents (those of the template, as moto's IAM holds them): an explicit Deny wins, else
an Allow whose Action and Resource match, else the call is refused with the protocol's AccessDenied
answer and the message AWS gives. Requests signed with any other key (the operator's, a tenant's SES
keys) are not a role's and pass, as they would be decided in their own accounts.

Conditions are evaluated for the keys the endpoint can tell from a request (`_CONDITION_KEYS`: a KMS
key's aliases and the request's encryption context) with the operators the template's policies use;
a condition on anything else fails closed (its Allow never applies, its Deny always does).
"""

from __future__ import annotations

import base64
import functools
import html
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from infra.local.identity import RoleCredentials

# The IAM service prefix of each SigV4 signing name.
_PREFIX = {"monitoring": "cloudwatch", "email": "ses", "ses": "ses"}
# Operations whose IAM action has another name than the operation.
_ACTION = {
    ("lambda", "Invoke"): "InvokeFunction",
    # Batch calls are authorised as their single action (SQS's and SNS's documentation say so).
    ("sqs", "SendMessageBatch"): "SendMessage",
    ("sqs", "DeleteMessageBatch"): "DeleteMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "ChangeMessageVisibility",
    ("sns", "PublishBatch"): "Publish",
    ("s3", "HeadObject"): "GetObject",
    ("s3", "ListObjectsV2"): "ListBucket",
    ("s3", "ListObjects"): "ListBucket",
    ("s3", "HeadBucket"): "ListBucket",
    ("s3", "DeleteObjects"): "DeleteObject",
    ("s3", "CopyObject"): "PutObject",  # on the copy (the source's s3:GetObject is not checked here)
    ("s3", "CreateMultipartUpload"): "PutObject",
    ("s3", "UploadPart"): "PutObject",
    ("s3", "UploadPartCopy"): "PutObject",
    ("s3", "CompleteMultipartUpload"): "PutObject",
    ("s3", "ListParts"): "ListMultipartUploadParts",
    ("s3", "ListMultipartUploads"): "ListBucketMultipartUploads",
    ("s3", "ListObjectVersions"): "ListBucketVersions",
    ("s3", "PutBucketLifecycleConfiguration"): "PutLifecycleConfiguration",
    ("s3", "PutBucketLifecycle"): "PutLifecycleConfiguration",
    ("s3", "GetBucketLifecycleConfiguration"): "GetLifecycleConfiguration",
}
# Signing names whose requests are REST (operation from method and path, by the service's model). SES v1
# signs as `ses` too, but speaks the query protocol, under no `/v2/` path.
_REST = {"s3": "s3", "lambda": "lambda", "ses": "sesv2", "email": "sesv2", "scheduler": "scheduler"}
# JSON services whose errors botocore reads in their older query protocol's codes (awsQueryCompatible).
_QUERY_COMPATIBLE = frozenset({"sqs", "monitoring"})
# A transaction's parts, and the action each is authorised as.
_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


@dataclass(frozen=True)
class Call:
    """One request as IAM sees it: every (action, resource ARN) it must be allowed (a transaction: several)."""

    checks: tuple[tuple[str, str], ...]
    operation: str
    context: tuple[tuple[str, tuple[str, ...]], ...] = ()  # condition keys and their values (`_CONDITION_KEYS`)

    @property
    def action(self) -> str:
        return self.checks[0][0]

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(resource for _action, resource in self.checks)


@dataclass(frozen=True)
class Role:
    arn: str
    session: str  # the function's name
    policies: tuple[str, ...]  # policy documents (JSON)

    @property
    def principal(self) -> str:
        account, name = self.arn.split(":")[4], self.arn.rsplit("/", 1)[-1]
        return f"arn:aws:sts::{account}:assumed-role/{name}/{self.session}"


# --- policy evaluation ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _pattern(glob: str, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards: `*` any run of characters, `?` any one character; nothing else is special."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
    return re.compile(body, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def _listed(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def _matches(statement: dict[str, Any], action: str, resource: str) -> bool:
    if "Action" in statement:
        acts = any(_pattern(a, True).fullmatch(action) for a in _listed(statement["Action"]))
    else:
        acts = not any(_pattern(a, True).fullmatch(action) for a in _listed(statement.get("NotAction", [])))
    if not acts:
        return False
    if "Resource" in statement:
        return any(_pattern(r, False).fullmatch(resource) for r in _listed(statement["Resource"]))
    return not any(_pattern(r, False).fullmatch(resource) for r in _listed(statement.get("NotResource", [])))


# The condition keys the endpoint tells from a request (KMS's: the key's aliases, the encryption context).
_CONDITION_KEYS = ("kms:ResourceAliases", "kms:EncryptionContextKeys", "kms:EncryptionContext:")
Context = tuple[tuple[str, tuple[str, ...]], ...]


def _known_key(key: str) -> bool:
    return any(key == k or (k.endswith(":") and key.startswith(k)) for k in _CONDITION_KEYS)


def _clause(operator: str, values: tuple[str, ...] | None, wanted: list[str]) -> bool | None:
    """One condition clause on one key (values: the request's, None when it has none); None when the
    operator is not one this evaluator knows."""
    qualifier, _, op = operator.rpartition(":")
    if op == "Null":
        return (values is None) == (str(wanted[0]).lower() == "true")
    if op not in ("StringEquals", "StringLike"):
        return None

    def one(v: str) -> bool:
        return any(v == w if op == "StringEquals" else _pattern(w, False).fullmatch(v) for w in wanted)

    if qualifier == "ForAllValues":
        return all(one(v) for v in values or ())
    if qualifier in ("ForAnyValue", ""):
        return any(one(v) for v in values or ())
    return None


def _condition(condition: dict[str, Any], context: Context) -> bool | None:
    """Whether every clause holds (IAM ANDs them); None when one cannot be evaluated here."""
    values = dict(context)
    for operator, clauses in condition.items():
        for key, wanted in clauses.items():
            if not _known_key(key):
                return None
            holds = _clause(operator, values.get(key), _listed(wanted))
            if holds is not True:
                return holds
    return True


@functools.lru_cache(maxsize=65536)
def allowed(policies: tuple[str, ...], action: str, resource: str, context: Context = ()) -> bool:
    """Whether identity policies allow `action` on `resource`: an explicit Deny wins, then any Allow.

    A statement's Condition is evaluated on `context` (the request's condition keys); one this evaluator
    cannot evaluate fails closed: its Allow never applies and its Deny always does."""
    allow = False
    for doc in policies:
        for st in _listed(json.loads(doc)["Statement"]):
            if not _matches(st, action, resource):
                continue
            holds = _condition(st["Condition"], context) if "Condition" in st else True
            if st["Effect"] == "Deny" and holds is not False:
                return False
            allow = allow or (st["Effect"] == "Allow" and holds is True)
    return allow


# --- what a request asks ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _rest_routes(model_name: str) -> list[tuple[str, re.Pattern[str], tuple[tuple[str, str], ...], str]]:
    """(method, path pattern, query the URI requires, operation) of a REST service's operations.

    The query is (key, value) pairs; an empty value means the key alone (`?uploads`), else the value must
    match too (S3's `?x-id=DeleteObject` and `?x-id=AbortMultipartUpload` share a path)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model(model_name)
    routes = []
    for name in model.operation_names:
        http = model.operation_model(name).http
        path, _, query = http["requestUri"].partition("?")
        regex = ""
        for part in re.split(r"(\{[^}]+\})", path):
            if part.startswith("{"):
                label = part[1:-1]
                regex += f"(?P<{label.rstrip('+')}>.+)" if label.endswith("+") else f"(?P<{label}>[^/]+)"
            else:
                regex += re.escape(part)
        keys = tuple((k.partition("=")[0], k.partition("=")[2]) for k in query.split("&") if k)
        shape = model.operation_model(name).input_shape
        if shape is not None:  # required query parameters tell apart operations of one path (S3's uploadId)
            keys += tuple(
                (member.serialization["name"], "")
                for member_name, member in shape.members.items()
                if member.serialization.get("location") == "querystring" and member_name in shape.required_members
            )
        routes.append((http["method"], re.compile(regex.rstrip("/") + "/?"), keys, name))
    # The most specific first: more required query keys, then longer literal paths.
    routes.sort(key=lambda r: (-len(r[2]), -len(r[1].pattern)))
    return routes


def _rest_operation(model_name: str, method: str, path: str, query: str) -> tuple[str, dict[str, str]]:
    present = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    for route_method, pattern, keys, name in _rest_routes(model_name):
        if route_method != method or any(k not in present or (v and present[k] != v) for k, v in keys):
            continue
        m = pattern.fullmatch(path)
        if m:
            return name, dict(m.groupdict())  # PATH_INFO is decoded already (WSGI)
    return "", {}


def describe(service: str, environ: dict[str, Any], body: bytes, region: str, account: str) -> Call:
    """The IAM action and resources of one signed request (service: its SigV4 signing name)."""
    prefix = _PREFIX.get(service, service)
    params: dict[str, Any]
    if is_rest(service, environ):
        operation, params = _rest_operation(
            _REST[service],
            environ.get("REQUEST_METHOD", ""),
            environ.get("PATH_INFO", ""),
            environ.get("QUERY_STRING", ""),
        )
        if not operation and service in ("ses", "email"):
            operation, params = _reputation_entity(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""))
        if operation in ("PutObject", "CopyObject"):  # one method and path; the copy has a source header
            operation = "CopyObject" if environ.get("HTTP_X_AMZ_COPY_SOURCE") else "PutObject"
        query = parse_qs(environ.get("QUERY_STRING", ""))
        if service == "s3" and "versionId" in query and operation in ("GetObject", "DeleteObject"):
            operation += "Version"  # IAM's s3:GetObjectVersion, s3:DeleteObjectVersion
        if "Qualifier" in query:
            params["Qualifier"] = query["Qualifier"][0]
        if "groupName" in query:  # Scheduler's GetSchedule and DeleteSchedule name the group in the query
            params["GroupName"] = query["groupName"][0]
        if body and service in ("ses", "email", "scheduler"):  # SES v2's identity, a schedule's group and role
            params.update(_json(body))
        elif body and operation == "DeleteObjects":
            keys = re.findall(r"<Key>(.*?)</Key>", body.decode("utf-8", "replace"), re.DOTALL)
            params["Keys"] = [html.unescape(k) for k in keys]
    elif environ.get("HTTP_X_AMZ_TARGET"):
        operation = environ["HTTP_X_AMZ_TARGET"].rpartition(".")[2]
        params = _json(body)
    else:
        params = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        params.update({k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()})
        operation = params.get("Action", "")
    if prefix == "dynamodb" and operation in ("TransactWriteItems", "TransactGetItems"):
        return Call(_transaction(params, region, account), operation)
    action = f"{prefix}:{_ACTION.get((prefix, operation), operation)}"
    if prefix == "kms":
        key_arn, context = _kms(params, region, account)
        return Call(((action, key_arn),), operation, context)
    resources = _resources(prefix, operation, params, region, account) or ["*"]
    checks = [(action, r) for r in resources]
    role = params.get("Target", {}).get("RoleArn") if isinstance(params.get("Target"), dict) else None
    if prefix == "scheduler" and role:  # the role given to Scheduler must be the caller's to pass
        checks.append(("iam:PassRole", str(role)))
    return Call(tuple(checks), operation)


def _kms(p: dict[str, Any], region: str, account: str) -> tuple[str, Context]:
    """A KMS call's key (named by id, ARN or alias; for a Decrypt without one, the ciphertext's) as the
    resource, and its condition keys: the key's aliases and the request's encryption context. Read from
    moto's KMS in this process (the key a ciphertext names is in moto's own ciphertext format)."""
    from moto.kms.models import kms_backends
    from moto.kms.utils import _deserialize_ciphertext_blob

    backend = kms_backends[account][region]
    key_id = ""
    try:
        if p.get("KeyId"):
            key_id = backend.any_id_to_key_id(str(p["KeyId"]))
        elif p.get("CiphertextBlob"):
            key_id = _deserialize_ciphertext_blob(base64.b64decode(p["CiphertextBlob"])).key_id
    except Exception:  # not a key or ciphertext of ours: KMS itself answers it
        key_id = ""
    key = backend.keys.get(key_id)
    aliases = tuple(sorted(key.aliases)) if key is not None else ()
    ec = p.get("EncryptionContext") if isinstance(p.get("EncryptionContext"), dict) else {}
    context: list[tuple[str, tuple[str, ...]]] = [(f"kms:EncryptionContext:{k}", (str(v),)) for k, v in ec.items()]
    if aliases:
        context.append(("kms:ResourceAliases", aliases))
    if ec:
        context.append(("kms:EncryptionContextKeys", tuple(sorted(ec))))
    return f"arn:aws:kms:{region}:{account}:key/{key_id or '*'}", tuple(sorted(context))


def _reputation_entity(method: str, path: str) -> tuple[str, dict[str, str]]:
    """SES v2's reputation entity calls: their reference is an ARN, whose `/`s WSGI has decoded in the path
    (the model's `{ReputationEntityReference}` is one segment), so they are told apart by their ends."""
    head = "/v2/email/reputation/entities/RESOURCE/"
    if not path.startswith(head):
        return "", {}
    rest = path[len(head) :].rstrip("/")
    for suffix, op, verb in (
        ("/customer-managed-status", "UpdateReputationEntityCustomerManagedStatus", "PUT"),
        ("/policy", "UpdateReputationEntityPolicy", "PUT"),
    ):
        if rest.endswith(suffix) and method == verb:
            return op, {"ReputationEntityReference": rest[: -len(suffix)]}
    return ("GetReputationEntity", {"ReputationEntityReference": rest}) if method == "GET" else ("", {})


def is_rest(service: str, environ: dict[str, Any]) -> bool:
    """Whether a request is one of a REST protocol (SES v1, signed `ses` as v2 is, is a query one)."""
    if service in ("ses", "email"):
        return environ.get("PATH_INFO", "").startswith("/v2/")
    return service in _REST


def _transaction(params: dict[str, Any], region: str, account: str) -> tuple[tuple[str, str], ...]:
    """A DynamoDB transaction is authorised part by part, as the single-item action of each."""
    checks = []
    for item in params.get("TransactItems", []):
        for kind, part in item.items():
            if isinstance(part, dict) and kind in _TRANSACT:
                table = f"arn:aws:dynamodb:{region}:{account}:table/{part.get('TableName', '')}"
                checks.append((f"dynamodb:{_TRANSACT[kind]}", table))
    return tuple(checks) or (("dynamodb:TransactWriteItems", "*"),)


def _json(body: bytes) -> dict[str, Any]:
    try:
        d = json.loads(body) if body else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _resources(prefix: str, op: str, p: dict[str, Any], region: str, account: str) -> list[str]:
    head = f"arn:aws:{prefix}:{region}:{account}"
    if prefix == "dynamodb":
        tables = [p["TableName"]] if "TableName" in p else list(p.get("RequestItems", {}))
        for item in p.get("TransactItems", []):
            tables += [part["TableName"] for part in item.values() if isinstance(part, dict) and "TableName" in part]
        index = f"/index/{p['IndexName']}" if "IndexName" in p else ""
        return [f"{head}:table/{t}{index}" for t in tables]
    if prefix == "sqs":
        name = p.get("QueueName") or str(p.get("QueueUrl", "")).rstrip("/").rsplit("/", 1)[-1]
        return [f"{head}:{name}"] if name else []
    if prefix == "sns":
        arn = p.get("TopicArn") or p.get("TargetArn")
        return [arn] if arn else []
    if prefix == "s3":
        bucket = p.get("Bucket")
        if not bucket:
            return []
        keys = [p["Key"]] if "Key" in p else p.get("Keys", [])
        return [f"arn:aws:s3:::{bucket}/{k}" for k in keys] or [f"arn:aws:s3:::{bucket}"]
    if prefix == "ses":
        out = []
        sender = p.get("FromEmailAddress") or p.get("EmailIdentity") or p.get("Source")
        if sender:
            address = str(sender).rsplit("<", 1)[-1].rstrip(">").strip()
            out.append(f"{head}:identity/{address}")
        if p.get("ConfigurationSetName"):
            out.append(f"{head}:configuration-set/{p['ConfigurationSetName']}")
        if p.get("TenantName"):  # its ARN ends in the tenant's id, which a policy's `tenant/<name>*` covers
            out.append(f"{head}:tenant/{p['TenantName']}")
        out += [str(p[k]) for k in ("ResourceArn", "ReputationEntityReference", "ReputationEntityPolicy") if p.get(k)]
        return out
    if prefix == "lambda":
        name = str(p.get("FunctionName", ""))
        return [_function_arn(name, p.get("Qualifier"), head)] if name else []
    if prefix == "scheduler":
        name = p.get("Name")
        return [f"{head}:schedule/{p.get('GroupName') or 'default'}/{name}"] if name else []
    if prefix == "cloudwatch":
        names = [p["AlarmName"]] if "AlarmName" in p else p.get("AlarmNames", [])
        if not names and op == "DeleteAlarms":  # the query protocol's list
            names = [v for k, v in p.items() if k.startswith("AlarmNames.member.")]
        return [f"{head}:alarm:{n}" for n in names]
    if prefix == "secretsmanager":
        secret = p.get("SecretId", "")
        return [secret if secret.startswith("arn:") else _secret_arn(secret, region, account)] if secret else []
    return []


def _function_arn(given: str, qualifier: str | None, head: str) -> str:
    """Lambda's function ARN from a name, a partial ARN (`account:function:name`) or an ARN, each with
    an optional `:qualifier` (or the Qualifier parameter): the resource IAM checks an invoke against."""
    if given.startswith("arn:"):
        base, _, rest = given.partition(":function:")
        name, _, version = rest.partition(":")
        head = base
    elif ":function:" in given:
        name, _, version = given.partition(":function:")[2].partition(":")
    else:
        name, _, version = given.partition(":")
    version = qualifier or version
    return f"{head}:function:{name}" + (f":{version}" if version else "")


def _secret_arn(name: str, region: str, account: str) -> str:
    """A secret's ARN (its name and a random suffix), from moto's Secrets Manager in this process."""
    from moto.secretsmanager.models import secretsmanager_backends

    secret = secretsmanager_backends[account][region].secrets.get(name)
    return secret.arn if secret is not None else f"arn:aws:secretsmanager:{region}:{account}:secret:{name}"


# --- the refusal --------------------------------------------------------------------------------------
def denial(
    service: str, environ: dict[str, Any], role: Role, action: str, resource: str
) -> tuple[int, dict[str, str], bytes]:
    """AWS's AccessDenied answer in the request's protocol."""
    protocol_json = bool(environ.get("HTTP_X_AMZ_TARGET"))
    message = (
        f"User: {role.principal} is not authorized to perform: {action} on resource: {resource} "
        f"because no identity-based policy allows the {action} action"
    )
    if service == "s3":
        body = f"<Error><Code>AccessDenied</Code><Message>{message}</Message></Error>"
        return 403, {"Content-Type": "application/xml"}, body.encode()
    if is_rest(service, environ):  # rest-json: the error type in a header
        return (
            403,
            {"Content-Type": "application/json", "x-amzn-ErrorType": "AccessDeniedException"},
            json.dumps({"Type": "User", "message": message}).encode(),
        )
    if protocol_json:
        # SQS's and CloudWatch's JSON answers carry their query protocol's code (botocore reads this header).
        headers = {"Content-Type": "application/x-amz-json-1.0"}
        if service in _QUERY_COMPATIBLE:
            headers["x-amzn-query-error"] = "AccessDenied;Sender"
        body = {"__type": "com.amazon.coral.service#AccessDeniedException", "message": message}
        return 400, headers, json.dumps(body).encode()
    code = "AuthorizationError" if service == "sns" else "AccessDenied"
    body = (
        f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
        "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>"
    )
    return 403, {"Content-Type": "text/xml"}, body.encode()


@dataclass
class AccessControl:
    """The endpoint's IAM: which access keys are which function's role, and what each may do."""

    region: str
    account: str
    _roles: dict[str, Role] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    allowed_calls: Counter[str] = field(default_factory=Counter)  # "function action" -> calls allowed
    denied: list[tuple[str, str, str]] = field(default_factory=list)  # (function, action, resource)

    def add_role(self, creds: RoleCredentials, policies: list[str]) -> None:
        with self._lock:
            self._roles[creds.access_key] = Role(creds.role_arn, creds.function_name, tuple(policies))

    def is_role_key(self, access_key: str) -> bool:
        return access_key in self._roles

    def check(self, environ: dict[str, Any], service: str, access_key: str, body: bytes) -> Any:
        """None if the call may go on, else the AccessDenied response to send."""
        role = self._roles.get(access_key)
        if role is None or service == "sts":  # sts:GetCallerIdentity needs no permission
            return None
        call = describe(service, environ, body, self.region, self.account)
        for action, resource in call.checks:
            if not allowed(role.policies, action, resource, call.context):
                with self._lock:
                    seen = (role.session, action, resource) in self.denied
                    self.denied.append((role.session, action, resource))
                if not seen:  # once per function, action and resource: a policy gap shows, it does not flood
                    print(f"[iam] refused {role.session}: {action} on {resource}")
                return denial(service, environ, role, action, resource)
        with self._lock:
            self.allowed_calls[f"{role.session} {call.action}"] += 1
        return None
