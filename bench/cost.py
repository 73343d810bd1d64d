"""The cost model: AWS requests per email, counted on a real run of the whole local pipeline, priced.

The local stack runs in this process (as `make demo` runs it): tenants publish campaigns to
PrecompileEmail, the alarms start send_emails, SES's Send and Delivery events come back through SNS and
the events queue to ses_events (in batches, by Lambda's poller), the sweeper and the releaser run on their
schedules. A handler on botocore's `before-call` event, registered for every session this process creates
(boto3's and pynamodb's), counts each request by who made it, read from the thread that made it:

- `functions`: our Lambda functions (calls made inside an invocation, and from the drainer's `send-*`
  threads and the ledger's write pool, which only run inside one): what a tenant's email costs us;
- `producer`: the campaign's publishes to PrecompileEmail (this script's main thread, standing in for
  the list service that publishes in production);
- `ses`: SES publishing its events to SNS (counted where the stand-in publishes them), which SNS bills,
  and SNS's delivery of each to the events queue (an SQS request);
- `poller`: Lambda's poller of the events queue, one receive and one batch delete per ten messages of a
  batch it hands ses_events (requests billed to the queue's owner; made in process by the stand-in, so
  counted here; its empty receives while the queue is idle are a cost per stage, not per email, and not
  counted);
- `readers`: the recipients' mail clients, each open (the pixel) and click (the redirect) one API Gateway
  request (what the API's function does for it is `functions`');
- everything else is the local stand-in for AWS (alarm evaluation, SNS-to-Lambda delivery): AWS does
  that for free and it is not counted.

Lambda invocations are counted per function by wrapping the runtime's invoke. Lambda compute is
modelled: the local stand-ins for AWS answer in the functions' own process, on their threads. A drain is
busy for as long as its rate needs (`emails / ratePerSecond` seconds), so send_emails costs `memory / rate`
GB-seconds per email; every other function is priced at the CPU time of its own threads less the stand-ins'
(at its memory's share of a vCPU), plus a round trip on AWS (`AWS_REQUEST_S`) for each request it waited
for (`aws_gb_s`); its local duration, in one process shared by every function and stand-in, is no measure.
Every function is
priced at the memory `--stage` (prod by default) gives it in .chalice/config.json, not the local stage's.

SES's events are published a second after each send (`SES_EVENT_DELAY_S`), as SES does within seconds: at
once, the Send event's record would race the drainer's own, which it never does on AWS.

What a tenant costs a month whatever it sends (its queue's alarm, the sweeper's looks at its queue) is
modelled from what the run made (the alarms) and the sweeper's rule (chalicelib.jobs.queues_in_use), for
tenants sending `CAMPAIGNS_A_MONTH` campaigns a month.

The mix: `--tenants` paid tenants, each sending at `--rate` (14/s by default), the first `--webhooks` of
them with a webhook endpoint (a loopback receiver; every event type, 25 a request); each email has a link;
after the campaign, a quarter of the recipients open it and a twentieth click its link (every fourth and
twentieth email in the outbox), through the stage's API as a mail client would. The event log and the
timeline are always kept.

    python bench/cost.py [--tenants 10] [--recipients 2000] [--webhooks 3] [--rate 14] [--stage prod] [--markdown]

Prices: us-east-1, public on-demand, 2026, free tiers ignored.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import botocore.handlers  # noqa: E402

from chalicelib.control.retry import LANE_PREFIX as RETRY_LANE_PREFIX  # noqa: E402
from chalicelib.core.config import DRAINER_MAX_RATE  # noqa: E402
from chalicelib.core.drainer_shares import drainers_for  # noqa: E402
from chalicelib.feedback.ses_events import LANE_PREFIX, LANES, EventBatch  # noqa: E402
from chalicelib.jobs.sweeper import DAILY_WINDOW  # noqa: E402

# USD per unit.
PRICE = {
    "sqs_request": 0.40 / 1e6,  # per 64 KiB chunk of a request
    "sns_publish": 0.50 / 1e6,  # per 64 KiB chunk; deliveries to Lambda are free
    "dynamodb_wru": 0.625 / 1e6,  # on-demand write request unit (1 KB)
    "dynamodb_rru": 0.125 / 1e6,  # on-demand read request unit (4 KB, strongly consistent)
    "s3_put": 0.005 / 1e3,  # PUT, COPY, POST, LIST
    "s3_get": 0.0004 / 1e3,  # GET and others
    "cloudwatch_api": 0.01 / 1e3,  # PutMetricAlarm, DescribeAlarms ...
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_s": 0.0000166667,  # x86
    "ses_email": 0.10 / 1e3,
    "alarm_month": 0.10,  # a standard-resolution metric alarm, per month
    "apigw_request": 3.50 / 1e6,  # a REST API request (the first 333 million a month)
}
DYNAMODB_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
DYNAMODB_READS = {"GetItem", "Query", "Scan"}
S3_PUTS = {"PutObject", "CopyObject", "ListObjectsV2", "ListObjects"}
SES_SENDS = {"SendEmail", "SendRawEmail"}
# SES publishes an email's events within seconds of accepting it (the local stand-in, by default, at once: then
# the Send event's record races the drainer's own, which never happens on AWS, and both writes are counted).
SES_EVENT_DELAY_S = 1.0
COUNTED = ("functions", "producer", "ses", "poller", "readers")
MINUTES_PER_MONTH = 30 * 24 * 60


@dataclass
class Call:
    who: str
    service: str
    operation: str
    units: dict[str, float]


_lock = threading.Lock()
_calls: Counter[tuple[str, str, str]] = Counter()
_units: dict[str, Counter[str]] = defaultdict(Counter)
_billed: Counter[tuple[str, str, str]] = Counter()
_by_function: Counter[tuple[str, str, str]] = Counter()  # units billed, by the function that made the request
_requests_of: Counter[str] = Counter()  # AWS requests, by the function (or pool) that made them
_stand_in_s: Counter[str] = Counter()  # CPU seconds the local stand-ins spent answering them, by the same
_cpu_s: Counter[str] = Counter()  # CPU seconds of each function's own threads (and the write pool's)
_on = threading.Event()


_publishing = threading.Event()
_in_function = threading.local()


def who_called() -> str:
    name = threading.current_thread().name
    if name == "MainThread":
        return "producer" if _publishing.is_set() else "stand-in"
    # A handler's own threads (the drainer's sends, the ledger's writes, SES events' lanes) run only inside an
    # invocation.
    pools = ("send", "writes", LANE_PREFIX, RETRY_LANE_PREFIX, "ThreadPoolExecutor")
    if getattr(_in_function, "depth", 0) or name.startswith(pools):
        return "functions"
    if name.startswith("ses-events"):
        return "ses"
    return "stand-in"


def units_of(service: str, operation: str, params: dict[str, Any]) -> dict[str, float]:
    """What AWS bills for one request (every item here is under 1 KB and every body under 64 KiB; a Query or a
    Scan is priced as one read: what the functions query per email returns a few small items)."""
    if service == "dynamodb":
        if operation in DYNAMODB_WRITES:
            return {"dynamodb_wru": 1}
        if operation == "BatchWriteItem":
            return {"dynamodb_wru": sum(len(v) for v in params.get("RequestItems", {}).values())}
        if operation == "TransactWriteItems":
            return {"dynamodb_wru": 2 * len(params.get("TransactItems", []))}
        # A read unit is a strongly consistent read of up to 4 KB; an eventually consistent one is half of one.
        if operation == "BatchGetItem":
            tables = params.get("RequestItems", {}).values()
            return {"dynamodb_rru": sum(len(v.get("Keys", [])) * _read_units(v) for v in tables)}
        if operation in DYNAMODB_READS:
            return {"dynamodb_rru": _read_units(params)}
        return {}
    if service == "sqs":
        return {"sqs_request": 1}
    if service == "sns":
        return {"sns_publish": 1} if operation in ("Publish", "PublishBatch") else {}
    if service == "s3":
        return {"s3_put": 1} if operation in S3_PUTS else {"s3_get": 1}
    if service == "cloudwatch":
        return {"cloudwatch_api": 1}
    if service in ("sesv2", "ses"):
        return {"ses_email": 1} if operation in SES_SENDS else {}
    if service == "lambda" and operation == "Invoke":
        return {"lambda_request": 1}
    return {}


def _read_units(params: dict[str, Any]) -> float:
    """A read's units per item of up to 4 KB (every item here is): 1 strongly consistent, else 0.5."""
    return 1.0 if params.get("ConsistentRead") else 0.5


