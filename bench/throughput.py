"""End-to-end throughput of the local pipeline with no rate limit: emails per second on this machine.

One paid tenant per `--tenants`, each with its own SES account allowing 100,000 per second and a
`ratePerSecond` of 1,000, publishes its share of `--recipients` through PrecompileEmail; the clock runs
from the first publish until every queue is drained and every SES event handled. Everything runs in
this process, as `make demo` runs it: moto's server, the gateway, the SES stand-in (50 ms latency) and
every handler share one Python process, so the figure is what the local stack sustains, not AWS
(where each Lambda has its own CPU). CPU per email is this process's CPU time over the emails.
With `--worker-processes` each function runs in processes of its own (infra.local.workers), its AWS
calls over loopback: CPU per email is then this process's and every worker's. `--warm N` first sends N
emails of another tenant, unmeasured, so that the figures are a warm stack's (worker processes started,
clients made, modules loaded).

    python bench/throughput.py [--recipients 2000] [--tenants 1] [--worker-processes] [--warm 0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(
    recipients: int,
    tenants: int,
    latency_ms: float,
    *,
    fast_dynamodb: bool = True,
    worker_processes: bool = False,
    warm: int = 0,
) -> dict[str, float | int | bool | str]:
    os.environ.setdefault("MOONSEND_LOG_LEVEL", "WARNING")
    from infra.local.stack import LocalStack, StackConfig
    from infra.producer import CampaignSpec, messages, publish

    with tempfile.TemporaryDirectory() as tmp:
        cfg = StackConfig(
            port=0,
            api_port=0,
            outbox=Path(tmp),
            ses_latency_ms=latency_ms,
            fast_dynamodb=fast_dynamodb,
            worker_processes=worker_processes,
        )
        with LocalStack(cfg) as stack:
            assert stack.settings is not None and stack.ses is not None
            sns = stack.client("sns")
            topic = stack.topic_arns[stack.settings.resources.precompile_topic.name]
            specs = []
            for k in range(tenants):
                sender = stack.paid_sender(f"t{k}", rate=1000, ses_max_rate=100_000)
                specs.append(
                    CampaignSpec(f"t{k}", sender, "Hi {{ name }}", "<p>Hello {{ name }} {{ surname }}</p>", "c")
                )
            share = recipients // tenants
            if warm:
                _warm_up(stack, topic, warm)
            before = sum(1 for _ in Path(tmp).rglob("*.eml"))
            workers = stack.runner.workers if stack.runner is not None else None
            wall0, cpu0 = time.monotonic(), time.process_time()
            workers0 = workers.cpu_s() if workers is not None else 0.0
            started0 = workers.started if workers is not None else 0
            for k, spec in enumerate(specs):
                people = [
                    {"email": f"r{i}@x{k}.example", "metadata": {"name": "A", "surname": "B"}} for i in range(share)
                ]
                publish(sns, topic, messages(spec, people))
            drained = stack.wait_until_drained(timeout=3600, settle_s=1.0, poll_s=0.5)
            wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
            workers_cpu = workers.cpu_s() - workers0 if workers is not None else 0.0
            started = workers.started - started0 if workers is not None else 0
            sent = sum(1 for _ in Path(tmp).rglob("*.eml")) - before
    emails = share * tenants
    return {
        "drained": drained,
        "emails": emails,
        "emails_in_outbox": sent,
        "tenants": tenants,
        "dynamodb": "short path" if fast_dynamodb else "moto's server layers",
        "functions": "worker processes" if worker_processes else "in the stack's process",
        "worker_processes_started": started,
        "wall_s": round(wall, 1),
        "emails_per_s": round(emails / wall, 2),
        "cpu_ms_per_email": round((cpu + workers_cpu) / emails * 1000, 1),
        "stack_cpu_ms_per_email": round(cpu / emails * 1000, 1),
        "workers_cpu_ms_per_email": round(workers_cpu / emails * 1000, 1),
    }


def _warm_up(stack: Any, topic: str, n: int) -> None:
    """Send `n` emails of a tenant of their own and wait until the stack is idle again."""
    from infra.producer import CampaignSpec, messages, publish

    sender = stack.paid_sender("warm", rate=1000, ses_max_rate=100_000)
    spec = CampaignSpec("warm", sender, "Hi {{ name }}", "<p>Hello {{ name }} {{ surname }}</p>", "c")
    people = [{"email": f"r{i}@warm.example", "metadata": {"name": "A", "surname": "B"}} for i in range(n)]
    publish(stack.client("sns"), topic, messages(spec, people))
    stack.wait_until_drained(timeout=3600, settle_s=1.0, poll_s=0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipients", type=int, default=2000)
    ap.add_argument("--tenants", type=int, default=1)
    ap.add_argument("--ses-latency-ms", type=float, default=50.0)
    ap.add_argument(
        "--stock-dynamodb", action="store_true", help="every DynamoDB call through moto's server layers (to compare)"
    )
    ap.add_argument(
        "--worker-processes", action="store_true", help="each function in processes of its own (infra.local.workers)"
    )
    ap.add_argument("--warm", type=int, default=0, help="emails sent first, unmeasured (a warm stack)")
    ap.add_argument("--report", type=Path, help="also write the results as a Markdown table here (bench/run.py)")
    args = ap.parse_args()
    result = run(
        args.recipients,
        args.tenants,
        args.ses_latency_ms,
        fast_dynamodb=not args.stock_dynamodb,
        worker_processes=args.worker_processes,
        warm=args.warm,
    )
    print(json.dumps(result, indent=2))
    if args.report:
        r = result
        args.report.write_text(
            "| emails | tenants | drained | wall | emails/s | CPU per email |\n"
            "| ---: | ---: | --- | ---: | ---: | ---: |\n"
            f"| {r['emails']:,} | {r['tenants']} | {'yes' if r['drained'] else 'NO'} | {r['wall_s']} s "
            f"| **{r['emails_per_s']}** | {r['cpu_ms_per_email']} ms |\n"
        )
    return 0 if result["drained"] and result["emails_in_outbox"] == result["emails"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
