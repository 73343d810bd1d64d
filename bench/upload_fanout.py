"""Sending without code at volume: a 1,000,000-row CSV (30% of its rows repeating an address) from the
presigned upload to every message on PrecompileEmail, on the local stack's S3 and DynamoDB.

Three timed parts, each the code upload_jobs runs: the file POSTed by its presigned form (as a browser
does); its reading (rows checked, duplicates removed, recipients.jsonl and refused.csv written, the report
kept), once timed and once under tracemalloc for its peak Python heap; and the publication, every message
built and handed to a publisher that counts it and checks it against SNS's 256 KiB (not delivered: a
million recipients through precompile is not this bench's subject). S3 and DynamoDB requests are counted
by botocore's events. The cost per million recipients is computed from the counts with AWS's list prices
(us-east-1) and Lambda's GB-seconds at upload_jobs' 1,024 MB, taking this machine's seconds as Lambda's (a
1,024 MB Lambda has about 0.6 of a vCPU: its seconds may be longer).

    python bench/upload_fanout.py [--rows 1000000] [--duplicates 0.3] [--report FILE]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import botocore.handlers  # noqa: E402

SNS_MAX = 256 * 1024
MB = 1024 * 1024
PRICES = {  # us-east-1 list prices
    "s3_put": 0.005 / 1000,
    "s3_get": 0.0004 / 1000,
    "sns_64kb": 0.50 / 1_000_000,
    "lambda_gb_s": 0.0000166667,
    "lambda_request": 0.20 / 1_000_000,
    "ddb_write": 1.25 / 1_000_000,
    "ddb_read": 0.25 / 1_000_000,
}


class Meter:
    """AWS requests by service and operation, counted in this process while on."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.on = False
        self.lock = threading.Lock()

    def __call__(self, model: Any, **_: Any) -> None:
        # Only the bench's own calls (its thread, and boto3's transfer threads for a multipart upload): the
        # local stack's pollers and scheduled functions run in this process too.
        thread = threading.current_thread()
        ours = thread is threading.main_thread() or thread.name.startswith("ThreadPoolExecutor")
        if self.on and ours and model.service_model.service_name in ("s3", "dynamodb", "sns"):
            with self.lock:
                self.counts[f"{model.service_model.service_name}.{model.name}"] += 1

    def take(self) -> dict[str, int]:
        with self.lock:
            taken, self.counts = dict(self.counts), collections.Counter()
        return taken


METER = Meter()
botocore.handlers.BUILTIN_HANDLERS.append(("before-call.*.*", METER))


def _csv(rows: int, duplicates: float) -> bytes:
    """Excel's UTF-8 CSV: a BOM, CRLF; `duplicates` of the rows repeat an earlier address in capitals."""
    unique = int(rows * (1 - duplicates))
    out = ["\ufeffemail,first name,city,plan"]
    for i in range(rows):
        n = i if i < unique else (i * 7919) % unique
        email = f"person{n:07d}@example.org" if i < unique else f"PERSON{n:07d}@EXAMPLE.ORG"
        out.append(f"{email},Name {n},City {n % 97},{'gold' if n % 5 == 0 else 'basic'}")
    return ("\r\n".join(out) + "\r\n").encode("utf-8")


