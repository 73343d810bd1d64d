"""AWS requests per email, counted with a botocore event hook, and what they cost per million emails.

The local stack runs in a child process (`moonsend up`, as a user runs it); this process is the Lambda:
it runs precompile_email and then one send_emails drain with the app's own wiring, against the stack
over HTTP. A handler on botocore's `before-call` event, registered for every session this process
creates (boto3's and pynamodb's), counts each request by service and operation, so the figures are what
the code really calls, not an estimate. The drain holds the queue's lease, so the stack's own alarm
does not start a second drainer.

    python bench/requests_per_email.py [--recipients 1000] [--per-message 200]

Prices: us-east-1 public on-demand prices (2026), free tiers ignored; SES itself ($0.10 per 1,000) is
shown apart. Lambda compute is not counted here (it depends on the rate: see BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import botocore.handlers  # noqa: E402

# USD per request (DynamoDB: per request unit; every item here is under 1 KB, so one unit per item).
PRICE = {
    "sqs": 0.40 / 1e6,
    "sns": 0.50 / 1e6,
    "dynamodb_write": 0.625 / 1e6,  # on-demand write request unit
    "dynamodb_read": 0.125 / 1e6,  # on-demand read request unit (strongly consistent item up to 4 KB)
    "s3_put": 0.005 / 1e3,
    "s3_get": 0.0004 / 1e3,
    "cloudwatch": 0.01 / 1e3,  # API requests (PutMetricAlarm, GetMetricData ...)
    "lambda_invoke": 0.20 / 1e6,
    "ses_email": 0.10 / 1e3,
}
DYNAMODB_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}

_counts: Counter[tuple[str, str]] = Counter()
_units: Counter[str] = Counter()
_lock = threading.Lock()
_on = threading.Event()


def _count(model: Any, params: dict[str, Any], **_kw: Any) -> None:
    """botocore `before-call` handler: one count per API request this process makes."""
    if not _on.is_set():
        return
    service = model.service_model.endpoint_prefix
    op = model.name
    with _lock:
        _counts[(service, op)] += 1
        if service == "dynamodb":
            if op in DYNAMODB_WRITES:
                _units["dynamodb_write"] += 1
            elif op == "BatchGetItem":
                keys = sum(len(t.get("Keys", [])) for t in params.get("RequestItems", {}).values())
                _units["dynamodb_read"] += keys * 0.5  # eventually consistent: half a unit per item
            elif op == "BatchWriteItem":
                _units["dynamodb_write"] += sum(len(v) for v in params.get("RequestItems", {}).values())
            else:
                _units["dynamodb_read"] += 1 if params.get("ConsistentRead") else 0.5
        elif service == "s3":
            _units["s3_put" if op in ("PutObject", "DeleteObject") else "s3_get"] += 1
        elif service in ("sqs", "sns", "monitoring"):
            _units["cloudwatch" if service == "monitoring" else service] += 1
        elif service == "lambda":
            _units["lambda_invoke"] += 1


# Every botocore session created from now on (boto3's, pynamodb's) registers this handler.
botocore.handlers.BUILTIN_HANDLERS.append(("before-call", _count))


def _snapshot() -> tuple[Counter[tuple[str, str]], Counter[str]]:
    with _lock:
        out = Counter(_counts), Counter(_units)
        _counts.clear()
        _units.clear()
    return out


def _per_email(counts: Counter[Any], n: int) -> dict[str, float]:
    return {(k if isinstance(k, str) else f"{k[0]}:{k[1]}"): round(v / n, 4) for k, v in sorted(counts.items())}


def _cost_per_million(units: Counter[str], n: int) -> dict[str, float]:
    return {k: round(v / n * 1e6 * PRICE[k], 2) for k, v in sorted(units.items())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipients", type=int, default=1000)
    ap.add_argument("--per-message", type=int, default=200)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key, secret = "AKIABENCHREQUESTS", "bench-secret"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "infra",
            "up",
            "--port",
            str(port),
            "--outbox",
            tmp,
            "--api-port",
            "0",
            "--ses-latency-ms",
            "5",
        ]
        cmd += ["--ses-account", f"{key}=1000"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        try:
            while "ready" not in (line := proc.stdout.readline()):  # type: ignore[union-attr]
                if not line:
                    raise RuntimeError("moonsend up did not start")
            return _measure(port, key, secret, args.recipients, args.per_message)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def _measure(port: int, key: str, secret: str, n: int, per_message: int) -> int:
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "AKIAMOONSENDPLATFORM",
            "AWS_SECRET_ACCESS_KEY": "moonsend-local-platform-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "MOONSEND_STAGE": "local",
            "MOONSEND_LONG_POLL_SECONDS": "1",
            "MOONSEND_LOG_LEVEL": "WARNING",
            "POWERTOOLS_METRICS_DISABLED": "true",
        }
    )
    import boto3

    from chalicelib import wiring
    from chalicelib.routing import queue_for
    from infra.producer import CampaignSpec, messages

    c = wiring.container()
    sender = {
        "region": "us-east-1",
        "apiKey": key,
        "apiSecret": secret,
        "ratePerSecond": "1000",
        "emailAddress": "news@bench.example",
        "fromName": "Bench",
    }
    boto3.client("sesv2", aws_access_key_id=key, aws_secret_access_key=secret).create_email_identity(
        EmailIdentity=sender["emailAddress"]
    )
    queue = queue_for(c.settings.resources, "bench", "paid")
    lease = c.leases.acquire(queue, 600_000)  # the stack's alarm-started drain finds it taken and exits
    assert lease is not None
    people = [{"email": f"r{i}@example.org", "metadata": {"name": f"N{i}"}} for i in range(n)]
    bodies = list(
        messages(CampaignSpec("bench", sender, "Hi {{ name }}", "<p>Dear {{ name }}</p>", "c1"), people, per_message)
    )
    _on.set()
    for body in bodies:
        c.precompiler.handle(body)
    pre_counts, pre_units = _snapshot()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = c.drainer.drain(queue, remaining_ms=lambda: 600_000)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    _on.clear()
    send_counts, send_units = _snapshot()
    c.leases.release(lease)
    assert result.sent == n, result
    pre_units["sns"] += len(bodies)  # the producer's publishes (one per message of `per_message`)
    pre_units["lambda_invoke"] += len(bodies)  # SNS invokes precompile_email once per message
    send_units["ses_email"] += n
    total_units = pre_units + send_units
    ses = {"ses_email": total_units.pop("ses_email")}
    report = {
        "emails": n,
        "recipients_per_message": per_message,
        "precompile_requests_per_email": _per_email(pre_counts, n),
        "send_requests_per_email": _per_email(send_counts, n),
        "usd_per_million_emails_excluding_ses": _cost_per_million(total_units, n),
        "usd_per_million_excluding_ses_total": round(sum(_cost_per_million(total_units, n).values()), 2),
        "ses_usd_per_million": _cost_per_million(Counter(ses), n)["ses_email"],
        # This process's CPU in the drain (our code plus botocore's signing, serialising and parsing of
        # every request): the most one Python process (one GIL) can send per second is about 1000 / this.
        "drain_cpu_ms_per_email": round(cpu / n * 1000, 2),
        "drain_wall_s": round(wall, 2),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
