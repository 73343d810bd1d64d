"""send_emails' CPU per email, split by part: the real drainer against a stub AWS in another process.

The drainer is the one `wiring` builds (real ledger, campaign counters, suppressions, the reputation
guard's counting ahead, campaign control, SES client, MIME, limiter, logging), every AWS call going over
HTTP to `bench/stub_aws.py` in its own process, which answers in AWS's shapes and does nothing else: the
CPU this process spends is the client's. Only the tenant registry is in memory (a send reads it from a
30-second cache). The rate is set far above what one process sends, so the limiter never waits.

CPU per email is this process's CPU time over a drain of `--emails`. The split comes from a second
drain under a CPU-time profiler in every thread (which slows it; only the shares are used), each
function's own time charged to a part by its file (a C function's, such as str.join or a socket's send,
to its callers'): botocore (with urllib3, http.client, sockets), pynamodb,
MIME (stdlib email and ours), the limiter, logging, threads and queues, the rest of ours, the rest.

    python bench/cpu_per_email.py [--emails 3000] [--report FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PARTS = (  # (part, substrings of a file path), the first that matches wins
    ("botocore (per call)", ("/botocore/", "/urllib3/", "/http/client.py", "/socket.py", "/ssl.py", "/s3transfer/")),
    ("pynamodb", ("/pynamodb/",)),
    ("MIME", ("/email/", "chalicelib/send/mime.py", "/quopri.py", "/base64.py")),
    ("limiter", ("chalicelib/send/rate_limiter.py",)),
    ("logging", ("/logging/", "chalicelib/core/log.py", "aws_lambda_powertools")),
    ("threads and queues", ("/threading.py", "/concurrent/", "/queue.py")),
    ("moonsend, the rest", ("chalicelib/",)),
)
BODY = (
    "<html><body><h1>Hello</h1>"
    + "<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>" * 30
    + "</body></html>"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _part(filename: str) -> str:
    for name, needles in PARTS:
        if any(n in filename for n in needles):
            return name
    return "other (json, hashing, uuid, ...)"


def _drainer(settings: Any) -> Any:
    from chalicelib import wiring
    from chalicelib.core.contract import Sender
    from chalicelib.stores.tenant_model import KeyVersion, Tenant
    from tests.fakes import FakeTenants

    c = wiring.Container(settings)
    sender = Sender("news@bench.example", "Bench", "us-east-1", "AKIABENCH", "secret", 100_000.0)
    tenant = Tenant("bench", "paid", sender, (KeyVersion(1, "AKIABENCH", "secret", "111111111111"),))
    c.__dict__["tenants"] = FakeTenants(tenant)  # a cached read in production: not what is measured
    return c.drainer


def _queued_template() -> str:
    from chalicelib.core.contract import QueuedEmail, Sender
    from chalicelib.stores.campaign_sender import SenderSnapshot
    from chalicelib.stores.tenant_model import KeyVersion

    sender = Sender("news@bench.example", "Bench", "us-east-1", "AKIABENCH", "secret", 100_000.0)
    snapshot = SenderSnapshot.of("paid", sender, KeyVersion(1, "AKIABENCH", "secret", "111111111111"))
    return QueuedEmail("bench", "paid", snapshot.queued_sender(), "c1", "Hello", BODY, "r{i}@example.org").to_json()


def _drain(drainer: Any, endpoint: str, n: int) -> tuple[float, float, int]:
    urllib.request.urlopen(f"{endpoint}/reset/{n}").read()
    cpu, wall = time.process_time(), time.perf_counter()
    result = drainer.drain("moonsend-bench-t-bench", remaining_ms=lambda: 600_000)
    return time.process_time() - cpu, time.perf_counter() - wall, result.sent


def _profiled(drainer: Any, endpoint: str, n: int) -> dict[str, float]:
    """Each part's share of the CPU, from a drain profiled in every thread (CPU time, not wall time)."""
    profiles: list[cProfile.Profile] = []

    def start(*_a: Any) -> None:
        p = cProfile.Profile(time.thread_time)
        profiles.append(p)
        sys.setprofile(None)
        p.enable()

    main = cProfile.Profile(time.thread_time)
    threading.setprofile(start)
    main.enable()
    try:
        _drain(drainer, endpoint, n)
    finally:
        main.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
    shares: dict[str, float] = {}
    for p in [main, *profiles]:
        for (filename, _line, _fn), (_cc, _nc, tottime, _ct, callers) in pstats.Stats(p).stats.items():  # type: ignore[attr-defined]
            if filename == "~" and callers:  # a C function (str.join, socket.sendall): its callers' part
                for (caller_file, _l, _f), timing in callers.items():
                    shares[_part(caller_file)] = shares.get(_part(caller_file), 0.0) + timing[2]
                continue
            shares[_part(filename)] = shares.get(_part(filename), 0.0) + tottime
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--emails", type=int, default=3000)
    ap.add_argument("--report", type=Path)
    args = ap.parse_args()
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    stub = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "stub_aws.py"), str(port), "0", _queued_template()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stub.stdout is not None and stub.stdout.readline().strip() == "ready"
        env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        os.environ.update(env)
        from chalicelib.core.config import Settings

        settings = Settings.from_env(
            {
                **os.environ,
                "MOONSEND_STAGE": "bench",
                "MOONSEND_MAX_RATE": "100000",
                "MOONSEND_DRAINER_MAX_RATE": "100000",  # one drainer, never held back by its limiter
                "MOONSEND_LONG_POLL_SECONDS": "0",
                "MOONSEND_SES_EVENTS": "0",
                "MOONSEND_LINK_SECRET": "bench-link-secret-0123456789",
            }
        )
        drainer = _drainer(settings)
        _drain(drainer, endpoint, 300)  # clients made, connections opened, modules warm
        cpu, wall, sent = _drain(drainer, endpoint, args.emails)
        assert sent == args.emails, f"sent {sent} of {args.emails}"
        shares = _profiled(drainer, endpoint, min(args.emails, 1500))
    finally:
        stub.kill()
    per_email_ms = cpu * 1000 / args.emails
    result = {
        "emails": args.emails,
        "cpu_ms_per_email": round(per_email_ms, 3),
        "emails_per_cpu_second": round(args.emails / cpu),
        "wall_emails_per_s": round(args.emails / wall),
        "parts_ms_per_email": {k: round(v * per_email_ms, 3) for k, v in shares.items()},
    }
    print(json.dumps(result, indent=2))
    if args.report:
        rows = "\n".join(f"| {k} | {v:.3f} | {shares[k]:.0%} |" for k, v in result["parts_ms_per_email"].items())
        args.report.write_text(
            f"{args.emails:,} emails, one drainer, every AWS call over HTTP to a stub in another process: "
            f"**{per_email_ms:.2f} ms of CPU per email** ({result['emails_per_cpu_second']:,} emails per CPU "
            f"second; {result['wall_emails_per_s']:,}/s wall on this machine).\n\n"
            "| part | ms per email | share |\n| --- | ---: | ---: |\n" + rows + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
