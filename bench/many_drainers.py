"""One tenant at 1,000 emails a second: as many drainers as its rate needs, on one queue, never above it.

Each drainer runs in its own process, as each is its own Lambda on AWS: the real Drainer, whole (limiter,
thread pool, claims, campaign control, MIME, the outcome table), sending to the local stack's SES
stand-in in that process with 50 ms of latency per call. They receive from one queue, served to all of
them by a manager process with SQS's visibility semantics (tests/fakes/shared_queue.py). The number of
drainers is what the rate needs at `MOONSEND_DRAINER_MAX_RATE` (chalicelib.core.drainer_shares), each
sending its own band. SES allows twice the rate in every process, so that it hides no limiter that
sends too fast: the busiest window is measured on the times SES admitted each send, all drainers
together, where the promise counts.

    python bench/many_drainers.py [--rate 1000] [--seconds 10] [--latency-ms 50] [--drainer-max-rate N]

Exits non-zero if the achieved rate is below 0.95 of the target, any window holds more, or a recipient
was sent twice. Each drainer's limiter costs one SES latency per window (chalicelib.send.rate_limiter):
at 50 ms, at most 1/1.05 = 0.952 of the rate, whatever the number of drainers; one drainer alone reaches
0.951 (bench/send_rate.py), ten on two cores lose a little more to scheduling.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from multiprocessing.managers import BaseManager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MOONSEND_LOG_LEVEL", "WARNING")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")

from bench.queued import queued_email
from bench.send_rate import InProcessSes
from chalicelib.core.config import DRAINER_MAX_RATE, Settings
from chalicelib.core.contract import Sender
from chalicelib.core.drainer_shares import drainers_for, share
from chalicelib.stores.ports.campaigns import SenderSnapshot
from chalicelib.stores.ports.tenants import KeyVersion, Tenant
from infra.local.ses import SesStandIn
from tests.fakes import FakeTenants, parts
from tests.fakes.shared_queue import SharedSqs

QUEUE = "moonsend-bench-t-bench"
KEY = "AKIABENCHMANY"


class QueueServer(BaseManager):
    pass


QueueServer.register("SharedSqs", SharedSqs)


class RecordingSes(InProcessSes):
    """The SES stand-in, noting each admitted send's recipient too (a recipient twice is a duplicate)."""

    def __init__(self, stand_in: SesStandIn, latency_s: float) -> None:
        super().__init__(stand_in, latency_s)
        self.recipients: list[str] = []

    def send(
        self, sender: Sender, to: str, raw_mime: bytes, *, platform: bool = False, tenant: str | None = None
    ) -> str:
        message_id = super().send(sender, to, raw_mime, platform=platform)
        with self._lock:
            self.recipients.append(to)
        return message_id


def _tenant(rate: float) -> tuple[Tenant, dict[str, Any]]:
    sender = Sender("news@bench.example", "Bench", "us-east-1", KEY, "secret", rate)
    keys = KeyVersion(1, KEY, "secret", "111111111111")
    return Tenant("bench", "paid", sender, (keys,)), SenderSnapshot.of("paid", sender, keys).queued_sender()


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(rate: float, seconds: float, latency_ms: float, max_rate: int) -> dict[str, Any]:
    n = math.ceil(rate * seconds) + 1
    drainers = drainers_for(rate, max_rate)
    _, queued_sender = _tenant(rate)
    bodies = [queued_email(queued_sender, f"r{i}@example.org", "<p>Hello</p>") for i in range(n)]
    ctx = mp.get_context("fork")
    with QueueServer(ctx=ctx) as server:
        queue = server.SharedSqs(bodies, 300.0, 1.0, {"moonsend:tenant": "bench"})
        results = ctx.Queue()
        ready = ctx.Barrier(drainers)
        procs = [
            ctx.Process(target=_slot_main, args=(slot, queue, rate, latency_ms, max_rate, results, ready))
            for slot in range(drainers)
        ]
        started = time.perf_counter()
        for p in procs:
            p.start()
        per_slot = [results.get(timeout=seconds * 10 + 120) for _ in procs]
        for p in procs:
            p.join()
        wall = time.perf_counter() - started
        left = queue.remaining()
    admitted = sorted(t for r in per_slot for t in r["admitted"])
    recipients = [to for r in per_slot for to in r["recipients"]]
    span = admitted[-1] - admitted[0] if len(admitted) > 1 else 0.0
    achieved = (len(admitted) - 1) / span if span > 0 else 0.0
    busiest, lo = 0, 0
    for hi in range(len(admitted)):
        while admitted[hi] - admitted[lo] >= 1.0:
            lo += 1
        busiest = max(busiest, hi - lo + 1)
    cpu = sum(r["cpu_s"] for r in per_slot)
    return {
        "target_per_s": rate,
        "drainer_max_rate": max_rate,
        "drainers": drainers,
        "bands": [share(rate, s, max_rate) for s in range(drainers)],
        "emails": n,
        "sent": sum(r["sent"] for r in per_slot),
        "sent_by_slot": [r["sent"] for r in sorted(per_slot, key=lambda r: r["slot"])],
        "duplicates": len(recipients) - len(set(recipients)),
        "left_on_queue": left,
        "seconds": round(span, 2),
        "achieved_per_s": round(achieved, 2),
        "ratio": round(achieved / rate, 4),
        "busiest_1s_window": busiest,
        "cpu_ms_per_email": round(cpu * 1000 / max(1, len(admitted)), 3),
        "wall_s": round(wall, 2),
    }