def _count(model: Any, params: dict[str, Any], **_: Any) -> None:
    if not _on.is_set():
        return
    who = who_called()
    service = model.service_model.endpoint_prefix
    if service == "email":
        service = "sesv2"
    params = api_params(service, params)
    _record(who, service, _labelled(service, model.name, params), units_of(service, model.name, params))


def _labelled(service: str, operation: str, params: dict[str, Any]) -> str:
    """`UpdateItem ledger`: a DynamoDB request by the tables it writes or reads (what each table costs)."""
    if service != "dynamodb":
        return operation
    tables = set(params.get("RequestItems", {}))
    tables |= {next(iter(t.values())).get("TableName", "?") for t in params.get("TransactItems", [])}
    if "TableName" in params:
        tables.add(params["TableName"])
    short = sorted(t.removeprefix("moonsend-local-") for t in tables)
    return f"{operation} {'+'.join(short)}" if short else operation


def api_params(service: str, request: dict[str, Any]) -> dict[str, Any]:
    """The call's parameters from the request `before-call` hands over (its serialised form, not the API's
    parameters): DynamoDB's JSON body. Before this, a batch's or a transaction's items read as none, and
    BatchWriteItem, TransactWriteItems and BatchGetItem were priced at no unit at all."""
    if service != "dynamodb":
        return request
    body = request.get("body") or b"{}"
    return dict(json.loads(body))