def run(rows: int, duplicates: float) -> dict[str, Any]:
    os.environ.setdefault("MOONSEND_LOG_LEVEL", "WARNING")
    from chalicelib import wiring
    from chalicelib.core.contract import Sender
    from chalicelib.produce import fanout
    from chalicelib.produce.fanout import Publication
    from chalicelib.produce.reading import UploadReader
    from chalicelib.stores.uploads import PUBLISHING, READING, Send
    from infra.local.stack import LocalStack, StackConfig
    from infra.uploading import post_form

    out: dict[str, Any] = {"rows": rows, "duplicates": duplicates}
    data = _csv(rows, duplicates)
    out["bytes"] = len(data)
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:  # the reading's memory, in a process of its own
        f.write(data)
        f.flush()
        alone = subprocess.run(
            [sys.executable, __file__, "--reading-alone", f.name], capture_output=True, text=True, check=True
        )
    out["alone"] = json.loads(alone.stdout)
    with tempfile.TemporaryDirectory() as tmp, LocalStack(StackConfig(port=0, api_port=0, outbox=Path(tmp))):
        c = wiring.container()
        user = "bench-upload"
        c.tenants.accept(user, "free", Sender("news@bench.example", "N", None, None, None, 10.0), c.ses.account_of)
        sends = c.campaign_sends

        made = sends.new_upload(user, {"filename": "big.csv"})
        started = time.perf_counter()
        post_form(made["form"], "big.csv", data)
        out["upload_s"] = time.perf_counter() - started
        upload = c.uploads.upload(user, made["id"])
        assert upload is not None

        def read() -> tuple[float, dict[str, Any], dict[str, int]]:
            assert c.uploads.start_reading(upload, None, time.time()) or True
            current = c.uploads.upload(user, made["id"])
            assert current is not None and current.state in (READING, "read")
            reader = UploadReader(c.uploads, c.upload_files, c.suppressions.addresses)
            METER.take()
            METER.on = True
            t0 = time.perf_counter()
            report = reader._read(current, lambda: 900_000)  # the reading itself, without its row's write
            took = time.perf_counter() - t0
            METER.on = False
            return took, report, METER.take()

        out["read_s"], report, out["read_requests"] = read()
        out["report"] = {k: report[k] for k in ("rows", "recipients", "duplicates", "refused", "suppressed")}
        c.uploads.finish_reading(upload, report, None, time.time())

        envelope = {
            "userId": user,
            "userPlan": "free",
            "sender": {"emailAddress": "news@bench.example", "fromName": "N", "ratePerSecond": 10.0},
            "campaign": {"id": "big", "subject": "Hi {{ city }}", "body": "<p>Dear {{ name }}</p>" * 20},
        }
        now = time.time()
        assert c.uploads.start_send(Send(user, "big", made["id"], PUBLISHING, envelope, 0, 0, 0, 0, now, now))
        sizes: list[int] = []
        recipients = 0

        def publish(message: str) -> None:
            nonlocal recipients
            size = len(message.encode("utf-8"))
            assert size <= SNS_MAX, size
            sizes.append(size)
            recipients += len(json.loads(message)["recipients"])

        runner = Publication(c.uploads, c.upload_files, lambda *_: None, publish, lambda *_: "", lambda *_: None)
        METER.on = True
        t0 = time.perf_counter()
        result = runner.run(user, "big", "upload_jobs", lambda: 900_000)
        out["publish_s"] = time.perf_counter() - t0
        METER.on = False
        out["publish_requests"] = METER.take()
        out["published"] = recipients
        out["messages"] = len(sizes)
        out["message_kib_mean"] = sum(sizes) / len(sizes) / 1024
        out["sns_64kb_units"] = sum(-(-s // (64 * 1024)) for s in sizes)
        out["window_kib"] = fanout.RECIPIENT_BYTES / 1024
        assert result["published"] == report["recipients"] == recipients
    return out


class LocalFiles:
    """The reading's files on this machine's disk, for its memory measured alone (no local stack in the
    process: moto's copies of the objects would count)."""

    def __init__(self, source: Path, out: Path) -> None:
        self.source, self.out = source, out

    def key(self, user_id: str, upload_id: str, name: str) -> str:
        return name

    def stored(self, key: str) -> Any:
        from chalicelib.stores.upload_files import Stored

        return Stored(self.source.stat().st_size, "local") if key == "file" else None

    def chunks(self, key: str, stored: Any, start: int = 0, chunk: int = 8 * MB) -> Any:
        with self.source.open("rb") as f:
            f.seek(start)
            while data := f.read(chunk):
                yield data

    def keep_file(self, key: str, path: str, content_type: str) -> None:
        Path(path).replace(self.out / key)


def reading_alone(path: Path) -> dict[str, float]:
    """The reading of `path` in this process alone: its time, its peak Python heap and the process's peak RSS."""
    from chalicelib.produce.reading import UploadReader
    from chalicelib.stores.uploads import READING, Upload

    def high_water_mib() -> float:
        """The process's peak RSS since the last reset (VmHWM; ru_maxrss would carry the parent's across exec)."""
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    with contextlib.suppress(OSError):  # Linux: the peak RSS counted from here
        Path("/proc/self/clear_refs").write_text("5")
    with tempfile.TemporaryDirectory() as out:
        files = LocalFiles(path, Path(out))
        reader = UploadReader(None, files, lambda _user: ())  # type: ignore[arg-type]
        upload = Upload("bench", "up_local", READING, "csv", "big.csv", None, 0.0, 0.0)
        rss_before = high_water_mib()
        tracemalloc.start()
        t0 = time.perf_counter()
        report = reader._read(upload, lambda: 900_000)
        took = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1] / MB
        tracemalloc.stop()
        rss = high_water_mib()
    return {"traced_s": took, "peak_mib": peak, "rss_mib": rss, "rss_before_mib": rss_before, **report}


def cost_per_million(r: dict[str, Any]) -> dict[str, float]:
    per = 1_000_000 / r["rows"]
    read, pub = r["read_requests"], r["publish_requests"]
    s3_puts = 1 + sum(v for k, v in read.items() if k.startswith("s3.") and ("Put" in k or "Multipart" in k))
    s3_gets = sum(v for k, v in {**read}.items() if k in ("s3.GetObject", "s3.HeadObject")) + sum(
        v for k, v in pub.items() if k in ("s3.GetObject", "s3.HeadObject")
    )
    ddb_writes = sum(v for k, v in {**read, **pub}.items() if k in ("dynamodb.UpdateItem", "dynamodb.PutItem")) + 2
    ddb_reads = sum(v for k, v in {**read, **pub}.items() if k in ("dynamodb.GetItem", "dynamodb.Query"))
    invocations = 2 + int(r["publish_s"] // (900 - 30))
    gb_s = (r["read_s"] + r["publish_s"]) * 1.0
    parts = {
        "S3 requests": s3_puts * PRICES["s3_put"] + s3_gets * PRICES["s3_get"],
        "SNS publishes (64 KB units)": r["sns_64kb_units"] * PRICES["sns_64kb"],
        "Lambda (upload_jobs, 1,024 MB)": gb_s * PRICES["lambda_gb_s"] + invocations * PRICES["lambda_request"],
        "DynamoDB": ddb_writes * PRICES["ddb_write"] + ddb_reads * PRICES["ddb_read"],
    }
    return {k: v * per for k, v in parts.items()}


def markdown(r: dict[str, Any]) -> str:
    rep = r["report"]
    costs = cost_per_million(r)
    total = r["upload_s"] + r["read_s"] + r["publish_s"]
    lines = [
        f"A {r['rows']:,}-row CSV ({r['bytes'] / MB:.1f} MiB, {r['duplicates']:.0%} of its rows repeating an "
        f"address): {rep['recipients']:,} recipients, {rep['duplicates']:,} duplicates, {rep['refused']} refused.",
        "",
        "| part | time | AWS requests |",
        "| --- | ---: | --- |",
        f"| the file POSTed by its presigned form (one request) | {r['upload_s']:.1f} s | 1 S3 POST |",
        f"| reading: rows checked, duplicates removed, files written | {r['read_s']:.1f} s "
        f"({r['rows'] / r['read_s']:,.0f} rows/s) | {_requests(r['read_requests'])} |",
        f"| publication: {r['messages']:,} messages of {r['message_kib_mean']:.0f} KiB on average "
        f"(a window of {r['window_kib']:.0f} KiB) | {r['publish_s']:.1f} s | {_requests(r['publish_requests'])} "
        f"and {r['messages']:,} SNS Publish |",
        f"| **from the upload to every message on PrecompileEmail** | **{total:.1f} s** | |",
        "",
        f"The reading's memory, measured in a process of its own (the same code on the file from disk, no "
        f"local stack): peak Python heap **{r['alone']['peak_mib']:.0f} MiB** (tracemalloc: the set of "
        f"{rep['recipients']:,} address digests, an 8 MiB read, the parser's row), the process's peak RSS "
        f"{r['alone']['rss_mib']:.0f} MiB ({r['alone']['rss_before_mib']:.0f} MiB before it read); "
        "upload_jobs has 1,024 MB. The publication holds one window (120 KiB) and one message.",
        "",
        "Cost per million uploaded rows (list prices, us-east-1; Lambda at this machine's seconds):",
        "",
        "| | $ |",
        "| --- | ---: |",
        *(f"| {k} | {v:.4f} |" for k, v in costs.items()),
        f"| **total** | **{sum(costs.values()):.4f}** |",
    ]
    return "\n".join(lines)


def _requests(counts: dict[str, int]) -> str:
    return ", ".join(f"{v:,} {k}" for k, v in sorted(counts.items())) or "none"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--duplicates", type=float, default=0.3)
    ap.add_argument("--report", type=Path)
    ap.add_argument("--reading-alone", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reading_alone:
        print(json.dumps(reading_alone(args.reading_alone), default=str))
        return 0
    r = run(args.rows, args.duplicates)
    text = markdown(r)
    if args.report:
        args.report.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
