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

The queue holds email as precompile_email queues it, composed: the drainer only dates it, and what
composing costs precompile is reported beside. In turn with those drains, the same number of email
queued as before precompile composed it (HTML, which the drainer composes), for the ratio of the two
measured in one run on the same machine; the reported figure is the median of `--rounds` drains.
`--html-only` drains HTML only: run from a git worktree of older code (with this file, bench/queued.py and
bench/stub_aws.py copied in), it gives the figure before.

    python bench/cpu_per_email.py [--emails 3000] [--rounds 5] [--html-only] [--report FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import socket
import statistics
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
    ("MIME", ("/email/", "chalicelib/core/mime.py", "/quopri.py")),
    ("limiter", ("chalicelib/send/rate_limiter.py",)),
    ("logging", ("/logging/", "chalicelib/core/log.py", "aws_lambda_powertools")),
    ("threads and queues", ("/threading.py", "/concurrent/", "/queue.py")),
    ("moonsend, the rest", ("chalicelib/",)),
)
# Files whose time is their callers' part: `email` serves http.client's header parsing and our MIME alike,
# base64 botocore's encoding of the raw message.
SHARED = ("/email/", "/base64.py")
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
    from chalicelib.stores.ports.tenants import KeyVersion, Tenant
    from tests.fakes import FakeTenants

    c = wiring.Container(settings)
    sender = Sender("news@bench.example", "Bench", "us-east-1", "AKIABENCH", "secret", 100_000.0)
    tenant = Tenant("bench", "paid", sender, (KeyVersion(1, "AKIABENCH", "secret", "111111111111"),))
    c.__dict__["tenants"] = FakeTenants(tenant)  # a cached read in production: not what is measured
    return c.drainer


def _queued_template(composed: bool) -> str:
    """The queued email the stub serves: composed, as precompile queues it, or HTML only (queued before)."""
    from bench.queued import queued_email
    from chalicelib.core.contract import Sender
    from chalicelib.stores.ports.campaigns import SenderSnapshot
    from chalicelib.stores.ports.tenants import KeyVersion

    sender = Sender("news@bench.example", "Bench", "us-east-1", "AKIABENCH", "secret", 100_000.0)
    snapshot = SenderSnapshot.of("paid", sender, KeyVersion(1, "AKIABENCH", "secret", "111111111111"))
    return queued_email(snapshot.queued_sender(), "r{i}@example.org", BODY, composed=composed)


def _compose(email: Any) -> str:
    from chalicelib.core.mime import compose

    return compose(email)


def _compose_cpu_ms(n: int = 2000) -> float:
    """What composing one email costs precompile_email (moved there from the drainer), in this process."""
    from bench.queued import LINKS
    from chalicelib.core.mime import OutgoingEmail

    to = "r1@example.org"
    url = LINKS.unsubscribe_url("bench", "c1", to)
    email = OutgoingEmail("news@bench.example", "Bench", to, "Hello", BODY, "bench", "c1", url)
    _compose(email)
    cpu = time.process_time()
    for _ in range(n):
        _compose(email)
    return (time.process_time() - cpu) * 1000 / n


def _drain(drainer: Any, endpoint: str, n: int, template: int = 0) -> tuple[float, float, int]:
    urllib.request.urlopen(f"{endpoint}/reset/{n}/{template}").read()
    cpu, wall = time.process_time(), time.perf_counter()
    result = drainer.drain("moonsend-bench-t-bench", remaining_ms=lambda: 600_000)
    return time.process_time() - cpu, time.perf_counter() - wall, result.sent


def _calls(endpoint: str) -> dict[str, int]:
    """The requests the stub answered since its last reset, by operation."""
    return dict(json.loads(urllib.request.urlopen(f"{endpoint}/calls").read()))


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
        for part, ms in _charged(pstats.Stats(p).stats).items():  # type: ignore[attr-defined]
            shares[part] = shares.get(part, 0.0) + ms
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}


def _charged(stats: dict[Any, Any]) -> dict[str, float]:
    """Each function's own time charged to the part of the code that called it in, where its file does not say.

    A C function (str.join, a socket's send) and the stdlib `email` package belong to whoever called them:
    http.client parses every HTTP response's headers with `email` (botocore's per-call cost), our MIME
    composes with it. Such a function's time is split among its callers by the time each call took, back
    through callers of the same kind until a file that names its part."""
    owners: dict[Any, dict[str, float]] = {}

    def owner(key: Any) -> dict[str, float]:
        if key[0] != "~" and not any(n in key[0] for n in SHARED):
            return {_part(key[0]): 1.0}
        if key in owners:
            return owners[key]
        owners[key] = {}  # a cycle back here adds nothing
        callers = stats[key][4] if key in stats else {}
        out: dict[str, float] = {}
        for caller, timing in callers.items():
            for part, fraction in owner(caller).items():
                out[part] = out.get(part, 0.0) + timing[2] * fraction
        total = sum(out.values())
        owners[key] = {k: v / total for k, v in out.items()} if total else {_part(key[0]): 1.0}
        return owners[key]

    charged: dict[str, float] = {}
    for key, (_cc, _nc, tottime, _ct, _callers) in stats.items():
        for part, fraction in owner(key).items():
            charged[part] = charged.get(part, 0.0) + tottime * fraction
    return charged