def _record(who: str, service: str, operation: str, units: dict[str, float]) -> None:
    fn = _function_name() if who == "functions" else who
    with _lock:
        _calls[(who, service, operation)] += 1
        _requests_of[fn] += 1
        for k, v in units.items():
            _units[who][k] += v
            _billed[(who, service, operation)] += v  # a request's units (a batch's or a transaction's items)
            _by_function[(fn, service, operation)] += v


def _function_name() -> str:
    """The function whose invocation made this request: its own thread's, or a send thread's (send_emails');
    a pool thread's is not known (`writes`: a batch of conditional writes, chalicelib.stores.write_batch)."""
    name = getattr(_in_function, "name", None)
    if name:
        return str(name)
    thread = threading.current_thread().name
    if thread.startswith("send"):
        return "send_emails"
    if thread.startswith(LANE_PREFIX):
        return "(event lanes)"
    return "(write pool)" if thread.startswith("writes") else "(a pool thread)"


botocore.handlers.BUILTIN_HANDLERS.append(("before-call.*.*", _count))


def _stand_in_meter() -> None:
    """Time what the local stand-ins spend answering each call made in this process (infra.local.direct_calls:
    on the caller's thread), by the function that made it: on AWS that time is AWS's, not the function's.
    The thread's CPU time, not the clock's: the write pool's sixteen threads wait for the GIL side by side,
    and their clocks summed would count each wait sixteen times."""
    from infra.local import direct_calls

    inner = direct_calls._call

    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            if _on.is_set() and (getattr(_in_function, "depth", 0) or _pool_thread()):
                with _lock:
                    _stand_in_s[_function_name()] += time.thread_time() - started

    direct_calls._call = call

    from chalicelib.stores import write_batch

    alone = write_batch._alone

    def timed(write: Any) -> Any:
        cpu = time.thread_time()
        try:
            return alone(write)
        finally:
            if _on.is_set() and _pool_thread():
                with _lock:
                    _cpu_s["(write pool)"] += time.thread_time() - cpu

    write_batch._alone = timed

    def lane_timed(self: Any, body: str) -> Any:
        cpu = time.thread_time()
        try:
            return lane(self, body)
        finally:
            if _on.is_set():
                with _lock:
                    _cpu_s["(event lanes)"] += time.thread_time() - cpu

    lane = EventBatch._outcome_of
    EventBatch._outcome_of = lane_timed  # type: ignore[method-assign]


def _pool_thread() -> bool:
    return threading.current_thread().name.startswith(("send", "writes", LANE_PREFIX))


