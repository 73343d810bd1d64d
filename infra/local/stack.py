"""Emulator: the whole pipeline on this machine, moto's server on loopback, created from the packaged template.

`LocalStack.start()` serves moto (with the fast SQS model) behind the gateway on `host:port`, packages
the stage as `make deploy` does (infra.package, again only when an input changed), and deploys the
template to the endpoint's CloudFormation (infra.local.cloudformation). The runtime then runs the
functions as they were created: each sees its own environment, the template's (with `LOCAL_OVERRIDES`,
the few values a local stack cannot take from the template; infra.local.environment), each function's
calls are signed with its own role's credentials and refused by the endpoint where the role's policy
does not allow them (infra.local.access), and its event sources are the template's SNS subscriptions
and schedules.
Handlers run in this process, on the same code that is deployed, or with `StackConfig(worker_processes=True)`
each function in worker processes of its own (infra.local.workers). The accelerators (fast_sqs,
fast_dynamodb, direct_calls, keepalive, the gateway's short paths) are installed here too; fast_sqs,
fast_dynamodb and direct_calls each have a `StackConfig` flag, so that a bench can compare without them.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.sns.models import sns_backends

from chalicelib.core.config import APP_NAME, Settings
from chalicelib.core.resources import resources_for
from infra.local import (
    api_gateway,
    cfn_transform,
    cloudformation,
    direct_calls,
    environment,
    fast_dynamodb,
    fast_sqs,
    identity,
    keepalive,
    state,
)
from infra.local.access import AccessControl
from infra.local.alarms import AlarmEvaluator
from infra.local.api_exchanges import ApiExchanges
from infra.local.cloudformation import CreatedStack, EventSource, StreamSource
from infra.local.event_bus import EventBus, envelope
from infra.local.gateway import Gateway
from infra.local.identity import RoleCredentials
from infra.local.lambda_runtime import FunctionRunner, LocalFunction, functions_from_stack
from infra.local.platform import LOCAL_STAGE_SETTINGS, PLATFORM_ACCESS_KEY, PLATFORM_SECRET_KEY
from infra.local.scheduler import Scheduler
from infra.local.schedules import ScheduleRunner
from infra.local.ses import SesStandIn
from infra.local.ses_metrics import SesMetrics
from infra.local.sns_delivery import Publication, SnsDelivery
from infra.local.sqs_metrics import SqsMetrics
from infra.local.sqs_poller import SqsPoller, check_mapping
from infra.local.stream_poller import StreamPoller, check_stream_mapping
from infra.local.workers import ApiWorker, worker_environment

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORT = 4566
STOP_GRACE_S = 10.0  # at most, for running invocations to end when the stack stops
# What the functions' environment takes from the local stack rather than from the template, and why.
LOCAL_OVERRIDES = {
    "AWS_ENDPOINT_URL": "every AWS call goes to the local endpoint",
    "AWS_REGION": "set by Lambda itself on AWS",
    "AWS_DEFAULT_REGION": "set by Lambda itself on AWS",
    "MOONSEND_API_URL": "the API is served by chalice local here, not API Gateway",
    "MOONSEND_METRICS_FILE": "metrics to a file beside the outbox, not into the terminal",
}


class StackError(Exception):
    """The local stack cannot start; the message says why and what to do."""


@dataclass
class StackConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0: any free port
    outbox: Path = field(default_factory=lambda: Path("outbox"))
    region: str = "us-east-1"
    account_id: str = "123456789012"
    stage: str = "local"
    ses_latency_ms: float = 50.0
    api_port: int = 8000  # the app's HTTP routes, as `chalice local` serves them (0: any free port)
    ses_max_send_rate: float = 14.0
    ses_max_24h_send: float = 50_000.0
    alarm_time_scale: float = 1 / 60
    schedule_time_scale: float = 1.0
    # SQS's 60 s between deleting a queue and creating one of its name, on the stack's minute: the runtime
    # retries a failed async event 1 s and 2 s later for Lambda's 1 and 3 minutes (infra.local.sqs_queues).
    deleted_queue_wait_s: float = 1.0
    # AWS's timing: alarms every real minute on SQS metrics as SQS publishes them (infra.local.alarms).
    aws_timing: bool = False
    free_rate: float | None = None
    max_concurrency: int = 64  # concurrent invocations of each function (Lambda scales functions apart)
    fast_sqs: bool = True  # False: moto's own SQS model (only to compare against, in benches)
    fast_dynamodb: bool = True  # False: every DynamoDB call through moto's server layers (to compare against)
    # True: this process's own AWS calls (the functions', the stack's) go to the endpoint's app without a
    # loopback HTTP exchange (infra.local.direct_calls); other processes call over loopback either way.
    direct_calls: bool = True
    # True: each function runs in worker processes of its own (infra.local.workers), with its environment and
    # its role's credentials as the process's own: no environment or credential patch here, every function's
    # AWS call over loopback. At most `workers_per_function` processes each (more invocations wait for one).
    # Default: MOONSEND_WORKER_PROCESSES=1 in the environment turns it on.
    worker_processes: bool = field(default_factory=lambda: os.environ.get("MOONSEND_WORKER_PROCESSES") == "1")
    workers_per_function: int = 16
    clear_outbox: bool = False
    # Where the stack's state is kept across a restart (infra.local.state): loaded at start when the file
    # exists, saved by a clean stop. None: nothing kept (tests, the demo, benches).
    state_file: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: Any) -> StackConfig:
        e = os.environ
        cfg = cls(
            port=int(e.get("MOONSEND_PORT", DEFAULT_PORT)),
            outbox=Path(e.get("MOONSEND_OUTBOX", "outbox")),
            ses_latency_ms=float(e.get("MOONSEND_SES_LATENCY_MS", 50)),
            api_port=int(e.get("MOONSEND_API_PORT", 8000)),
        )
        for k, v in overrides.items():
            if v is not None:
                setattr(cfg, k, v)
        return cfg


def _link_secret(outbox: Path) -> str:
    """The value of the stage's link-signing secret, kept beside the outbox: one key (a plain string, as a
    new stack makes and every older file holds) or the key document `moonsend link-key rotate` keeps here
    (chalicelib.core.links.LinkKeys)."""
    path = link_secret_path(outbox)
    if not path.exists():
        outbox.mkdir(parents=True, exist_ok=True)
        keep_link_secret(outbox, secrets.token_hex(32))
    return path.read_text(encoding="utf-8").strip()


def link_secret_path(outbox: Path) -> Path:
    return outbox / ".link-secret"


def keep_link_secret(outbox: Path, value: str) -> None:
    """Keep `value` as the secret's value for the next start (readable by its owner only, replaced whole)."""
    path = link_secret_path(outbox)
    fresh = path.with_name(f"{path.name}.{os.getpid()}.new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value)
    os.replace(fresh, path)


def _check_port(host: str, port: int) -> None:
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise StackError(
                f"port {port} on {host} is taken ({exc.strerror}): is another local stack running? "
                f"Stop it, or choose another port with --port or MOONSEND_PORT."
            ) from None


class LocalStack:
    def __init__(self, config: StackConfig | None = None) -> None:
        self.config = config or StackConfig()
        self.endpoint = ""
        self.settings: Settings | None = None
        self.outputs: dict[str, str] = {}
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.ses: SesStandIn | None = None
        self.runner: FunctionRunner | None = None
        self.sns: SnsDelivery | None = None
        self.pollers: list[SqsPoller] = []  # Lambda's pollers of the stack's SQS event sources
        self.stream_pollers: list[StreamPoller] = []  # and of its DynamoDB streams (the ledger's)
        self.gateway: Gateway | None = None
        self.alarms: AlarmEvaluator | None = None
        self.sqs_metrics: SqsMetrics | None = None  # SQS's metrics in CloudWatch (the operator's page reads them)
        self.ses_metrics: SesMetrics | None = None  # SES's reputation metrics in CloudWatch (the page, the alarms)
        self.api: Any = None
        self.api_worker: ApiWorker | None = None  # the API's own process, with worker processes
        self.api_url: str | None = None
        self.api_exchanges = ApiExchanges()  # off until a test starts it (tests/e2e/conftest.py)
        self.scheduler: Scheduler | None = None
        self.event_bus: EventBus | None = None  # EventBridge's default bus: SES's status events
        self.schedules: ScheduleRunner | None = None  # EventBridge Scheduler's (each digest's)
        self.app_module: Any = None
        self.created: CreatedStack | None = None
        self.access: AccessControl | None = None
        self.roles: dict[str, RoleCredentials] = {}  # each function's role credentials, by function name
        self.environments: dict[str, dict[str, str]] = {}  # each function's own environment, by function name
        self.loaded: state.SavedState | None = None  # the state this start loaded (None: started empty)
        self.saved: state.SavedState | None = None  # the state the last stop saved
        self._undo: list[Any] = []
        self._session = boto3.session.Session()
        self._clients: dict[tuple[str, ...], Any] = {}
        self._clients_lock = threading.Lock()

    # --- life cycle ----------------------------------------------------------------------------------
    def start(self) -> LocalStack:
        from infra.package import packaged

        c = self.config
        _check_port(c.host, c.port)
        # What `make deploy` would upload, made again only if its inputs changed, and kept as it is (no other
        # stack repackages it) until this stack is created from it.
        package_held = contextlib.ExitStack()
        try:
            report = package_held.enter_context(packaged(c.stage))
        except subprocess.CalledProcessError as exc:
            why = (exc.stderr or exc.stdout or "")[-2000:]
            command = f"moonsend package --stage {c.stage}"
            raise StackError(f"packaging the {c.stage} stage failed (`{command}`):\n{why}") from None
        with package_held:
            self._start_from(report)
        return self

    def _start_from(self, report: Any) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        c = self.config
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        if c.clear_outbox and c.outbox.exists():
            shutil.rmtree(c.outbox)
        fast_dynamodb.install()
        if c.fast_sqs:
            fast_sqs.install()
            # A deep queue is hundreds of thousands of long-lived objects, which the cyclic GC would
            # traverse again and again; collect young objects less often (memory is plentiful here).
            gc.set_threshold(50_000, 20, 20)
        self.ses = SesStandIn(
            c.outbox,
            latency_ms=c.ses_latency_ms,
            platform_access_key=PLATFORM_ACCESS_KEY,
            default_max_send_rate=c.ses_max_send_rate,
            default_max_24h_send=c.ses_max_24h_send,
            region=c.region,
        )
        gateway = Gateway(
            DomainDispatcherApplication(create_backend_app),
            self.ses,
            fast_sqs=c.fast_sqs,
            fast_dynamodb=c.fast_dynamodb,
        )
        gateway.queue_reuse.wait_s = c.deleted_queue_wait_s
        try:
            keepalive.install()  # connections kept between requests: no TCP connect and thread per AWS call
            self._server = make_server(
                c.host, c.port, gateway, threaded=True, request_handler=keepalive.KeepAliveHandler
            )
        except (OSError, SystemExit) as exc:
            raise StackError(f"cannot listen on {c.host}:{c.port}: {exc}") from None
        self._server.daemon_threads = True
        self.endpoint = f"http://{c.host}:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="local-endpoint")
        self._thread.start()
        if c.direct_calls:
            self._undo.append(direct_calls.install(self.endpoint, gateway))

        self._operator_environment()
        names = (
            "cloudformation",
            "s3",
            "sns",
            "sqs",
            "cloudwatch",
            "sesv2",
            "lambda",
            "events",
            "sts",
            "secretsmanager",
            "dynamodb",
        )
        # The link-signing secret keeps the value kept beside the outbox, so that its emails' links stay valid.
        secrets_kept = {resources_for(APP_NAME, c.stage, c.account_id).link_secret_name: _link_secret(c.outbox)}
        self.created = cloudformation.create(
            Path(report.template),
            Path(report.bundle),
            c.stage,
            {n: self.client(n) for n in names},
            c.region,
            c.account_id,
            secrets_kept,
            data_file=Path(report.data_template),
        )
        self.outputs = dict(self.created.physical)
        self._set_environment(self.created)
        if not c.worker_processes:  # the functions share this process: each sees its own environment here
            self._undo.append(environment.install())
        self.environments = self._function_environments(self.created)
        self.settings = Settings.from_env()
        self.access = AccessControl(c.region, c.account_id)
        gateway.access = self.access
        roles = self.roles = self._assume_roles(self.created)
        if not c.worker_processes:  # and each signs as its own role here
            self._undo.append(identity.carry_into_pools())
            self._undo.append(identity.install(PLATFORM_ACCESS_KEY, PLATFORM_SECRET_KEY))
        from chalicelib.core import aws

        aws.reset()  # clients made from now on sign as the calling function
        self.ses.publish = self._publish_ses_event
        self.loaded = self._load_state()
        self._verify_console_from()
        self._start_runtime(gateway, roles)
        if self.loaded is not None:
            self._run_deferred(self.loaded.deferred)
            # Used up: if this run dies without a clean stop, the next start must not load the data of before
            # it (the ledger would forget what this run sent). Kept aside for an operator, never loaded.
            assert self.config.state_file is not None
            self.config.state_file.replace(self.config.state_file.with_suffix(".loaded"))
        gateway.cfn_transforms = cfn_transform.ChangeSetTransforms(self.client, c.region)
        gateway.ready = True
        self.gateway = gateway

    def _verify_console_from(self) -> None:
        """The console's From address verified in the platform's SES account, as an operator verifies it on
        AWS before a deploy (docs/deploying.md): the sign-in links of the local stage land in the outbox."""
        address = self.settings.console_from if self.settings else None
        if not address:
            return
        try:
            self.client("sesv2").create_email_identity(EmailIdentity=address)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "AlreadyExistsException":
                raise

    def _load_state(self) -> state.SavedState | None:
        """The data of the last run (before any function runs), when there is any to load."""
        path = self.config.state_file
        if path is None or not path.exists():
            return None
        assert self.ses is not None
        try:
            saved = state.load(path, self.config.fast_sqs)
            state.restore(saved)
        except state.StateUnusable as exc:
            raise StackError(f"{exc}; `moonsend up --fresh` starts empty (and replaces it at the next stop)") from None
        self.ses.load_state(saved.ses)
        return saved

    def _run_deferred(self, deferred: list[tuple[str, dict[str, Any]]]) -> None:
        """The asynchronous events accepted before the last stop and not run then: run now, as Lambda would."""
        assert self.runner is not None
        for name, event in deferred:
            fn = self.runner.functions.get(name)
            if fn is None:
                print(f"[state] an event for {name}, which the template no longer has, was dropped")
                continue
            self.runner.invoke_async(fn, event)

    def save_state(self, timeout_s: float = 900.0) -> state.SavedState:
        """Quiesce and save (infra.local.state): no new trigger, every running invocation told its time is up
        and waited for (a drain sends the emails it holds at their rate first: up to Lambda's 15 minutes),
        every SES event published, the endpoint closed, then the data and the events not yet run written out."""
        assert self.config.state_file is not None and self.runner is not None and self.ses is not None
        for part in (self.alarms, self.sqs_metrics, self.ses_metrics, self.scheduler, self.schedules):
            if part is not None:
                part.stop()
        finished = self.runner.stop_for_save(timeout_s)
        self.ses.flush_events()  # their SNS deliveries are deferred: they run after the restart
        finished = self.runner.wait_idle(5.0) and finished
        if not finished:
            print(
                f"[state] {self.runner.inflight} invocation(s) still running after {timeout_s:.0f}s: saved anyway; "
                "what they send from now on is not in the saved ledger and may be sent again after the restart"
            )
        assert self.gateway is not None
        self.gateway.closed = True  # nothing more is accepted that the saved state would not hold
        saved = state.capture(self.ses.saved_state(), list(self.runner.deferred), self.config.fast_sqs)
        state.save(self.config.state_file, saved)
        self.saved = saved
        return saved

    def _publish_ses_event(self, topic_arn: str, message: str) -> None:
        """SES publishing one of its events to an SNS topic: inside AWS, so not through the endpoint.

        moto's SNS model stores the publication (and raises as SNS would, for a topic that does not
        exist), then the topic's Lambda subscribers get it. Going through the HTTP endpoint instead cost
        two requests' worth of botocore, werkzeug and moto per email (a Send and a Delivery event) on the
        same CPU as everything else, for a request no code of ours makes.
        """
        _arn, _aws, _sns, region, account, _name = topic_arn.split(":", 5)
        message_id = sns_backends[account][region].publish(message, arn=topic_arn)
        if self.sns is not None:
            self.sns.publish(Publication(topic_arn, message, message_id))

    def _operator_environment(self) -> None:
        """This process's AWS settings before the stack exists: the operator's keys, the local endpoint."""
        c = self.config
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            os.environ.pop(var, None)
        os.environ.update(
            {
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ACCESS_KEY_ID": PLATFORM_ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": PLATFORM_SECRET_KEY,
                "AWS_DEFAULT_REGION": c.region,
                "AWS_REGION": c.region,
            }
        )

    def _set_environment(self, created: CreatedStack) -> None:
        """The functions' environment, as the template set it, plus `LOCAL_OVERRIDES`, `LOCAL_STAGE_SETTINGS`
        and the config's.

        All functions share this process, so a variable two of them set differently cannot be honoured:
        the stack refuses to start rather than run one of them with the other's value."""
        c = self.config
        env: dict[str, str] = {}
        for fn in created.functions.values():
            for k, v in fn.environment.items():
                if k in env and env[k] != v and k not in LOCAL_OVERRIDES:
                    raise StackError(f"functions set {k} differently ({env[k]!r}, {v!r}): one process cannot run both")
                env[k] = v
        env.update({"MOONSEND_METRICS_FILE": str(c.outbox / "metrics.jsonl"), **LOCAL_STAGE_SETTINGS})
        if c.free_rate is not None:
            env["MOONSEND_FREE_RATE"] = str(c.free_rate)
        env.update(c.extra_env)
        os.environ.pop("MOONSEND_LINK_SECRET", None)  # the functions read the key from Secrets Manager
        os.environ.update(env)
        from chalicelib import wiring

        wiring.reset()

    def _function_environments(self, created: CreatedStack) -> dict[str, dict[str, str]]:
        """Each function's own environment (infra.local.environment): the template's variables for it, with
        `LOCAL_OVERRIDES` for those it sets, the stack's settings for the stage (`LOCAL_STAGE_SETTINGS`, the
        config's), and what Lambda sets."""
        c = self.config
        stage_wide = {"MOONSEND_METRICS_FILE": str(c.outbox / "metrics.jsonl"), **LOCAL_STAGE_SETTINGS, **c.extra_env}
        if c.free_rate is not None:
            stage_wide["MOONSEND_FREE_RATE"] = str(c.free_rate)
        out: dict[str, dict[str, str]] = {}
        for fn in created.functions.values():
            template = {k: os.environ.get(k, v) if k in LOCAL_OVERRIDES else v for k, v in fn.environment.items()}
            lambda_set = {k: os.environ[k] for k in environment.LAMBDA_SET if k in os.environ}
            lambda_set.update(AWS_LAMBDA_FUNCTION_NAME=fn.name, AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(fn.memory_mb))
            out[fn.name] = environment.function_environment(os.environ, {**template, **stage_wide}, lambda_set)
        return out

    def _assume_roles(self, created: CreatedStack) -> dict[str, RoleCredentials]:
        """Each function's role credentials (STS on the endpoint), and its policies for the endpoint's IAM."""
        assert self.access is not None
        sts = self.client("sts")
        roles: dict[str, RoleCredentials] = {}
        for fn in created.functions.values():
            creds = sts.assume_role(RoleArn=fn.role_arn, RoleSessionName=fn.name)["Credentials"]
            role = RoleCredentials(
                fn.name, fn.role_arn, creds["AccessKeyId"], creds["SecretAccessKey"], creds["SessionToken"]
            )
            self.access.add_role(role, list(fn.policies))
            roles[fn.name] = role
        return roles

    def _start_runtime(self, gateway: Gateway, roles: dict[str, RoleCredentials]) -> None:
        assert self.settings is not None and self.created is not None
        c, created = self.config, self.created
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        if "app" in sys.modules:
            self.app_module = importlib.reload(sys.modules["app"])
        else:
            self.app_module = importlib.import_module("app")
        chalice_app = self.app_module.app
        functions = functions_from_stack(chalice_app, created, roles, self.environments)
        self.runner = FunctionRunner(
            functions, c.region, c.account_id, max_concurrency=c.max_concurrency, on_failure=self._send_on_failure
        )
        if c.worker_processes:
            self.runner.use_workers(c.workers_per_function)
        gateway.runner = self.runner
        self.sns = SnsDelivery(self.runner)
        gateway.sns = self.sns
        self.scheduler = Scheduler(
            self.runner,
            account_id=c.account_id,
            region=c.region,
            time_scale=1.0 if c.aws_timing else c.schedule_time_scale,
        )
        for topic_arn, name in created.subscriptions:
            self.sns.subscribe(topic_arn, functions[name])
        for rule_arn, expression, name in created.schedules:
            self.scheduler.add(functions[name], expression, rule_arn)
        self.event_bus = EventBus(self.runner)
        for rule_arn, pattern, name in created.event_rules:
            self.event_bus.add(functions[name], pattern, rule_arn)
        assert self.ses is not None
        bus = self.event_bus

        def put_event(
            source: str, detail_type: str, resources: list[str], detail: dict[str, Any], account: str
        ) -> None:
            bus.put(envelope(source, detail_type, resources, detail, account=account, region=c.region))

        self.ses.tenants.put_event = put_event
        self.pollers = [self._poller(source, functions) for source in created.event_sources]
        self.stream_pollers = [self._stream_poller(source, functions) for source in created.stream_sources]
        self.sns.start()
        self.scheduler.start()
        prefix = self.settings.resources.digest_schedule_prefix
        self.schedules = ScheduleRunner(self.client("scheduler"), self.runner, prefix, self.runner.resolve)
        self.schedules.start()
        for poller in [*self.pollers, *self.stream_pollers]:
            poller.start()
        self.alarms = AlarmEvaluator(
            self.client("cloudwatch"),
            self.client("sqs"),
            self.client("sns"),
            account_id=c.account_id,
            region=c.region,
            time_scale=1.0 if c.aws_timing else c.alarm_time_scale,
            queue_counts=self._queue_counts,
            aws_timing=c.aws_timing,
            clock=time.time if c.aws_timing else time.monotonic,
        )
        self.alarms.start()
        self.sqs_metrics = self._sqs_metrics()
        self.sqs_metrics.start()
        self.ses_metrics = self._ses_metrics()
        self.ses_metrics.start()
        api_name = self.settings.resources.function_name("api_handler")
        self._start_api(chalice_app, roles[api_name], self.environments.get(api_name))

    def _poller(self, source: EventSource, functions: dict[str, LocalFunction]) -> SqsPoller:
        """Lambda's poller for one event source mapping, once the mapping passed Lambda's checks."""
        from moto.sqs.models import sqs_backends

        assert self.created is not None and self.runner is not None
        _arn, _aws, _sqs, region, account, name = source.queue_arn.split(":", 5)

        def backend() -> Any:
            return sqs_backends[account][region]

        visibility = int(backend().get_queue(name).visibility_timeout)
        check_mapping(source, self.created.functions[source.function_name], visibility)
        return SqsPoller(self.runner, functions[source.function_name], source, backend, region)

    def _stream_poller(self, source: StreamSource, functions: dict[str, LocalFunction]) -> StreamPoller:
        """Lambda's poller for one stream event source mapping, once the mapping passed Lambda's checks."""
        from moto.dynamodb.models import dynamodb_backends

        assert self.created is not None and self.runner is not None
        _arn, _aws, _ddb, region, account, _rest = source.stream_arn.split(":", 5)
        check_stream_mapping(source, self.created.functions[source.function_name])

        def shard() -> Any:
            return dynamodb_backends[account][region].get_table(source.table_name).stream_shard

        return StreamPoller(self.runner, functions[source.function_name], source, shard, region)

    def wait_for_streams(self, timeout: float = 30.0) -> bool:
        """Wait until the stream pollers have handed every record to their functions (webhook tests: the
        general wait_until_drained does not wait for streams, whose batching window every test would pay)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not any(p.pending for p in self.stream_pollers):
                return True
            time.sleep(0.1)
        return False

    def _send_on_failure(self, fn: LocalFunction, record: dict[str, Any]) -> None:
        """Lambda's delivery of an invocation record to an on-failure destination (an SQS queue)."""
        assert fn.on_failure is not None
        _arn, _aws, _sqs, _region, account, name = fn.on_failure.split(":", 5)
        # Signed as the function's role, as Lambda sends it. Lambda sends to the queue by its ARN: no
        # GetQueueUrl, which the role need not be allowed.
        role = fn.role
        if role is None:
            sqs = self.client("sqs")
        else:
            sqs = self.client("sqs", access_key=role.access_key, secret_key=role.secret_key, token=role.token)
        sqs.send_message(QueueUrl=f"{self.endpoint}/{account}/{name}", MessageBody=json.dumps(record))

    def _start_api(self, chalice_app: Any, role: RoleCredentials, env: dict[str, str] | None) -> None:
        """Serve the app's HTTP routes on `api_port`, as `chalice local` does; links in emails point here."""
        from chalice.config import Config as ChaliceConfig

        c = self.config
        assert self.created is not None
        rest_api = api_gateway.RestApi.of(self.created.api, self.created.api_compression)
        if c.worker_processes:
            self._start_api_worker(role, env, rest_api)
            return
        on_disk = json.loads((ROOT / ".chalice" / "config.json").read_text())
        cfg = ChaliceConfig.create(
            chalice_stage=c.stage, app_name="moonsend", config_from_disk=on_disk, project_dir=str(ROOT)
        )
        try:
            self.api = api_gateway.serve(chalice_app, cfg, c.host, c.api_port, rest_api)
        except OSError as exc:
            raise StackError(f"cannot serve the API on {c.host}:{c.api_port}: {exc} (try --api-port)") from None
        self.api_url = f"http://{c.host}:{self.api.server.server_port}"
        self.api_exchanges.install(self.api)
        serve_one = self.api.server.process_request_thread

        def as_api_function(request: Any, client_address: Any) -> None:
            # Each request runs as the API's function: its role, its environment.
            with identity.acting_as(role), environment.acting_in(env):
                serve_one(request, client_address)

        self.api.server.process_request_thread = as_api_function
        os.environ["MOONSEND_API_URL"] = self.api_url
        for own in self.environments.values():  # the functions the template tells where the API is
            if "MOONSEND_API_URL" in own:
                own["MOONSEND_API_URL"] = self.api_url
        self._point_api_output()
        from chalicelib import wiring

        wiring.reset()  # the containers made so far knew no API address
        self._api_thread = threading.Thread(target=self.api.server.serve_forever, daemon=True, name="local-api")
        self._api_thread.start()

    def _point_api_output(self) -> None:
        assert self.created is not None and self.api_url is not None
        c = self.config
        cloudformation.point_api_output(self.created.name, self.api_url, c.account_id, c.region)

    def _start_api_worker(
        self, role: RoleCredentials, env: dict[str, str] | None, rest_api: api_gateway.RestApi
    ) -> None:
        """The API's function in a process of its own (with worker processes), its address told to the others."""
        c = self.config
        api = ApiWorker(worker_environment(env, role, dict(os.environ)), c.host, c.api_port, c.stage, rest_api)
        if not api.url:
            raise StackError(
                f"cannot serve the API on {c.host}:{c.api_port} (its output above says why; try --api-port)"
            )
        self.api_worker = api
        self.api_url = api.url
        os.environ["MOONSEND_API_URL"] = self.api_url
        for own in self.environments.values():  # the functions the template tells where the API is
            if "MOONSEND_API_URL" in own:
                own["MOONSEND_API_URL"] = self.api_url
        self._point_api_output()
        from chalicelib import wiring

        wiring.reset()

    def _sqs_metrics(self) -> SqsMetrics:
        """SQS's minute of metrics per queue, into moto's CloudWatch (a minute as short as the alarms')."""
        from moto.cloudwatch.models import cloudwatch_backends
        from moto.sqs.models import sqs_backends

        c = self.config
        return SqsMetrics(
            lambda: list(sqs_backends[c.account_id][c.region].queues.items()),
            lambda: cloudwatch_backends[c.account_id][c.region],
            minute_s=60.0 * (1.0 if c.aws_timing else c.alarm_time_scale),
        )

    def _ses_metrics(self) -> SesMetrics:
        """SES's reputation rates per account that sent, into moto's CloudWatch (a minute as the alarms')."""
        from moto.cloudwatch.models import cloudwatch_backends

        c, ses = self.config, self.ses
        assert ses is not None
        return SesMetrics(
            ses.reputation_accounts,
            ses.reputation,
            lambda account: cloudwatch_backends[account][c.region],
            minute_s=60.0 * (1.0 if c.aws_timing else c.alarm_time_scale),
        )

    def _queue_counts(self, name: str) -> dict[str, int] | None:
        """A queue's Approximate* counts read from moto's SQS model in this process (None: no such queue)."""
        from moto.sqs.models import sqs_backends

        queue = sqs_backends[self.config.account_id][self.config.region].queues.get(name)
        if queue is None:
            return None
        return {
            "ApproximateNumberOfMessages": int(queue.approximate_number_of_messages),
            "ApproximateNumberOfMessagesNotVisible": int(queue.approximate_number_of_messages_not_visible),
            "ApproximateNumberOfMessagesDelayed": int(queue.approximate_number_of_messages_delayed),
        }

    def stop(self) -> None:
        """Stop; with a state file configured, a clean stop saves the state first (`save_state`). A save that
        fails still stops the stack and takes its process-wide patches back (then raises): the process's
        next stack must not find this one's patches in place."""
        try:
            if self.config.state_file is not None and self.runner is not None and self.gateway is not None:
                self.save_state()
        finally:
            self._stop()

    def _stop(self) -> None:
        while self._undo:
            self._undo.pop()()
        parts = (self.alarms, self.sqs_metrics, self.ses_metrics, self.scheduler, self.schedules, self.sns)
        for part in (*parts, *self.pollers, *self.stream_pollers):
            if part is not None:
                part.stop()
        if self.runner is not None:
            # Running invocations are told their time is up and given a moment to end (a drain stops as at its
            # Lambda deadline) before the endpoint goes: otherwise each would fail on a refused connection, and
            # print why, after the caller had its answer (the smoke's last lines were tracebacks).
            self.runner.stop_for_save(STOP_GRACE_S)
            self.runner.shutdown()
        if self.api is not None:
            self.api.server.shutdown()
            self.api.server.server_close()
        if self.api_worker is not None:
            self.api_worker.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- helpers ----------------------------------------------------------------------------------------
    def paid_sender(self, user_id: str, rate: float, ses_max_rate: float) -> dict[str, Any]:
        """A paid tenant's `sender` block: its own SES account (keys derived from the id), address verified."""
        key = "AKIA" + hashlib.sha256(user_id.encode()).hexdigest()[:16].upper()
        secret = f"local-secret-{user_id}"
        assert self.ses is not None
        self.ses.configure(key, max_send_rate=ses_max_rate)
        sender = {
            "region": self.config.region,
            "apiKey": key,
            "apiSecret": secret,
            "ratePerSecond": f"{rate:g}",
            "emailAddress": f"news@{user_id}.example",
            "fromName": f"{user_id} News",
        }
        self.client("sesv2", access_key=key, secret_key=secret).create_email_identity(
            EmailIdentity=sender["emailAddress"]
        )
        return sender

    def client(
        self,
        service: str,
        *,
        access_key: str = PLATFORM_ACCESS_KEY,
        secret_key: str = PLATFORM_SECRET_KEY,
        region: str | None = None,
        token: str | None = None,
    ) -> Any:
        """A client for the local endpoint (made once per service, keys and region)."""
        key = (service, access_key, secret_key, region or self.config.region, token or "")
        with self._clients_lock:
            found = self._clients.get(key)
            if found is None:
                found = self._session.client(
                    service,
                    endpoint_url=self.endpoint,
                    region_name=key[3],
                    aws_access_key_id=access_key,
                    aws_secret_access_key=secret_key,
                    aws_session_token=token,
                    config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, max_pool_connections=32),
                )
                self._clients[key] = found
            return found

    @property
    def topic_arns(self) -> dict[str, str]:
        assert self.settings is not None
        return {t.name: self.outputs[t.logical_id] for t in self.settings.resources.topics}

    def queue_depths(self) -> dict[str, tuple[int, int, int]]:
        """(visible, in flight, delayed) of every moonsend queue of this stage."""
        from infra.status import queue_depths

        assert self.settings is not None
        return {q.name: (q.visible, q.in_flight, q.delayed) for q in queue_depths(self.settings, self.client("sqs"))}

    def busy_with(self) -> list[str]:
        """The work the stack has left to deliver, run or send, named (dead letters aside); [] when idle."""
        assert self.sns is not None and self.runner is not None and self.settings is not None
        # Dead-lettered messages and failed invocations wait for an operator: not work the stack will do.
        r = self.settings.resources
        for_operator = {r.dead_letter_queue.name, r.failed_invocations_queue.name, r.webhooks_dead_letter_queue.name}
        work = []
        if self.sns.backlog() > 0:
            work.append(f"{self.sns.backlog()} SNS message(s) undelivered")
        running = self.runner.running()
        if running:
            work.append("running " + ", ".join(f"{name} x{n}" for name, n in sorted(running.items())))
        if self.ses is not None and self.ses.events_pending > 0:
            work.append(f"{self.ses.events_pending} email(s) with SES events unpublished")
        for name, (visible, in_flight, delayed) in sorted(self.queue_depths().items()):
            if name not in for_operator and visible + in_flight + delayed:
                work.append(f"{name}: {visible} visible, {in_flight} in flight, {delayed} delayed")
        return work

    def wait_until_drained(self, timeout: float = 120.0, settle_s: float = 0.5, poll_s: float = 0.5) -> bool:
        """Wait until nothing is left to deliver, run or send (dead letters aside); on a timeout, say to stderr
        what was left (a test's captured output then shows it).

        Polls every `poll_s`: each poll is a handful of requests to the endpoint, which shares this
        process (and its GIL) with the handlers, so polling fast slows down what it waits for.
        """
        end = time.monotonic() + timeout
        quiet_since: float | None = None
        work: list[str] = []
        while time.monotonic() < end:
            work = self.busy_with()
            if work:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= settle_s:
                return True
            time.sleep(min(poll_s, max(0.0, end - time.monotonic())))
        print(
            f"[stack] not drained within {timeout:.0f} s: {'; '.join(work) or 'idle for less than settle_s'}",
            file=sys.stderr,
            flush=True,
        )
        return False
