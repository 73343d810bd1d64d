"""Digests at volume (issue 23): 100,000 items for 10,000 recipients become 10,000 emails.

On the local stack, end to end: the items are published to PrecompileEmail as a producer batches them
(`recipients: [...]` with ten `items` each, 1,000 items per SNS message) and taken in by precompile_email;
then run_digest is invoked as the digest's schedule invokes it, and assembles one email per recipient
through the pipeline (ledger, queue). The tenant sends at 1/s, so that its drains take no CPU from the
assembly. Every DynamoDB request the stack answers is counted at its gateway, by operation and table,
with BatchWriteItem's write requests counted one by one: the writes per item are what the stack saw.

    python bench/digest_assembly.py [--recipients 10000] [--items-per-recipient 10]

Exits non-zero if an item is written more than once, or the run does not give every recipient exactly one
email, or a second run for the same period mails anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib import wiring
from chalicelib.digest.assembly import campaign_id, period_of
from infra.local.gateway import _read_body
from infra.local.stack import LocalStack, StackConfig
from infra.producer import publish

USER, DIGEST = "bench-digest", "weekly"
DEFINITION = {
    "id": DIGEST,
    "subject": "{{ name }}, {{ items_total }} new this week",
    "body": (
        "<html><body><h1>Hi {{ name }},</h1><p>{{ items_total }} new near you:</p><ul>"
        "{% for item in items %}<li>{{ item.data.title }} ({{ item.type }}) {{ item.data.venue }}</li>"
        "{% endfor %}</ul></body></html>"
    ),
    "schedule": "cron(0 13 ? * WED *)",
    "window": "P7D",
    "maxItems": 50,
}


class DynamoCounts:
    """Every DynamoDB request the gateway answers: (operation, table) -> requests and write requests."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()
        self.writes: Counter[tuple[str, str]] = Counter()
        self.partitions: Counter[str] = Counter()  # the digests table's item writes, by partition key
        self.seconds = 0.0  # the local stack's time answering them (moto)
        self._lock = threading.Lock()

    def observe(self, target: str, body: bytes) -> None:
        with self._lock:
            self._observe(target.rpartition(".")[2], json.loads(body or b"{}"))

    def _observe(self, op: str, d: dict[str, Any]) -> None:
        if op == "BatchWriteItem":
            for table, requests in d.get("RequestItems", {}).items():
                self.requests[(op, table)] += 1
                self.writes[(op, table)] += len(requests)
                for r in requests:
                    key = (r.get("PutRequest") or {}).get("Item") or (r.get("DeleteRequest") or {}).get("Key") or {}
                    self.partitions[key.get("pk", {}).get("S", "")] += 1
            return
        table = d.get("TableName", "")
        self.requests[(op, table)] += 1
        if op in ("PutItem", "UpdateItem", "DeleteItem"):
            self.writes[(op, table)] += 1

    def add_time(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds

    def snapshot(self) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
        return Counter(self.requests), Counter(self.writes)


def _count_at_gateway(stack: LocalStack, counts: DynamoCounts) -> None:
    gateway = stack.gateway
    assert gateway is not None
    answer = gateway._dynamodb

    def counted(environ: dict[str, Any], start_response: Any, access_key: str, region: str) -> Any:
        counts.observe(environ.get("HTTP_X_AMZ_TARGET", ""), _read_body(environ))  # read again by the stack
        started = time.perf_counter()
        try:
            return answer(environ, start_response, access_key, region)
        finally:
            counts.add_time(time.perf_counter() - started)

    gateway._dynamodb = counted  # type: ignore[method-assign]


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _messages(recipients: int, per_recipient: int, now: float) -> list[str]:
    """Item events as a producer batches them: 100 recipients with their items per SNS message."""
    out, chunk = [], []
    for i in range(recipients):
        items = [
            {
                "id": f"show-{i}-{k}",
                "type": "NearbyShow",
                "at": _iso(now - 3600 - k * 600),
                "data": {"title": f"Show {k} for reader {i}", "venue": "Gallery Nine, 12 Long Street"},
            }
            for k in range(per_recipient)
        ]
        chunk.append(
            {"email": f"reader.{i}@bench-readers.example", "metadata": {"name": f"Reader {i}"}, "items": items}
        )
        if len(chunk) * per_recipient >= 1000:
            out.append(json.dumps({"userId": USER, "digest": {"id": DIGEST}, "recipients": chunk}))
            chunk = []
    if chunk:
        out.append(json.dumps({"userId": USER, "digest": {"id": DIGEST}, "recipients": chunk}))
    return out


def _delta(after: Counter[Any], before: Counter[Any]) -> Counter[Any]:
    return Counter({k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)})