def _lambda_meter(runner: Any) -> tuple[Counter[str], Counter[str]]:
    """Wrap the local runtime's invoke: invocations and GB-seconds per function."""
    invocations: Counter[str] = Counter()
    gb_s: Counter[str] = Counter()
    inner = runner.invoke

    def invoke(fn: Any, event: dict[str, Any]) -> Any:
        started, cpu = time.monotonic(), time.thread_time()
        _in_function.depth = getattr(_in_function, "depth", 0) + 1
        outer, _in_function.name = getattr(_in_function, "name", None), fn.handler_name
        try:
            return inner(fn, event)
        finally:
            _in_function.depth -= 1
            _in_function.name = outer
            if _on.is_set():
                with _lock:
                    invocations[fn.handler_name] += 1
                    gb_s[fn.handler_name] += (time.monotonic() - started) * fn.memory_mb / 1024
                    _cpu_s[fn.handler_name] += time.thread_time() - cpu

    runner.invoke = invoke
    return invocations, gb_s


def _api_meter(stack: Any, invocations: Counter[str], gb_s: Counter[str]) -> None:
    """The API's function runs in the local API Gateway's request threads (chalice local), not through the
    runtime's invoke: each request counted as an invocation of it, its calls as the functions'."""
    server = stack.api.server
    inner = server.RequestHandlerClass
    memory = stack.created.functions[stack.settings.resources.function_name("api_handler")].memory_mb

    def handler(*args: Any, **kwargs: Any) -> Any:
        started, cpu = time.monotonic(), time.thread_time()
        _in_function.depth = getattr(_in_function, "depth", 0) + 1
        _in_function.name = "api_handler"
        try:
            return inner(*args, **kwargs)
        finally:
            _in_function.depth -= 1
            _in_function.name = None
            if _on.is_set():
                with _lock:
                    invocations["api_handler"] += 1
                    gb_s["api_handler"] += (time.monotonic() - started) * memory / 1024
                    _cpu_s["api_handler"] += time.thread_time() - cpu

    server.RequestHandlerClass = handler


def _ses_event_meter(ses: Any) -> None:
    """Count SES's event publishes to SNS (made inside the stand-in, not through botocore), as SNS bills them."""
    inner = ses.publish

    def publish(topic_arn: str, message: str) -> None:
        inner(topic_arn, message)
        if _on.is_set():
            _record("ses", "sns", "Publish", units_of("sns", "Publish", {}))
            _record("ses", "sqs", "SendMessage (SNS to the events queue)", {"sqs_request": 1})

    ses.publish = publish


def _poller_meter(pollers: list[Any]) -> None:
    """Count what Lambda's poller requests of SQS for each batch it hands a function."""
    for poller in pollers:
        inner = poller._settle

        def settle(messages: list[Any], inner: Any = inner) -> None:
            inner(messages)
            if _on.is_set():
                # Lambda's poller receives and deletes at most ten messages a request, whatever the batch's size.
                for _ in range(0, max(1, len(messages)), 10):
                    _record("poller", "sqs", "ReceiveMessage", {"sqs_request": 1})
                    _record("poller", "sqs", "DeleteMessageBatch", {"sqs_request": 1})

        poller._settle = settle


ACCEPT = "image/webp,image/apng,image/*,*/*;q=0.8"  # what a browser-based mail client asks for
OPEN_EVERY, CLICK_EVERY = 4, 20  # a quarter of the recipients open, a twentieth click
BODY = '<p>Dear {{ name }}</p><p><a href="https://shop.example.org/sale">The sale</a></p>'
_PIXEL = re.compile(r'src="([^"]+/o/[^"]+)"')
_LINK = re.compile(r'href="([^"]+/c/[^"]+)"')


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
        return None  # a click's 302 is its answer: the shop is not ours to fetch


