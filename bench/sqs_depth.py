"""SQS throughput of the local stack at depth, against moto's own SQS model.

Over HTTP on loopback, as a producer uses it (the stack in one process, the client in another): fill a
queue to DEPTH with SendMessageBatch, then measure enqueue (SendMessageBatch of 10) and receive+delete
(ReceiveMessage of 10 + DeleteMessageBatch) at that depth. moto's stock model is measured at smaller
depths only: it slows down quadratically and would take hours at 100,000.

    python bench/sqs_depth.py [--depth 100000] [--ops 5000] [--stock-depths 500,2000]
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _fill(sqs, url: str, n: int, clients: int = 1) -> float:
    body = "x" * 512
    calls = n // 10

    def work(share: int) -> None:
        for _ in range(share):
            sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(j), "MessageBody": body} for j in range(10)])

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(work, [calls // clients + (i < calls % clients) for i in range(clients)]))
    return calls * 10 / (time.perf_counter() - started)


def _drain(sqs, url: str, n: int, clients: int = 1) -> float:
    done = 0
    lock = threading.Lock()

    def work(_: int) -> None:
        nonlocal done
        while True:
            with lock:
                if done >= n:
                    return
            msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300).get("Messages")
            if not msgs:
                return
            entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
            sqs.delete_message_batch(QueueUrl=url, Entries=entries)
            with lock:
                done += len(msgs)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(work, range(clients)))
    return done / (time.perf_counter() - started)


def measure(depth: int, ops: int, fast: bool, clients: int = 2) -> dict[str, float]:
    """Run `moonsend up` in a child process (as a user does) and be its client from this one."""
    import boto3
    from botocore.config import Config

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "infra", "up", "--port", str(port), "--outbox", tmp, "--api-port", "0"]
        if not fast:
            cmd.append("--stock-sqs")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        try:
            while "ready" not in (line := proc.stdout.readline()):
                if not line:
                    raise RuntimeError("moonsend up did not start")
            sqs = boto3.client(
                "sqs",
                endpoint_url=f"http://127.0.0.1:{port}",
                region_name="us-east-1",
                aws_access_key_id="bench",
                aws_secret_access_key="bench",
                config=Config(retries={"total_max_attempts": 1}),
            )
            url = sqs.create_queue(QueueName="bench-depth")["QueueUrl"]
            fill_rate = _fill(sqs, url, depth, clients)
            enqueue = _fill(sqs, url, ops, clients)
            receive_delete = _drain(sqs, url, ops, clients)
            attrs_started = time.perf_counter()
            for _ in range(50):
                sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
            attrs = 50 / (time.perf_counter() - attrs_started)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    return {
        "depth": depth,
        "fill_per_s": fill_rate,
        "enqueue_per_s": enqueue,
        "receive_delete_per_s": receive_delete,
        "get_attributes_per_s": attrs,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=100_000)
    ap.add_argument("--ops", type=int, default=5_000)
    ap.add_argument("--stock-depths", default="500,2000")
    ap.add_argument("--clients", type=int, default=2, help="concurrent client threads (a drainer pipelines)")
    ap.add_argument("--one", choices=["fast", "stock"], help=argparse.SUPPRESS)
    ap.add_argument("--report", type=Path, help="also write the results as a Markdown table here (bench/run.py)")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.depth, args.ops, args.one == "fast", args.clients)))
        return 0
    rows = []
    for depth in [int(d) for d in args.stock_depths.split(",") if d]:
        for kind in ("stock", "fast"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    kind,
                    "--depth",
                    str(depth),
                    "--ops",
                    str(min(args.ops, 200)),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append((kind, json.loads(out.stdout.strip().splitlines()[-1])))
    rows.append(("fast", measure(args.depth, args.ops, True, args.clients)))
    print(f"{'model':6} {'depth':>8} {'fill/s':>9} {'enqueue/s':>10} {'recv+del/s':>11} {'attrs/s':>8}")
    for kind, r in rows:
        print(
            f"{kind:6} {r['depth']:>8} {r['fill_per_s']:>9.0f} {r['enqueue_per_s']:>10.0f} "
            f"{r['receive_delete_per_s']:>11.0f} {r['get_attributes_per_s']:>8.0f}"
        )
    last = rows[-1][1]
    ok = last["enqueue_per_s"] >= 1000 and last["receive_delete_per_s"] >= 1000
    print(
        f"at depth {last['depth']}: enqueue {last['enqueue_per_s']:.0f}/s, receive+delete "
        f"{last['receive_delete_per_s']:.0f}/s: {'OK' if ok else 'BELOW 1,000/s'}"
    )
    if args.report:
        table = [
            "| model | depth | fill msg/s | enqueue msg/s | receive+delete msg/s | GetQueueAttributes req/s |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for kind, r in rows:
            table.append(
                f"| {'stock moto' if kind == 'stock' else 'local stack'} | {r['depth']:,} | {r['fill_per_s']:,.0f} "
                f"| {r['enqueue_per_s']:,.0f} | {r['receive_delete_per_s']:,.0f} | {r['get_attributes_per_s']:,.0f} |"
            )
        table.append("")
        table.append(
            f"Target: enqueue and receive+delete above 1,000/s at depth {last['depth']:,}: "
            f"{'met' if ok else 'NOT met'}."
        )
        args.report.write_text("\n".join(table) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
