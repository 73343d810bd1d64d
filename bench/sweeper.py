"""Queues the sweeper checks per second: one depth check at a time against the pool (issue 36).

Each depth check (GetQueueAttributes) is a round trip of about `--latency-ms` (5 ms, as SQS's from a Lambda
in its region), so checked one at a time, a sweep with 50 s of its minute gets through about 10,000
queues at best, and fewer as the round trip lengthens. Two clients:

- `fake`: a client object whose depth call sleeps the latency; the figure is the sweeper's own overhead
  and concurrency, nothing of botocore;
- `botocore`: the real SQS client against a stand-in on loopback (a child process) that answers ListQueues
  and GetQueueAttributes after the latency; the CPU time per check is then botocore's and the sweeper's,
  which is what bounds the pool on a small Lambda (sweep_queues has 256 MB: about 0.15 of a vCPU).

No queue has work (leases and drain starts are not what is measured). Usage:

    python bench/sweeper.py [--queues 2000] [--latency-ms 5] [--workers 1,8,16,24,32] [--client fake,botocore]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chalicelib.core import log  # noqa: E402
from chalicelib.core.config import Settings  # noqa: E402
from chalicelib.jobs.sweeper import Sweeper, SweepLimits  # noqa: E402
from tests.fakes.queues import Said  # noqa: E402

SETTINGS = Settings.from_env({"MOONSEND_STAGE": "bench"})
ACCOUNT_URL = "http://127.0.0.1:{port}/123456789012"
LAMBDA_256_MB_VCPU = 256 / 1769  # Lambda gives a whole vCPU at 1,769 MB, in proportion below


def queue_names(n: int) -> list[str]:
    return [f"{SETTINGS.resources.tenant_queue_prefix}u{i:06d}" for i in range(n)]


class FakeSqs:
    """ListQueues and a GetQueueAttributes that takes `latency_s`, as a round trip does."""

    def __init__(self, names: list[str], latency_s: float) -> None:
        self._urls = [f"https://sqs.us-east-1.amazonaws.com/123456789012/{n}" for n in names]
        self._latency_s = latency_s

    def get_paginator(self, _name: str) -> Any:
        pages = [{"QueueUrls": self._urls[i : i + 1000]} for i in range(0, len(self._urls), 1000)]

        class Pages:
            def paginate(self, **_kw: Any) -> list[dict[str, Any]]:
                return pages

        return Pages()

    def get_queue_attributes(self, **_kw: Any) -> dict[str, Any]:
        time.sleep(self._latency_s)
        return {"Attributes": {"ApproximateNumberOfMessages": "0"}}


class StandIn(BaseHTTPRequestHandler):
    """SQS's JSON protocol, two operations: every queue is empty."""

    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects
    disable_nagle_algorithm = True
    names: ClassVar[list[str]] = []
    latency_s = 0.005
    port = 0

    def log_message(self, *_args: Any) -> None:
        return None

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.headers.get("X-Amz-Target", "").endswith("ListQueues"):
            body = self._list(int(req.get("NextToken") or 0), int(req.get("MaxResults") or 1000))
        else:
            time.sleep(self.latency_s)
            body = {"Attributes": {"ApproximateNumberOfMessages": "0"}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _list(self, start: int, most: int) -> dict[str, Any]:
        base = ACCOUNT_URL.format(port=self.port)
        page = {"QueueUrls": [f"{base}/{n}" for n in self.names[start : start + most]]}
        if start + most < len(self.names):
            page["NextToken"] = str(start + most)
        return page


def serve(port: int, queues: int, latency_ms: float) -> None:
    StandIn.names, StandIn.latency_s, StandIn.port = queue_names(queues), latency_ms / 1000, port
    ThreadingHTTPServer(("127.0.0.1", port), StandIn).serve_forever()


def botocore_client(port: int, workers: int) -> Any:
    import boto3
    from botocore.config import Config

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    config = Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=max(64, workers))
    return boto3.client("sqs", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}", config=config)


class NoLeases:
    def holder(self, _queue: str) -> None:
        return None


def measure(sqs: Any, queues: int, workers: int, warm: bool) -> dict[str, float]:
    every = Said(set(queue_names(queues)))  # every queue in use, as on a day all the stage's tenants send (the most)
    sweeper = Sweeper(SETTINGS, sqs, NoLeases(), every, lambda _q: None, limits=SweepLimits(workers))  # type: ignore[arg-type]
    if warm:
        sweeper.run()  # the client's connections opened, its first requests' setup done
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = sweeper.run()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    per_s = result.checked / wall
    return {
        "workers": workers,
        "checked": result.checked,
        "wall_s": round(wall, 2),
        "queues_per_s": round(per_s),
        "in_50_s": round(per_s * 50),
        "cpu_ms_per_check": round(cpu / result.checked * 1000, 3),
    }


def run_client(client: str, queues: int, latency_ms: float, workers: list[int]) -> list[dict[str, Any]]:
    if client == "fake":
        make: Callable[[int], Any] = lambda _w: FakeSqs(queue_names(queues), latency_ms / 1000)  # noqa: E731
        return [{"client": client, **measure(make(w), queues, w, warm=False)} for w in workers]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, __file__, "--serve", str(port), "--queues", str(queues), "--latency-ms", str(latency_ms)]
    server = subprocess.Popen(cmd, cwd=ROOT)
    try:
        _wait_for(port)
        return [{"client": client, **measure(botocore_client(port, w), queues, w, warm=True)} for w in workers]
    finally:
        server.terminate()
        server.wait(10)


def _wait_for(port: int) -> None:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the stand-in did not start")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queues", type=int, default=2000)
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--workers", default="1,8,16,24,32")
    ap.add_argument("--client", default="fake,botocore")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the stand-in's own process
    ap.add_argument("--report", type=Path, help="also write the results as a Markdown table here (bench/run.py)")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.queues, args.latency_ms)
        return 0
    log.set_level("WARNING")  # a sweep's own summary line each run
    workers = [int(w) for w in args.workers.split(",")]
    print(f"{args.queues:,} queues, depth check {args.latency_ms} ms; 'in 50 s': queues a sweep checks in its time")
    header = ("client", "workers", "wall", "queues/s", "in 50 s", "CPU/check", "256 MB cap/s")
    print(f"{header[0]:<9} " + " ".join(f"{h:>{w}}" for h, w in zip(header[1:], (7, 8, 9, 9, 10, 12), strict=True)))
    rows = [
        "| client | workers | queues/s | checked in 50 s | CPU per check | checks/s at 256 MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for client in args.client.split(","):
        for r in run_client(client, args.queues, args.latency_ms, workers):
            cap = LAMBDA_256_MB_VCPU * 1000 / r["cpu_ms_per_check"]
            print(
                f"{r['client']:<9} {r['workers']:>7} {r['wall_s']:>7}s {r['queues_per_s']:>9,} {r['in_50_s']:>9,}"
                f" {r['cpu_ms_per_check']:>8} ms {cap:>12,.0f}"
            )
            rows.append(
                f"| {r['client']} | {r['workers']} | {r['queues_per_s']:,} | {r['in_50_s']:,} "
                f"| {r['cpu_ms_per_check']} ms | {cap:,.0f} |"
            )
    if args.report:
        intro = f"{args.queues:,} queues, a depth check of {args.latency_ms:g} ms each.\n\n"
        args.report.write_text(intro + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