def _read_as_recipients(outbox: Path) -> tuple[int, int]:
    """Open every OPEN_EVERY-th email and click every CLICK_EVERY-th, by its own URLs, as a mail client."""
    opener = urllib.request.build_opener(_NoRedirect)
    opens = clicks = 0
    for i, eml in enumerate(sorted(outbox.glob("tenant*/cost-*/*.eml")), start=1):
        if i % OPEN_EVERY and i % CLICK_EVERY:
            continue
        html = _html_of(eml.read_bytes())
        wanted = [(_PIXEL, i % OPEN_EVERY == 0), (_LINK, i % CLICK_EVERY == 0)]
        for pattern, now in wanted:
            found = pattern.search(html) if now else None
            if found is None:
                continue
            try:
                # A mail client asks for an image (API Gateway answers a binary type only to an Accept of it).
                url = found.group(1).replace("&amp;", "&")
                opener.open(urllib.request.Request(url, headers={"Accept": ACCEPT}), timeout=30).close()
            except urllib.error.HTTPError as answer:
                if answer.code != 302:
                    raise
            _record("readers", "apigateway", "GET (an open or a click)", {"apigw_request": 1})
            opens += pattern is _PIXEL
            clicks += pattern is _LINK
    return opens, clicks


def _html_of(raw: bytes) -> str:
    message = email.message_from_bytes(raw, policy=email.policy.default)
    part = message.get_body(("html",))
    return str(part.get_content()) if part is not None else ""


def run(tenants: int, recipients: int, per_message: int, webhooks: int = 3, rate: float = 14.0) -> dict[str, Any]:
    os.environ.setdefault("MOONSEND_LOG_LEVEL", "WARNING")
    from infra.demo_webhooks import register
    from infra.local.stack import LocalStack, StackConfig
    from infra.producer import CampaignSpec, messages, publish

    with tempfile.TemporaryDirectory() as tmp:
        config = StackConfig(port=0, api_port=0, outbox=Path(tmp), ses_latency_ms=5, max_concurrency=64)
        with LocalStack(config) as stack:
            assert stack.settings is not None and stack.runner is not None and stack.ses is not None
            invocations, gb_s = _lambda_meter(stack.runner)
            _stand_in_meter()
            _api_meter(stack, invocations, gb_s)
            _ses_event_meter(stack.ses)
            stack.ses.event_delay_s = SES_EVENT_DELAY_S
            _poller_meter(stack.pollers)
            sns = stack.client("sns")
            topic = stack.topic_arns[stack.settings.resources.precompile_topic.name]
            specs = []
            for k in range(tenants):
                sender = stack.paid_sender(f"tenant{k}", rate=rate, ses_max_rate=rate)
                specs.append(CampaignSpec(f"tenant{k}", sender, "Hi {{ name }}", BODY, f"cost-{k}"))
            hooks = [register(f"tenant{k}") for k in range(min(webhooks, tenants))]
            cloudwatch = stack.client("cloudwatch")
            platform_alarms = len(cloudwatch.describe_alarms(MaxRecords=100)["MetricAlarms"])
            share = recipients // tenants
            _on.set()
            started = time.monotonic()
            _publishing.set()
            for k, spec in enumerate(specs):
                people = [{"email": f"r{i}@t{k}.example.org", "metadata": {"name": f"N{i}"}} for i in range(share)]
                publish(sns, topic, messages(spec, people, per_message))
            _publishing.clear()
            drained = stack.wait_until_drained(timeout=3600, settle_s=2.0, poll_s=1.0)
            opens, clicks = _read_as_recipients(Path(tmp))
            drained = stack.wait_until_drained(timeout=3600, settle_s=5.0, poll_s=1.0) and drained
            took = time.monotonic() - started
            for hook in hooks:
                hook.receiver.close()
            _on.clear()
            alarms = len(cloudwatch.describe_alarms(MaxRecords=100)["MetricAlarms"]) - platform_alarms
            memory = {f.handler_name: f.memory_mb for f in stack.runner.functions.values()}
    emails = share * tenants
    return {
        "drained": drained,
        "emails": emails,
        "tenants": tenants,
        "webhook_tenants": len(hooks),
        "opens": opens,
        "clicks": clicks,
        "took_s": round(took, 1),
        "rate": rate,
        "calls": dict(_calls),
        "billed": dict(_billed),
        "by_function": dict(_by_function),
        "units": {k: dict(v) for k, v in _units.items()},
        "invocations": dict(invocations),
        "local_gb_s": dict(gb_s),
        "requests_of": dict(_requests_of),
        "stand_in_s": dict(_stand_in_s),
        "cpu_s": dict(_cpu_s),
        "alarms": alarms,
        "platform_alarms": platform_alarms,
        "memory_mb": memory,
    }