def _table(requests: Counter[tuple[str, str]], writes: Counter[tuple[str, str]], per: int, what: str) -> list[str]:
    lines = [
        f"| operation | table | requests | per {what} | item writes | per {what} |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for (op, table), n in sorted(requests.items(), key=lambda kv: -kv[1]):
        w = writes.get((op, table), 0)
        short = table.removeprefix("moonsend-local-")
        lines.append(f"| {op} | {short} | {n:,} | {n / per:.3f} | {w:,} | {w / per:.3f} |")
    return lines


def _queued(c: Any, cid: str) -> int:
    stats = c.stats.get(USER, cid)
    return int(stats["queued"]) if stats else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipients", type=int, default=10_000)
    p.add_argument("--items-per-recipient", type=int, default=10)
    p.add_argument("--profile", action="store_true", help="print the run's profile (the invoking thread)")
    p.add_argument("--report", type=Path, help="also write the results as Markdown here (bench/run.py)")
    args = p.parse_args()
    n_items = args.recipients * args.items_per_recipient
    # The tenant's drains may still be writing to the outbox as the stack stops.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        config = StackConfig(port=0, api_port=0, outbox=Path(tmp) / "outbox")
        with LocalStack(config) as stack:
            assert stack.ses is not None and stack.settings is not None and stack.runner is not None
            counts = DynamoCounts()
            _count_at_gateway(stack, counts)
            key, secret = "AKIABENCHDIGEST0001", "bench-digest-secret"
            stack.ses.configure(key, max_send_rate=1)
            sender = {
                "region": "us-east-1",
                "apiKey": key,
                "apiSecret": secret,
                "ratePerSecond": "1",
                "emailAddress": f"digest@{USER}.example",
                "fromName": "Bench Weekly",
            }
            stack.client("sesv2", access_key=key, secret_key=secret).create_email_identity(
                EmailIdentity=sender["emailAddress"]
            )
            sns, topic = stack.client("sns"), stack.topic_arns[stack.settings.resources.precompile_topic.name]
            c = wiring.container()
            publish(sns, topic, [json.dumps({"userId": USER, "sender": sender, "digest": DEFINITION})])
            while (s := c.digests.state(USER, DIGEST)) is None or s.scheduled is None:
                time.sleep(0.1)

            now = time.time()
            bodies = _messages(args.recipients, args.items_per_recipient, now)
            before_req, before_w = counts.snapshot()
            partitions_before = Counter(counts.partitions)
            t0 = time.perf_counter()
            sns_messages = publish(sns, topic, bodies)
            digests_table = stack.settings.resources.digests_table.name
            written = before_w.get(("BatchWriteItem", digests_table), 0) + n_items
            deadline = time.monotonic() + 3600
            while counts.writes.get(("BatchWriteItem", digests_table), 0) < written and time.monotonic() < deadline:
                time.sleep(0.2)
            stack.runner.wait_idle(600)
            intake_s = time.perf_counter() - t0
            after_req, after_w = counts.snapshot()
            intake_req, intake_w = _delta(after_req, before_req), _delta(after_w, before_w)
            item_writes = intake_w.get(("BatchWriteItem", digests_table), 0)
            shards = _delta(Counter(counts.partitions), partitions_before)
            hottest = max(shards.values()) if shards else 0

            fn = stack.runner.resolve(stack.settings.resources.function_name("run_digest"))
            assert fn is not None
            minute = float(int(time.time()) // 60 * 60)
            event = {"userId": USER, "digestId": DIGEST, "scheduledAt": _iso(minute)}
            cid = campaign_id(DIGEST, period_of(minute))
            before_req, before_w = counts.snapshot()
            moto_before = counts.seconds
            t0 = time.perf_counter()
            if args.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                result = prof.runcall(stack.runner.invoke, fn, event)
                pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
            else:
                result = stack.runner.invoke(fn, event)  # as Scheduler invokes it (synchronously, to time it)
            deadline = time.monotonic() + 3600
            while _queued(c, cid) < args.recipients and time.monotonic() < deadline:  # a continuation's
                time.sleep(0.5)
            assembly_s = time.perf_counter() - t0
            while (
                (st := c.digests.state(USER, DIGEST)) is not None and st.running_until and time.monotonic() < deadline
            ):
                time.sleep(0.2)  # the last invocation records its run and lets go of the digest
            last = (st.last_run or {}) if st is not None else {}
            moto_s = counts.seconds - moto_before
            after_req, after_w = counts.snapshot()
            run_req, run_w = _delta(after_req, before_req), _delta(after_w, before_w)
            queued = _queued(c, cid)
            again = stack.runner.invoke(fn, event)  # the same period again (a retry): nothing more
            again_emails = int(again.get("emails", -1))
            c.actions.pause_tenant(USER, "the bench is over", by_tenant=False)  # its drains stop sending

    went_on = " (then it went on in another: its time ran short)" if result.get("unfinished") else ""
    ok = item_writes == n_items and queued == args.recipients and again_emails == 0
    per_email_ms = assembly_s / max(queued, 1) * 1000
    lines = [
        f"{n_items:,} items for {args.recipients:,} recipients ({args.items_per_recipient} each), "
        f"published in {sns_messages} SNS messages; local stack, one process.",
        "",
        "| | figure |",
        "| --- | ---: |",
        f"| items written (digests table, BatchWriteItem write requests) | {item_writes:,} |",
        f"| **writes per item** | **{item_writes / n_items:.3f}** |",
        f"| intake: publish to all stored | {intake_s:.1f} s ({n_items / intake_s:,.0f} items/s) |",
        f"| partitions written | {len(shards)} (the hottest took {hottest:,} items, {hottest / n_items:.1%}) |",
        f"| **assembly: run_digest invoked to all queued** | **{assembly_s:.1f} s** "
        f"({per_email_ms:.2f} ms per email) |",
        f"| of which the local stack's DynamoDB (moto) answering, summed over the run's threads | {moto_s:.1f} s |",
        f"| emails queued (campaign `{cid}`) | {queued:,} |",
        f"| the first invocation's own count: emails, items mailed | {result.get('emails')}, "
        f"{result.get('items_mailed')}{went_on} |",
        f"| the last invocation's: emails, items mailed | {last.get('emails')}, {last.get('items_mailed')} |",
        f"| the same period run again: emails | {again_emails} |",
        "",
        "DynamoDB requests during the intake, per item:",
        "",
        *_table(intake_req, intake_w, n_items, "item"),
        "",
        "DynamoDB requests during the run, per email (every request the stack answered meanwhile: the"
        " background jobs' and the drains' too):",
        "",
        *_table(run_req, run_w, max(queued, 1), "email"),
        "",
        f"Result: {'PASS' if ok else 'FAIL'} (one write per item; one email per recipient; nothing on a rerun).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.report:
        args.report.write_text(text + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