MODES = ("composed", "html")


def _settings() -> Any:
    from chalicelib.core.config import Settings

    return Settings.from_env(
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


def _measure(
    endpoint: str, modes: tuple[str, ...], emails: int, rounds: int
) -> tuple[dict[str, list[float]], float, dict[str, float], dict[str, int]]:
    """CPU ms per email of each mode (the stub's template of the same index) over `rounds` drains each,
    taken in turn so that the machine's mood falls on both alike; the first mode's median wall rate, its
    split, and the requests of its last drain by operation."""
    drainer = _drainer(_settings())
    per_email: dict[str, list[float]] = {m: [] for m in modes}
    walls: list[float] = []
    calls: dict[str, int] = {}
    for k, _mode in enumerate(modes):
        _drain(drainer, endpoint, 300, k)  # clients made, connections opened, modules warm
    for _ in range(rounds):
        for k, mode in enumerate(modes):
            cpu, wall, sent = _drain(drainer, endpoint, emails, k)
            assert sent == emails, f"sent {sent} of {emails}"
            per_email[mode].append(cpu * 1000 / emails)
            if k == 0:
                walls.append(emails / wall)
                calls = _calls(endpoint)
    return per_email, statistics.median(walls), _profiled(drainer, endpoint, min(emails, 1500)), calls


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--emails", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5, help="drains of each kind of queued email, in turn")
    ap.add_argument(
        "--html-only",
        action="store_true",
        help="only email queued as HTML: runs against code from before precompile composed email",
    )
    ap.add_argument("--report", type=Path)
    args = ap.parse_args()
    modes = ("html",) if args.html_only else MODES
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    templates = [_queued_template(mode == "composed") for mode in modes]
    stub = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "stub_aws.py"), str(port), "0", *templates],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stub.stdout is not None and stub.stdout.readline().strip() == "ready"
        os.environ.update(
            {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1",
                # send_emails' own setting on a deployed stage: every email carries unsubscribe links.
                "MOONSEND_API_URL": "https://api.moonsend.example",
            }
        )
        per_email, wall_rate, shares, calls = _measure(endpoint, modes, args.emails, args.rounds)
    finally:
        stub.kill()
    medians = {m: statistics.median(v) for m, v in per_email.items()}
    first = medians[modes[0]]
    result: dict[str, Any] = {
        "emails": args.emails,
        "rounds": args.rounds,
        "queued": modes[0],
        "cpu_ms_per_email": round(first, 3),
        "each_drain_ms_per_email": {m: [round(v, 3) for v in per_email[m]] for m in modes},
        "emails_per_cpu_second": round(1000 / first),
        "wall_emails_per_s": round(wall_rate),
        "parts_ms_per_email": {k: round(v * first, 3) for k, v in shares.items()},
        "requests_per_email": {op: round(n / args.emails, 3) for op, n in sorted(calls.items(), key=lambda kv: -kv[1])},
    }
    if not args.html_only:
        result["cpu_ms_per_email_composing_at_send"] = round(medians["html"], 3)
        result["drainer_cpu_ratio"] = round(first / medians["html"], 3)
        result["compose_ms_per_email_in_precompile"] = round(_compose_cpu_ms(), 3)
    print(json.dumps(result, indent=2))
    if args.report:
        args.report.write_text(_report(args, result, shares))
    return 0


def _report(args: argparse.Namespace, result: dict[str, Any], shares: dict[str, float]) -> str:
    first = result["cpu_ms_per_email"]
    head = (
        f"{args.emails:,} emails a drain, one drainer, every AWS call over HTTP to a stub in another process, "
        f"medians of {args.rounds} drains: **{first:.2f} ms of CPU per email**"
    )
    if args.html_only:
        head += f" queued as HTML ({result['emails_per_cpu_second']:,} emails per CPU second)."
    else:
        head += (
            f" as precompile queues it, composed ({result['emails_per_cpu_second']:,} emails per CPU second; "
            f"{result['wall_emails_per_s']:,}/s wall on this machine), against "
            f"{result['cpu_ms_per_email_composing_at_send']:.2f} ms for email the drainer composes itself "
            f"(queued before precompile composed it), in turn in the same run: **{result['drainer_cpu_ratio']:.2f}**. "
            f"Composing costs precompile_email {result['compose_ms_per_email_in_precompile']:.2f} ms an email."
        )
    rows = "\n".join(f"| {k} | {v:.3f} | {shares[k]:.0%} |" for k, v in result["parts_ms_per_email"].items())
    requests = result["requests_per_email"]
    calls = ", ".join(f"{op} {n:.2f}" for op, n in requests.items())
    return (
        head
        + f"\n\n| part ({result['queued']}) | ms per email | share |\n| --- | ---: | ---: |\n"
        + rows
        + f"\n\nRequests per email: **{sum(requests.values()):.2f}** ({calls}).\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