def model(
    m: dict[str, Any], emails: float = 1e6, tenants: int = 1000, rate: float = 14.0, stage: str = "prod"
) -> dict[str, Any]:
    """Price `emails` emails sent by `tenants` tenants in one month, from the measured run."""
    n = m["emails"]
    per_email: Counter[str] = Counter()
    for who in COUNTED:
        for k, v in m["units"].get(who, {}).items():
            per_email[k] += v / n
    per_email["lambda_request"] += sum(m["invocations"].values()) / n
    ses = per_email.pop("ses_email", 0.0)
    lines: dict[str, float] = {k: v * emails * PRICE[k] for k, v in per_email.items()}
    sizes = stage_memory(stage)
    send_memory_gb = sizes.get("send_emails", m["memory_mb"].get("send_emails", 512)) / 1024
    other_gb_s = sum(gb for fn, gb in aws_gb_s(m, sizes).items() if fn != "send_emails") / n
    # Each drainer is busy for the whole drain: a rate that needs N of them (one per
    # MOONSEND_DRAINER_MAX_RATE emails a second, chalicelib.core.drainer_shares) costs N drains' time.
    drainers = drainers_for(rate, DRAINER_MAX_RATE)
    lines["lambda_gb_s"] = (send_memory_gb * drainers / rate + other_gb_s) * emails * PRICE["lambda_gb_s"]
    per_tenant = tenant_month(m, emails / tenants, rate)
    fixed = {
        "alarms": m["platform_alarms"] * PRICE["alarm_month"],
        "sweeper": sweeper_stage_month(tenants),
        **{f"{k} (the tenants')": v * tenants for k, v in per_tenant.items()},
    }
    return {
        "emails": emails,
        "tenants": tenants,
        "rate": rate,
        "per_email_units": {k: round(v, 4) for k, v in sorted(per_email.items())},
        "ses_emails_per_email": round(ses, 4),
        "usd": {k: round(v, 2) for k, v in sorted(lines.items())},
        "usd_fixed_per_month": {k: round(v, 2) for k, v in fixed.items()},
        "usd_per_tenant_month": {k: round(v, 6) for k, v in per_tenant.items()},
        "usd_idle_tenant_month": round(tenant_month(m, 0, rate)["sweeper"], 6),
        "usd_per_million": round(sum(lines.values()) * 1e6 / emails, 2),
        "usd_total": round(sum(lines.values()) + sum(fixed.values()), 2),
        "ses_usd": round(emails * PRICE["ses_email"], 2),
        "alarms_per_tenant": m["alarms"] / m["tenants"],
        "stage": stage,
    }


# What a request to DynamoDB, SQS or SES costs the function that waits for it on AWS (a round trip in the
# region: a few milliseconds; here the stand-ins answer in-process, and their time is taken out).
AWS_REQUEST_S = 0.008
# Requests made from a pool's threads are waited for several at a time, and the pool is one function's: the
# write pool (chalicelib.stores.write_batch) is precompile's records in this mix (the API's suppression lists
# are not in it); the event lanes are ses_events' (chalicelib.feedback.ses_events.LANES).
POOLS = {"(write pool)": ("precompile_email", 16), "(event lanes)": ("ses_events", LANES)}


# Lambda gives a function a full vCPU at 1,769 MB and a share in proportion below: CPU-bound code takes
# 1,769 / memory times as long at less.
FULL_VCPU_MB = 1769


