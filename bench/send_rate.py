"""send_emails at its promised rate: achieved rate and the busiest one-second window, at 1 to 500/s.

The real Drainer, whole (limiter, thread pool, ledger claims, suppression look-ups, campaign control, the
reputation guard's counting, signed unsubscribe links, MIME, outcome table) drains an in-memory queue
through the local stack's SES stand-in, in process, with 50 ms of latency per call. The SES account is
set to twice the target rate, so that SES does not hide a limiter that sends too fast: the busiest
window is measured on the times SES admitted each send, where the promise counts.

    python bench/send_rate.py [--rates 1,10,100,500] [--seconds 10] [--latency-ms 50]

Exits non-zero if any run's achieved rate is below 0.95 of its target or any window holds more.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MOONSEND_LOG_LEVEL", "WARNING")
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")

from bench.queued import queued_email
from chalicelib.core.config import Settings
from chalicelib.core.contract import Sender
from chalicelib.core.errors import QuotaExhausted, SendThrottled
from chalicelib.send.ses_sender import SendQuota
from chalicelib.stores.ports.campaigns import SenderSnapshot
from chalicelib.stores.ports.tenants import KeyVersion, Tenant
from infra.local.ses import Refused, SesStandIn
from infra.status import max_in_window
from tests.fakes import FakeTenants, parts


class MemoryQueue:
    """Enough of SQS for one drain: receive, delete, visibility, re-send."""

    def __init__(self, bodies: list[str]) -> None:
        now = str(int(time.time() * 1000))
        self._ready = [
            {
                "MessageId": str(i),
                "ReceiptHandle": f"rh{i}",
                "Body": b,
                "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": now},
            }
            for i, b in enumerate(bodies)
        ]
        self._lock = threading.Lock()
        self.deleted = 0

    def get_queue_url(self, QueueName: str) -> dict[str, str]:
        return {"QueueUrl": f"memory://{QueueName}"}

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int, **_kw: Any) -> dict[str, Any]:
        with self._lock:
            out, self._ready = self._ready[:MaxNumberOfMessages], self._ready[MaxNumberOfMessages:]
        return {"Messages": out} if out else {}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        self.deleted += len(Entries)
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:
        self.deleted += 1

    def change_message_visibility(self, **_kw: Any) -> None:
        return None

    def list_queue_tags(self, QueueUrl: str) -> dict[str, Any]:
        return {"Tags": {"moonsend:tenant": "bench"}}

    def send_message(self, QueueUrl: str, MessageBody: str, **_kw: Any) -> None:
        with self._lock:  # a throttled email comes back (at once: the bench has no clock to wait on)
            self._ready.append({"MessageId": "again", "ReceiptHandle": "again", "Body": MessageBody, "Attributes": {}})


class InProcessSes:
    """SesSender's interface on the local stack's SES stand-in, without HTTP."""

    def __init__(self, stand_in: SesStandIn, latency_s: float) -> None:
        self._ses = stand_in
        self._latency = latency_s
        self.admitted: list[float] = []
        self.refused = 0
        self._lock = threading.Lock()

    def quota(self, sender: Sender, *, platform: bool = False) -> SendQuota:
        acct = self._ses.account(sender.api_key or "")
        return SendQuota(acct.max_send_rate, acct.max_24h_send, 0.0)

    def send(
        self, sender: Sender, to: str, raw_mime: bytes, *, platform: bool = False, tenant: str | None = None
    ) -> str:
        try:
            at = self._ses.admit(sender.api_key or "")
        except Refused as refusal:
            time.sleep(self._latency)
            with self._lock:
                self.refused += 1
            if refusal.kind == "rate":
                raise SendThrottled(refusal.message) from None
            raise QuotaExhausted(refusal.message) from None
        time.sleep(self._latency)  # as the stand-in does: admitted on arrival, answered after the latency
        with self._lock:
            self.admitted.append(at)
        return f"ses-{at}"


def run(rate: float, seconds: float, latency_ms: float) -> dict[str, Any]:
    n = math.ceil(rate * seconds) + 1  # n sends span n-1 intervals: at least `seconds` at the target
    key = f"AKIABENCH{int(rate)}"
    sender = Sender("news@bench.example", "Bench", "us-east-1", key, "secret", rate)
    keys = KeyVersion(1, key, "secret", "111111111111")
    tenant = Tenant("bench", "paid", sender, (keys,))
    queued_sender = SenderSnapshot.of("paid", sender, keys).queued_sender()  # as precompile queues it
    with tempfile.TemporaryDirectory() as tmp:
        stand_in = SesStandIn(Path(tmp), latency_ms=latency_ms)
        stand_in.configure(key, max_send_rate=rate * 2, max_24h_send=10_000_000)
        ses = InProcessSes(stand_in, latency_ms / 1000)
        bodies = [queued_email(queued_sender, f"r{i}@example.org", "<p>Hello</p>") for i in range(n)]
        settings = Settings.from_env(
            {
                "MOONSEND_STAGE": "bench",
                "MOONSEND_LONG_POLL_SECONDS": "0",
                "MOONSEND_DEADLINE_MARGIN_MS": "1000",
                # One drainer's limiter at every rate (bench/many_drainers.py measures several on one queue).
                "MOONSEND_DRAINER_MAX_RATE": "100000",
            }
        )
        queue = MemoryQueue(bodies)
        # Every part of the drainer runs (suppression look-ups, counting ahead, campaign control, links);
        # the stores behind them are in memory, so the bench measures the sender, not DynamoDB.
        drainer = parts.drainer(settings, queue, ses, FakeTenants(tenant))
        started = time.perf_counter()
        result = drainer.drain("moonsend-bench-t-bench", remaining_ms=lambda: 600_000)
        wall = time.perf_counter() - started
    ts = sorted(ses.admitted)
    span = ts[-1] - ts[0] if len(ts) > 1 else 0.0
    achieved = (len(ts) - 1) / span if span > 0 else 0.0
    busiest = max_in_window([round(t * 1000) for t in ts], 1000)
    return {
        "target_per_s": rate,
        "emails": n,
        "sent": result.sent,
        "seconds": round(span, 2),
        "achieved_per_s": round(achieved, 2),
        "ratio": round(achieved / rate, 4),
        "busiest_1s_window": busiest,
        "throttled_by_ses": ses.refused,
        "wall_s": round(wall, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="1,10,100,500")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--report", type=Path, help="also write the results as a Markdown table here (bench/run.py)")
    args = ap.parse_args()
    ok = True
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        row = run(rate, args.seconds, args.latency_ms)
        rows.append(row)
        print(json.dumps(row), flush=True)
        within = row["busiest_1s_window"] <= math.floor(rate + 1e-9)
        ok &= row["ratio"] >= 0.95 and within and row["sent"] == row["emails"]
    if args.report:
        table = [
            "| target/s | emails | achieved/s | ratio | most sends in any 1 s | throttled by SES |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in rows:
            table.append(
                f"| {r['target_per_s']:g} | {r['emails']:,} | {r['achieved_per_s']:,.2f} | {r['ratio']:.4f} "
                f"| {r['busiest_1s_window']} | {r['throttled_by_ses']} |"
            )
        table += [
            "",
            f"Targets: at least 0.95 of the rate, never above it in any window: {'met' if ok else 'NOT met'}.",
        ]
        args.report.write_text("\n".join(table) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