def _slot_main(slot: int, queue: Any, rate: float, latency_ms: float, max_rate: int, out: Any, ready: Any) -> None:
    """One drainer's process: built, then started with the others (what is measured is the sending, not
    how long forking ten processes takes), draining its band until the queue is empty."""
    tenant, _ = _tenant(rate)
    settings = Settings.from_env(
        {
            "MOONSEND_STAGE": "bench",
            "MOONSEND_LONG_POLL_SECONDS": "0",
            "MOONSEND_DEADLINE_MARGIN_MS": "1000",
            "MOONSEND_DRAINER_MAX_RATE": str(max_rate),
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        stand_in = SesStandIn(Path(tmp), latency_ms=latency_ms)
        stand_in.configure(KEY, max_send_rate=rate * 2, max_24h_send=10_000_000)
        ses = RecordingSes(stand_in, latency_ms / 1000)
        drainer = parts.drainer(settings, queue, ses, FakeTenants(tenant))
        ready.wait()
        cpu0 = _cpu_s()
        result = drainer.drain(QUEUE, remaining_ms=lambda: 600_000, slot=slot)
        cpu = _cpu_s() - cpu0
    out.put({"slot": slot, "sent": result.sent, "admitted": ses.admitted, "recipients": ses.recipients, "cpu_s": cpu})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--drainer-max-rate", type=int, default=DRAINER_MAX_RATE)
    ap.add_argument("--report", type=Path, help="also write the results as a Markdown table here (bench/run.py)")
    args = ap.parse_args()
    row = run(args.rate, args.seconds, args.latency_ms, args.drainer_max_rate)
    print(json.dumps(row), flush=True)
    within = row["busiest_1s_window"] <= math.floor(args.rate + 1e-9)
    ok = row["ratio"] >= 0.95 and within and row["sent"] == row["emails"] and row["duplicates"] == 0
    if args.report:
        bands = " + ".join(f"{b:g}" for b in row["bands"])
        table = [
            "| target/s | drainers (bands) | emails | achieved/s | ratio | most sends in any 1 s | sent twice "
            "| CPU per email |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {row['target_per_s']:g} | {row['drainers']} ({bands}) | {row['emails']:,} "
            f"| {row['achieved_per_s']:,.2f} | {row['ratio']:.4f} | {row['busiest_1s_window']} | {row['duplicates']} "
            f"| {row['cpu_ms_per_email']} ms |",
            "",
            f"Sent per drainer: {', '.join(f'{s:,}' for s in row['sent_by_slot'])}. Drainers per 1,000/s: "
            f"{math.ceil(1000 / args.drainer_max_rate)} at `MOONSEND_DRAINER_MAX_RATE={args.drainer_max_rate}`.",
            "",
            "Targets: at least 0.95 of the rate, never above it in any window, no one twice: "
            f"{'met' if ok else 'NOT met'}.",
        ]
        args.report.write_text("\n".join(table) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