def aws_gb_s(m: dict[str, Any], sizes: dict[str, int]) -> dict[str, float]:
    """Each function's GB-seconds on AWS, at the stage's memory, from what it did here: the CPU time of its
    own threads (its invocation's, and its pool's: precompile's write pool, ses_events' lanes), less what the
    stand-ins spent answering its requests on them, run at the memory's share of a vCPU; plus a round trip on
    AWS for each request it waited for (a pool's several at a time: POOLS). Its local duration is no measure: here every
    function and stand-in shares one process's CPU, and a wait for it is no wait on AWS."""
    stand_in, requests, cpu = m.get("stand_in_s", {}), m.get("requests_of", {}), m.get("cpu_s", {})
    out: dict[str, float] = {}
    for fn in m["local_gb_s"]:
        memory = sizes.get(fn, m["memory_mb"].get(fn, 128))
        own_cpu = cpu.get(fn, 0.0) - stand_in.get(fn, 0.0)
        waits = requests.get(fn, 0) * AWS_REQUEST_S
        for pool, (owner, in_flight) in POOLS.items():
            if fn == owner:
                own_cpu += cpu.get(pool, 0.0) - stand_in.get(pool, 0.0)
                waits += requests.get(pool, 0) * AWS_REQUEST_S / in_flight
        seconds = max(0.0, own_cpu) * max(1.0, FULL_VCPU_MB / memory) + waits
        out[fn] = seconds * memory / 1024
    return out


CAMPAIGNS_A_MONTH = 4  # a tenant's campaigns a month (weekly), for what its queue's looks cost
HOURS_IN_USE_AFTER = 1.5  # a queue stays in use this hour or the last: 1 to 2 hours after its last put or drain


def tenant_month(m: dict[str, Any], emails: float, rate: float) -> dict[str, float]:
    """What one tenant costs a month whatever its emails cost: its queue's alarm (measured: made or not),
    and the sweeper's looks at its queue: a few a day idle, once a minute while in use (chalicelib.jobs
    .queues_in_use: its campaigns' sending time, and an hour or two after each)."""
    alarms = m["alarms"] / m["tenants"]
    hours = CAMPAIGNS_A_MONTH * (emails / CAMPAIGNS_A_MONTH / rate / 3600 + HOURS_IN_USE_AFTER) if emails else 0.0
    looks = 30 * DAILY_WINDOW + 60 * hours  # idle: its few minutes a day; in use: every minute
    return {"alarms": alarms * PRICE["alarm_month"], "sweeper": looks * PRICE["sqs_request"]}


