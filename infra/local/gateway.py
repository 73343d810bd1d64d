"""Emulator: the local endpoint, one WSGI app on loopback in front of moto's server.

Most requests go straight to moto. Four kinds are answered here instead, because moto cannot:
Lambda Invoke of the app's own functions (runs the handler in this process), Lambda's account settings
(`lambda_account`), SES sends and quota reads (the SES stand-in), and `/_moonsend/...` admin calls
(health, SES account settings).
SNS publishes go to moto and, once accepted, to the topics' Lambda subscribers (the SNS
stand-in). A CloudFormation call over a template quota moto does not check is refused as AWS refuses it
(`cfn_limits`). The hot SQS and DynamoDB calls take a short path to moto's backends (`sqs_wire`,
`dynamodb_wire`: accelerators, the same answers faster) past moto's generic request and response layers.
Requests are told apart as AWS tells them apart: by the service in the SigV4 credential scope.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qsl, unquote

from infra.local import (
    cfn_limits,
    cfn_transform,
    dynamodb_limits,
    dynamodb_wire,
    lambda_account,
    payload_limits,
    s3_post,
    sqs_limits,
    sqs_queues,
    sqs_wire,
)
from infra.local.access import AccessControl
from infra.local.lambda_runtime import FunctionCrashed, FunctionError, FunctionRunner
from infra.local.ses import (
    Refused,
    SesStandIn,
    is_quota_request,
    message_id_of,
    parse_send,
    quota_response,
    refusal_response,
)
from infra.local.ses_tenants import Answer as TenantRefusal
from infra.local.sns_delivery import SnsDelivery, accepted_publications

_AUTH_RE = re.compile(r"Credential=([^/]+)/\d{8}/([^/]+)/([^/]+)/aws4_request")
_INVOKE_RE = re.compile(r"^/2015-03-31/functions/([^/]+)/invocations/?$")
_DYNAMODB_WRITES = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems", "ExecuteStatement"}
)
_QUEUE_LIFECYCLE = frozenset({"CreateQueue", "DeleteQueue"})
_QUEUE_RULES = frozenset({"ListQueues", "CreateQueue", "DeleteQueue"})
_ACCOUNT_RE = re.compile(r"^/_moonsend/ses/accounts/([^/]+)/?$")
_EVENT_DESTINATIONS = re.compile(r"^/v2/email/configuration-sets/([^/]+)/event-destinations/?$")

StartResponse = Callable[..., Any]
Response = tuple[int, dict[str, str], bytes]

_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


class ItemLocks:
    """Striped locks over DynamoDB items: one stripe for a single-item write, all for a multi-item one."""

    STRIPES = 64

    def __init__(self) -> None:
        self._locks = [threading.Lock() for _ in range(self.STRIPES)]

    def hold(self, target: str, body: bytes) -> contextlib.AbstractContextManager[None]:
        stripe = self._stripe(target, body)
        return self._one(stripe) if stripe is not None else self._all()

    def _stripe(self, target: str, body: bytes) -> int | None:
        if target not in ("UpdateItem", "DeleteItem", "PutItem"):
            return None
        try:
            d = json.loads(body)
            key = d.get("Key") if target != "PutItem" else None
        except ValueError:
            return None
        if target == "PutItem":
            return self._put_stripe(d)
        if not isinstance(key, dict):
            return None
        return hash((d.get("TableName"), json.dumps(key, sort_keys=True))) % self.STRIPES

    def _put_stripe(self, d: dict[str, Any]) -> int | None:
        """A PutItem's item key, from the table's key schema (read from moto in this process)."""
        from moto.dynamodb.models import dynamodb_backends

        name, item = d.get("TableName"), d.get("Item") or {}
        for backends in dynamodb_backends.values():
            for backend in backends.values():
                table = backend.tables.get(name)
                if table is not None:
                    names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
                    key = {n: item.get(n) for n in names}
                    return hash((name, json.dumps(key, sort_keys=True))) % self.STRIPES
        return None

    @contextlib.contextmanager
    def _one(self, stripe: int) -> Iterator[None]:
        with self._locks[stripe]:
            yield

    @contextlib.contextmanager
    def _all(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for lock in self._locks:  # always in the same order: no deadlock with single stripes
                stack.enter_context(lock)
            yield


def credential_scope(environ: dict[str, Any]) -> tuple[str, str, str]:
    """(access key id, region, service) of a SigV4-signed request, or empty strings."""
    m = _AUTH_RE.search(environ.get("HTTP_AUTHORIZATION", ""))
    return (m.group(1), m.group(2), m.group(3)) if m else ("", "", "")


def _query_action(environ: dict[str, Any]) -> str:
    """The Action of an AWS query-protocol request (form body), or ""."""
    if environ.get("REQUEST_METHOD") != "POST":
        return ""
    m = re.search(rb"(?:^|&)Action=([A-Za-z]+)", _read_body(environ))
    return m.group(1).decode() if m else ""


def _read_body(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)  # whoever reads next reads it again
    return body


def _respond(start_response: StartResponse, resp: Response) -> list[bytes]:
    status, headers, body = resp
    headers = {**headers, "Content-Length": str(len(body))}
    start_response(f"{status} {_REASONS.get(status, 'Status')}", list(headers.items()))
    return [body]


class Gateway:
    def __init__(
        self,
        dispatcher: Any,
        ses: SesStandIn,
        runner: FunctionRunner | None = None,
        *,
        fast_sqs: bool = True,
        fast_dynamodb: bool = True,
    ) -> None:
        self.dispatcher = dispatcher  # moto's DomainDispatcherApplication
        self.fast_sqs = fast_sqs
        self.fast_dynamodb = fast_dynamodb
        self.ses = ses
        self.runner = runner
        self.ready = False
        # Set while the stack saves its state: every request is answered 503 (SDKs retry it), so nothing is
        # accepted that the saved state would not hold.
        self.closed = False
        self._apps: dict[tuple[str, ...], Any] = {}
        self._apps_lock = threading.Lock()
        self._item_locks = ItemLocks()
        self._queue_lifecycle = threading.Lock()
        # SQS's 60 s between deleting a queue and creating one of its name (infra/local/sqs_queues.py); the
        # stack sets its wait on its own minute.
        self.queue_reuse = sqs_queues.QueueReuse()
        self.sns: SnsDelivery | None = None  # set by the runtime: Lambda subscribers of SNS topics
        self.access: AccessControl | None = None  # set by the runtime: the functions' roles and policies
        # Set by the stack: the SAM transform and stand-ins for change sets sent by URL (a deploy to it).
        self.cfn_transforms: cfn_transform.ChangeSetTransforms | None = None

    def moto_app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """moto's app for this request's service, found once per kind of request.

        moto's dispatcher looks for the backend of every request under one global lock, trying
        every service module in turn; with many concurrent requests that lock is where the local
        stack spends most of its time. Requests of one service, region, path root and target
        prefix always go to the same backend app, so it is looked up once and remembered.
        """
        _key, region, service = credential_scope(environ)
        path = environ.get("PATH_INFO", "")
        if not service or path.startswith("/moto-api"):
            return self.dispatcher(environ, start_response)
        target = environ.get("HTTP_X_AMZ_TARGET", "").split(".")[0]
        key = (service, region, path.split("/")[1] if path.count("/") else "", target)
        app = self._apps.get(key)
        if app is None:
            app = self.dispatcher.get_application(environ)
            with self._apps_lock:
                self._apps[key] = app
        return app(environ, start_response)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith("/_moonsend/"):
            return _respond(start_response, self._admin(environ, path))
        if self.closed:
            body = b'{"__type":"ServiceUnavailable","message":"the local stack is saving its state and stopping"}'
            return _respond(start_response, (503, {"Content-Type": "application/json"}, body))
        access_key, _region, service = credential_scope(environ)
        if not service and s3_post.is_post_object(environ):  # a browser's upload, held to its policy
            refused = s3_post.refusal(environ, _read_body(environ))
            if refused is not None:
                return _respond(start_response, refused)
        if self.access is not None and self.access.is_role_key(access_key):
            refused = self.access.check(environ, service, access_key, _read_body(environ))
            if refused is not None:
                return _respond(start_response, refused)
            # A function's role is of the platform's account: SES and STS know that account by its key.
            access_key = self.ses.platform_access_key
        if service == "lambda" and self.runner is not None:
            m = _INVOKE_RE.match(path)
            if m and environ.get("REQUEST_METHOD") == "POST":
                fn = self.runner.resolve(unquote(m.group(1)))
                if fn is not None:
                    return _respond(start_response, self._invoke(environ, fn))
        if service == "lambda" and lambda_account.is_account_settings(environ.get("REQUEST_METHOD", ""), path):
            # moto has no GetAccountSettings
            return _respond(start_response, lambda_account.account_settings(environ, access_key, _region))
        if service in ("ses", "email"):
            return self._ses(environ, start_response, path, access_key)
        if service == "sns" and self.sns is not None and environ.get("REQUEST_METHOD") == "POST":
            body = _read_body(environ)
            if b"Action=Publish" in body:
                # SNS counts 256 KiB in bytes; moto in characters (infra/local/payload_limits.py).
                refused = payload_limits.sns_refusal(dict(parse_qsl(body.decode("utf-8", "replace"))))
                if refused is not None:
                    return _respond(start_response, refused)
                return self._sns_publish(environ, start_response, body)
        if service == "sts":
            # Each access key is its own account (as for SES): GetCallerIdentity answers with it.
            environ["HTTP_X_MOTO_ACCOUNT_ID"] = self.ses.account_id_for(access_key)
        if service == "cloudformation":  # the template quotas moto does not check (infra/local/cfn_limits.py)
            refused = cfn_limits.answer(environ, _read_body(environ), access_key, _region)
            if refused is not None:
                return _respond(start_response, refused)
            if self.cfn_transforms is not None and environ.get("REQUEST_METHOD") == "POST":
                return self._cloudformation(environ, start_response, access_key)
        if service == "dynamodb":
            return self._dynamodb(environ, start_response, access_key, _region)
        if service == "sqs":
            return self._sqs(environ, start_response, _region)
        return self.moto_app(environ, start_response)

    def _moto_answer(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        """moto's whole answer (status line, headers, body), for the gateway to act on before it answers."""
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, headers
            return lambda _data: None

        body = b"".join(self.moto_app(environ, capture))
        return str(captured.get("status", "500 Internal Server Error")), list(captured.get("headers", [])), body

    # --- CloudFormation ----------------------------------------------------------------------------
    def _cloudformation(
        self, environ: dict[str, Any], start_response: StartResponse, access_key: str
    ) -> Iterable[bytes]:
        """Deploy's change sets: SAM expanded, and what moto cannot create made after (infra.local.cfn_transform)."""
        assert self.cfn_transforms is not None
        params = cfn_transform.form(_read_body(environ))
        try:
            rewritten = self.cfn_transforms.rewrite(params, cfn_limits.caller_account(environ, access_key))
        except cfn_transform.ChangeSetRefused as refused:
            return _respond(start_response, refused.refusal.response())
        if rewritten is not None:
            environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(rewritten), str(len(rewritten))
        line, headers, answer = self._moto_answer(environ)
        if line.startswith("200"):
            self.cfn_transforms.executed(params)
        start_response(line, headers)
        return [answer]

    # --- SQS ---------------------------------------------------------------------------------------
    def _sqs(self, environ: dict[str, Any], start_response: StartResponse, region: str) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        action = target.partition(".")[2] if target.startswith("AmazonSQS.") else _query_action(environ)
        # SQS creates a queue once however many ask at the same moment; moto looks the name up and then
        # creates, unlocked, so two concurrent first sends of a tenant each created the queue, the second
        # replacing the first with the messages already on it (the soak lost five batches that way).
        held = self._queue_lifecycle if action in _QUEUE_LIFECYCLE else contextlib.nullcontext()
        with held:
            if action in _QUEUE_RULES:  # ListQueues' 1,000 and paging, the 60 s after a delete
                return _respond(start_response, self._sqs_queues(environ, action, bool(target), region))
            if self.fast_sqs and target.startswith("AmazonSQS."):
                answered = sqs_wire.handle(target, region, _read_body(environ))  # checks SQS's limits itself
                if answered is not None:
                    return _respond(start_response, answered)
            screened = sqs_limits.screen(  # SQS's limits moto does not check: characters, bytes
                action, _read_body(environ), bool(target), lambda url: sqs_wire.max_message_bytes(region, url)
            )
            if screened.answer is not None:
                return _respond(start_response, screened.answer)
            if screened.body is not None:
                return _respond(start_response, self._sqs_batch_rest(environ, screened))
            return list(self.moto_app(environ, start_response))

    def _sqs_queues(self, environ: dict[str, Any], action: str, json_protocol: bool, region: str) -> Response:
        """ListQueues, CreateQueue and DeleteQueue under SQS's rules moto does not keep (sqs_queues)."""
        body = _read_body(environ)
        try:
            params: dict[str, Any] = (
                json.loads(body or b"{}") if json_protocol else dict(parse_qsl(body.decode("utf-8", "replace")))
            )
        except ValueError:
            params = {}
        account = cfn_limits.caller_account(environ, credential_scope(environ)[0])

        def refused(refusal: sqs_limits.Refusal) -> Response:
            return refusal.json() if json_protocol else refusal.xml()

        if action == "ListQueues":
            if json_protocol:
                base = f"{environ.get('wsgi.url_scheme', 'http')}://{environ.get('HTTP_HOST', '')}"
                return sqs_queues.list_queues(params, account, region, base)
            refusal = sqs_queues.max_results_refusal(params.get("MaxResults"))
            if refusal is not None:
                return refused(refusal)
        elif action == "CreateQueue":
            name = str(params.get("QueueName", ""))
            refusal = self.queue_reuse.refusal(account, region, name)
            if refusal is not None and name not in sqs_queues.sqs_backends[account][region].queues:
                return refused(refusal)
        line, moto_headers, answer = self._moto_answer(environ)
        status = int(line.split()[0])
        if action == "DeleteQueue" and status == 200:
            self.queue_reuse.deleted(account, region, str(params.get("QueueUrl", "")).rstrip("/").rsplit("/", 1)[-1])
        return status, {k: v for k, v in moto_headers if k.lower() != "content-length"}, answer

    def _sqs_batch_rest(self, environ: dict[str, Any], screened: sqs_limits.Screened) -> Response:
        """moto queues the entries SQS would take; the answer lists the others as failed."""
        assert screened.body is not None
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(screened.body), str(len(screened.body))
        line, moto_headers, answer = self._moto_answer(environ)
        status = int(line.split()[0])
        headers = {k: v for k, v in moto_headers if k.lower() != "content-length"}
        return status, headers, sqs_limits.with_failed(answer, screened.failed) if status == 200 else answer

    # --- DynamoDB ----------------------------------------------------------------------------------
    def _dynamodb(
        self, environ: dict[str, Any], start_response: StartResponse, access_key: str, region: str
    ) -> Iterable[bytes]:
        full_target = environ.get("HTTP_X_AMZ_TARGET", "")
        target = full_target.rpartition(".")[2]
        body = _read_body(environ)
        # DynamoDB applies each write to an item atomically (a condition is checked and the write made
        # as one step); moto checks and writes without a lock, so two concurrent conditional writes can
        # both pass. Writes to one item are serialised here, as the real service behaves; writes to
        # different items still run side by side.
        held = self._item_locks.hold(target, body) if target in _DYNAMODB_WRITES else contextlib.nullcontext()
        account = dynamodb_wire.account_for(access_key)
        with held:
            if self.fast_dynamodb:  # checks the key sizes and counts itself (dynamodb_limits)
                answered = dynamodb_wire.handle(full_target, region, account, body)
                if answered is not None:
                    return _respond(start_response, answered)
            refused = dynamodb_limits.answer(target, body, account, region)  # the limits moto does not check
            if refused is not None:
                return _respond(start_response, refused)
            return list(self.moto_app(environ, start_response))

    # --- Lambda ------------------------------------------------------------------------------------
    def _invoke(self, environ: dict[str, Any], fn: Any) -> Response:
        assert self.runner is not None
        body = _read_body(environ)
        try:
            event = json.loads(body) if body else {}
        except ValueError:
            return (
                400,
                {"x-amzn-ErrorType": "InvalidRequestContentException"},
                json.dumps({"message": "Could not parse request body into json"}).encode(),
            )
        kind = environ.get("HTTP_X_AMZ_INVOCATION_TYPE", "RequestResponse")
        refused = payload_limits.lambda_refusal(kind, len(body))  # 6 MB, or 1 MB for an asynchronous event
        if refused is not None:
            return refused
        if kind == "Event":
            self.runner.invoke_async(fn, event)
            return 202, {"Content-Type": "application/json"}, b""
        if kind == "DryRun":
            return 204, {}, b""
        try:
            result = self.runner.invoke(fn, event)
        except (Exception, FunctionCrashed) as exc:
            # A handler's exception raised in a worker process carries its own type's name.
            kind = exc.error_type if isinstance(exc, FunctionError) else type(exc).__name__
            payload = {"errorMessage": str(exc), "errorType": kind}
            return (
                200,
                {"X-Amz-Function-Error": "Unhandled", "X-Amz-Executed-Version": "$LATEST"},
                (json.dumps(payload).encode()),
            )
        return 200, {"X-Amz-Executed-Version": "$LATEST"}, json.dumps(result).encode()

    # --- SNS -----------------------------------------------------------------------------------------
    def _sns_publish(self, environ: dict[str, Any], start_response: StartResponse, body: bytes) -> Iterable[bytes]:
        """moto stores and answers the publish; its Lambda subscribers are invoked from here."""
        assert self.sns is not None
        line, headers, chunks = self._moto_answer(environ)
        if line.startswith("200"):
            for pub in accepted_publications(body, chunks):
                self.sns.publish(pub)
        start_response(line, headers)
        return [chunks]

    # --- SES -----------------------------------------------------------------------------------------
    def _ses(
        self, environ: dict[str, Any], start_response: StartResponse, path: str, access_key: str
    ) -> Iterable[bytes]:
        body = _read_body(environ)
        environ["HTTP_X_MOTO_ACCOUNT_ID"] = self.ses.account_id_for(access_key)
        version = is_quota_request(path, body)
        if version:
            return _respond(start_response, quota_response(version, self.ses.account(access_key)))
        destination = _EVENT_DESTINATIONS.match(path)
        if destination and environ.get("REQUEST_METHOD") == "POST":  # moto has no v2 event destinations
            self.ses.add_event_destination(access_key, unquote(destination.group(1)), body)
            return _respond(start_response, (200, {"Content-Type": "application/json"}, b"{}"))
        if destination and environ.get("REQUEST_METHOD") == "GET":
            listed = self.ses.event_destinations(access_key, unquote(destination.group(1)))
            return _respond(start_response, (200, {"Content-Type": "application/json"}, json.dumps(listed).encode()))
        account = self.ses.account_id_for(access_key)
        method = environ.get("REQUEST_METHOD", "")
        tenant_call = self.ses.tenants.handle(account, method, path, body)
        if tenant_call is not None:  # moto has no SES tenants
            return _respond(start_response, tenant_call)
        send = parse_send(path, body) if method == "POST" else None
        if send is None:
            return self.moto_app(environ, start_response)
        if send.tenant is not None:
            try:
                region = self.ses.region
                identities = send.identity_arns(region, account)
                self.ses.tenants.check_send(
                    account, send.tenant, identities, send.configuration_set_arn(region, account)
                )
            except TenantRefusal as refusal:
                time.sleep(self.ses.latency_for(access_key))
                body_out = json.dumps({"message": refusal.message}).encode()
                headers = {"Content-Type": "application/json", "x-amzn-ErrorType": refusal.code}
                return _respond(start_response, (refusal.status, headers, body_out))
        try:
            admitted = self.ses.admit(access_key)
        except Refused as refusal:
            time.sleep(self.ses.latency_for(access_key))
            return _respond(start_response, refusal_response(send.version, refusal))
        time.sleep(self.ses.latency_for(access_key))
        line, headers, chunks = self._moto_answer(environ)
        if int(line.split()[0]) == 200:
            message_id = message_id_of(send.version, chunks)
            self.ses.record(admitted, send.raw_mime, send.to, message_id, account)
            self.ses.publish_send_event(access_key, send.configuration_set, send.raw_mime, send.to, message_id)
            if send.tenant is not None:
                self.ses.tenants.sent(account, send.tenant, send.bounces)
        else:
            self.ses.release(access_key, admitted)
        start_response(line, headers)
        return [chunks]

    # --- admin ---------------------------------------------------------------------------------------
    def _admin(self, environ: dict[str, Any], path: str) -> Response:
        if path.rstrip("/") == "/_moonsend/health":
            return 200, {"Content-Type": "application/json"}, json.dumps({"ready": self.ready}).encode()
        m = _ACCOUNT_RE.match(path)
        if m:
            key = unquote(m.group(1))
            if environ.get("REQUEST_METHOD") in ("PUT", "POST"):
                try:
                    d = json.loads(_read_body(environ) or b"{}")
                    acct = self.ses.configure(
                        key,
                        max_send_rate=d.get("maxSendRate"),
                        max_24h_send=d.get("max24HourSend"),
                        latency_ms=d.get("latencyMs"),
                    )
                except (ValueError, TypeError) as exc:
                    return (
                        400,
                        {"Content-Type": "application/json"},
                        json.dumps({"message": str(exc)}).encode(),
                    )
            else:
                acct = self.ses.account(key)
            return 200, {"Content-Type": "application/json"}, json.dumps(acct.describe()).encode()
        return 404, {"Content-Type": "application/json"}, b'{"message": "not found"}'