def sweeper_stage_month(tenants: int) -> float:
    """The sweeper's own reads each minute, whatever the tenants do: ListQueues (1,000 queues a page), and
    the queues in use (two Queries of the tenants' index, a scan of the leases table: a few read units)."""
    pages = -(-tenants // 1000)
    return MINUTES_PER_MONTH * (pages * PRICE["sqs_request"] + 3 * PRICE["dynamodb_rru"])


def stage_memory(stage: str) -> dict[str, int]:
    """Each function's memory (MB) on the stage, as .chalice/config.json gives it."""
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    functions = config["stages"][stage].get("lambda_functions", {})
    return {name: int(f["lambda_memory_size"]) for name, f in functions.items() if "lambda_memory_size" in f}


def markdown(m: dict[str, Any], priced: list[dict[str, Any]]) -> str:
    n = m["emails"]
    out = [
        f"Measured: {n:,} emails from {m['tenants']} tenants ({m['webhook_tenants']} with a webhook endpoint), "
        f"each sending at {m['rate']:g}/s, through the whole local pipeline, {m['opens']:,} opens and "
        f"{m['clicks']:,} clicks, in {m['took_s']} s. The requests per email are this run's at every rate "
        "below; only send_emails' time is modelled per rate.",
        "",
        "| who | service | operation | requests per email | units per email |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for (who, service, op), c in sorted(m["calls"].items()):
        if who in COUNTED:
            billed = m["billed"].get((who, service, op), 0.0)
            out.append(f"| {who} | {service} | {op} | {c / n:.4f} | {billed / n:.4f} |")
    for fn, c in sorted(m["invocations"].items()):
        out.append(f"| AWS | lambda | invoke {fn} | {c / n:.4f} | {c / n:.4f} |")
    title = "Lambda's time per email, by function: measured locally, and as priced (send_emails' from its rate):"
    head = "| function | invocations | local GB-s | own CPU s | stand-ins' CPU s | AWS requests | priced GB-s"
    out += ["", title, "", f"{head} ({priced[0]['stage']}) |"]
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    on_aws = aws_gb_s(m, stage_memory(priced[0]["stage"]))
    for fn, gb_s in sorted(m["local_gb_s"].items()):
        stand_in, asked, cpu = m["stand_in_s"].get(fn, 0.0), m["requests_of"].get(fn, 0), m["cpu_s"].get(fn, 0.0)
        out.append(
            f"| {fn} | {m['invocations'].get(fn, 0) / n:.4f} | {gb_s / n:.6f} | {cpu / n:.6f} | {stand_in / n:.6f} "
            f"| {asked / n:.3f} | {on_aws[fn] / n:.6f} |"
        )
    for pool, (owner, _) in POOLS.items():
        cpu, stand_in, asked = m["cpu_s"].get(pool, 0.0), m["stand_in_s"].get(pool, 0.0), m["requests_of"].get(pool, 0)
        out.append(f"| {pool} ({owner}'s) | | | {cpu / n:.6f} | {stand_in / n:.6f} | {asked / n:.3f} | |")
    out += ["", "DynamoDB's units per email, by the function that asked:", ""]
    out += ["| function | operation | units per email |", "| --- | --- | ---: |"]
    for (fn, service, op), units in sorted(m["by_function"].items()):
        if service == "dynamodb" and units / n >= 0.001:
            out.append(f"| {fn} | {op} | {units / n:.4f} |")
    first = priced[0]
    out += [
        "",
        f"Priced at the `{first['stage']}` stage's memory sizes; a month of {first['emails']:,.0f} emails from "
        f"{first['tenants']:,} tenants ({CAMPAIGNS_A_MONTH} campaigns each), each tenant sending at the rate "
        "of the column.",
        "",
        "| USD | " + " | ".join(f"{p['rate']:g}/s" for p in priced) + " |",
    ]
    out.append("| --- |" + " ---: |" * len(priced))
    for k in sorted(first["usd"]):
        out.append(f"| {k} | " + " | ".join(f"{p['usd'][k]:,.2f}" for p in priced) + " |")
    out.append("| **per million emails** | " + " | ".join(f"**{p['usd_per_million']:,.2f}**" for p in priced) + " |")
    for k in first["usd_fixed_per_month"]:
        out.append(f"| {k}, a month | " + " | ".join(f"{p['usd_fixed_per_month'][k]:,.2f}" for p in priced) + " |")
    out.append("| **moonsend, the month** | " + " | ".join(f"**{p['usd_total']:,.2f}**" for p in priced) + " |")
    out.append("| SES itself | " + " | ".join(f"{p['ses_usd']:,.2f}" for p in priced) + " |")
    out.append("| a tenant idle all month | " + " | ".join(f"{p['usd_idle_tenant_month']:,.6f}" for p in priced) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tenants", type=int, default=10)
    ap.add_argument("--recipients", type=int, default=2000)
    ap.add_argument("--per-message", type=int, default=200)
    ap.add_argument("--webhooks", type=int, default=3, help="how many of the tenants have a webhook endpoint")
    ap.add_argument("--markdown", action="store_true", help="print BENCHMARKS.md tables instead of JSON")
    ap.add_argument("--rate", type=float, default=14.0, help="each tenant's ratePerSecond in the measured run")
    ap.add_argument("--stage", default="prod", help="whose memory sizes price Lambda (.chalice/config.json)")
    ap.add_argument("--report", type=Path, help="also write the Markdown tables here (bench/run.py)")
    args = ap.parse_args()
    m = run(args.tenants, args.recipients, args.per_message, args.webhooks, args.rate)
    if not m["drained"]:
        print("the pipeline did not drain: figures would be partial", file=sys.stderr)
        return 1
    priced = [model(m, rate=r, stage=args.stage) for r in (1.0, 14.0, 100.0, 1000.0)]
    if args.report:
        args.report.write_text(markdown(m, priced) + "\n")
    if args.markdown:
        print(markdown(m, priced))
    else:
        m["calls"] = {"/".join(k): v for k, v in sorted(m["calls"].items())}
        m["billed"] = {"/".join(k): v for k, v in sorted(m["billed"].items())}
        m["by_function"] = {"/".join(k): v for k, v in sorted(m["by_function"].items())}
        print(json.dumps({"measured": m, "priced": priced}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
