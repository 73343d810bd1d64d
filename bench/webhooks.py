"""Webhook deliveries: what each event costs in AWS requests, and how soon a receiver has it.

Two tenants on the local stack (as `make demo` runs it), each with one endpoint on a loopback receiver
that verifies every request with the Standard Webhooks library: one takes one event per request, the
other up to 100. Each sends a campaign to SES's mailbox simulator, so every recipient makes two events
(sent, delivered). The AWS requests webhooks make are counted where they are made (the delivery queue's
sends and visibility changes, with their bytes, as SQS bills by 64 KB chunk; the endpoints' reads; the
held rows), with Lambda's invocations of the two functions and its SQS poller's receives and deletes
of the delivery queue (cost.py's meters), and priced with cost.py's prices.

Also measured: a campaign's cost in stream invocations for a tenant with no endpoint (what webhooks add
to every email), and the time from an event's record to its arrival at the receiver (local: the stream
poller's one-second batching window, SES's event batching, and moto's pace are in it).

    python bench/webhooks.py [--recipients 500] [--markdown] [--report FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bench.cost as cost  # noqa: E402  (its meters and prices)
from infra.webhook_receiver import WebhookReceiver  # noqa: E402

# How long a receiver takes to answer, for the modelled Lambda time of deliver_webhooks.
RECEIVER_S = 0.1


class Meter:
    """The webhook code's AWS requests, counted at its collaborators' methods (every container's)."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.lock = threading.Lock()

    def add(self, what: str, n: float = 1) -> None:
        if cost._on.is_set():
            with self.lock:
                self.counts[what] = self.counts.get(what, 0) + n

    def install(self) -> None:
        from chalicelib.stores.webhooks import HeldRequests, WebhookEndpoints
        from chalicelib.webhooks.delivery_queue import SQS_BATCH, DeliveryQueue

        meter = self
        put, retry, listed, got, hold = (
            DeliveryQueue.put_messages,
            DeliveryQueue.retry_later,
            WebhookEndpoints.list,
            WebhookEndpoints.get,
            HeldRequests.hold,
        )

        def put_messages(self: Any, messages: list[tuple[str, str]]) -> None:
            put(self, messages)
            for i in range(0, len(messages), SQS_BATCH):
                size = sum(len(b.encode()) for _u, b in messages[i : i + SQS_BATCH])
                meter.add("sqs:SendMessageBatch")
                meter.add("sqs_chunks", -(-size // 65536))
                meter.add("queued_bytes", size)

        def retry_later(self: Any, receipt: str, wait_s: int) -> None:
            retry(self, receipt, wait_s)
            meter.add("sqs:ChangeMessageVisibility")
            meter.add("sqs_chunks")

        def list_(self: Any, user_id: str) -> Any:
            meter.add("dynamodb:Query (endpoints)")
            return listed(self, user_id)

        def get(self: Any, user_id: str, endpoint_id: str) -> Any:
            meter.add("dynamodb:GetItem (endpoint)")
            return got(self, user_id, endpoint_id)

        def hold_(self: Any, *a: Any) -> None:
            meter.add("dynamodb:PutItem (held)")
            hold(self, *a)

        DeliveryQueue.put_messages = put_messages  # type: ignore[method-assign]
        DeliveryQueue.retry_later = retry_later  # type: ignore[method-assign]
        WebhookEndpoints.list = list_  # type: ignore[method-assign]
        WebhookEndpoints.get = get  # type: ignore[method-assign]
        HeldRequests.hold = hold_  # type: ignore[method-assign]


def run(recipients: int) -> dict[str, Any]:
    os.environ.setdefault("MOONSEND_LOG_LEVEL", "WARNING")
    from chalicelib import wiring
    from chalicelib.core.message_parser import parse_sender
    from infra.local.stack import LocalStack, StackConfig
    from infra.producer import CampaignSpec, messages, publish

    results: dict[str, Any] = {"recipients": recipients}
    with tempfile.TemporaryDirectory() as tmp:
        config = StackConfig(port=0, api_port=0, outbox=Path(tmp), ses_latency_ms=5, max_concurrency=64)
        with LocalStack(config) as stack:
            assert stack.settings is not None and stack.runner is not None
            invocations, gb_s = cost._lambda_meter(stack.runner)
            cost._poller_meter([p for p in stack.pollers if p.handler_name == "deliver_webhooks"])
            meter = Meter()
            meter.install()
            c = wiring.container()
            sns = stack.client("sns")
            topic = stack.topic_arns[stack.settings.resources.precompile_topic.name]

            def campaign(user: str, sender: dict[str, Any], people: int) -> None:
                spec = CampaignSpec(user, sender, "Hi", "<p>Hi</p>", "bench")
                rcpts = [{"email": f"success+{user}{i}@simulator.amazonses.com"} for i in range(people)]
                publish(sns, topic, messages(spec, rcpts, 50))

            def tenant(user: str) -> dict[str, Any]:
                sender = stack.paid_sender(user, rate=200, ses_max_rate=200)
                c.tenants.accept(user, "paid", parse_sender({"sender": sender}, []), c.ses.account_of)
                return sender

            # What webhooks cost a tenant with no endpoint: the stream's invocations for its ledger writes.
            quiet = tenant("quiet")
            cost._on.set()
            campaign("quiet", quiet, recipients)
            assert stack.wait_until_drained(timeout=1800, settle_s=2.0, poll_s=1.0)
            time.sleep(12)  # SES's Delivery events, then the stream's last batches
            stack.wait_for_streams(120)
            cost._on.clear()
            results["no_endpoint"] = {
                "stream_invocations_per_email": round(invocations["webhook_events"] / recipients, 4),
                "endpoint_queries_per_email": round(meter.counts.get("dynamodb:Query (endpoints)", 0) / recipients, 4),
            }
            meter.counts.clear()
            cost._calls.clear()
            cost._units.clear()
            invocations.clear()
            gb_s.clear()

            for batch in (1, 100):
                user = f"hooks{batch}"
                sender = tenant(user)
                receiver = WebhookReceiver()
                registered = c.webhook_registration.add(user, {"url": receiver.url, "maxEventsPerRequest": batch})
                receiver.secret = str(registered.body["secret"])
                expected = 2 * recipients
                cost._on.set()
                started = time.monotonic()
                campaign(user, sender, recipients)
                deadline = time.monotonic() + 1800
                while len(receiver.arrived) < expected and time.monotonic() < deadline:
                    time.sleep(0.5)
                took = time.monotonic() - started
                stack.wait_for_streams(60)
                cost._on.clear()
                recorded = {e["id"]: e["timestamp"] for es in receiver.accepted.values() for e in es}
                delays = sorted(at - _epoch(recorded[i]) for i, at in receiver.arrived.items())
                events = len(receiver.arrived)
                results[f"batch_{batch}"] = {
                    "events": events,
                    "requests": len(receiver.requests),
                    "repeats": len(receiver.repeats),
                    "took_s": round(took, 1),
                    "delay_p50_s": round(delays[len(delays) // 2], 2) if delays else None,
                    "delay_p95_s": round(delays[int(len(delays) * 0.95)], 2) if delays else None,
                    "invocations_per_event": {k: round(v / max(events, 1), 4) for k, v in invocations.items()},
                    "local_gb_s_per_event": {k: round(v / max(events, 1), 6) for k, v in gb_s.items()},
                    "requests_per_event": {
                        **{k: round(v / max(events, 1), 4) for k, v in sorted(meter.counts.items())},
                        **{
                            f"{svc}:{op} (Lambda's poller)": round(n / max(events, 1), 4)
                            for (who, svc, op), n in sorted(cost._calls.items())
                            if who == "poller"
                        },
                    },
                }
                meter.counts.clear()
                cost._calls.clear()
                cost._units.clear()
                invocations.clear()
                gb_s.clear()
                receiver.close()
    return results


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def priced(per_event: dict[str, Any], gb_s_per_event: float) -> float:
    """USD per million events: the requests as AWS bills them, and deliver_webhooks' time modelled. SQS bills
    by 64 KB chunk: the poller's receives carry what the sends did (as many chunks), its deletes one each."""
    r = per_event["requests_per_event"]
    chunks = r.get("sqs_chunks", 0)
    sqs = chunks + chunks + r.get("sqs:DeleteMessageBatch (Lambda's poller)", 0)
    reads = r.get("dynamodb:Query (endpoints)", 0) + r.get("dynamodb:GetItem (endpoint)", 0)
    usd = sqs * cost.PRICE["sqs_request"] + reads * cost.PRICE["dynamodb_rru"]
    usd += r.get("dynamodb:PutItem (held)", 0) * cost.PRICE["dynamodb_wru"]
    webhooks = ("webhook_events", "deliver_webhooks")
    usd += sum(per_event["invocations_per_event"].get(f, 0) for f in webhooks) * cost.PRICE["lambda_request"]
    usd += gb_s_per_event * cost.PRICE["lambda_gb_s"]
    return usd * 1e6


def markdown(r: dict[str, Any]) -> str:
    out = [
        f"Two tenants, {r['recipients']} recipients each (2 events per recipient: sent, delivered), one endpoint "
        "each on a loopback receiver that verifies every request; a third tenant with no endpoint.",
        "",
        "| | 1 event per request | up to 100 per request |",
        "| --- | ---: | ---: |",
    ]
    one, hundred = r["batch_1"], r["batch_100"]
    rows = [
        ("events received (each once, verified)", "events"),
        ("requests received", "requests"),
        ("local delay, record to receiver, p50 (s)", "delay_p50_s"),
        ("local delay, p95 (s)", "delay_p95_s"),
    ]
    for label, key in rows:
        out.append(f"| {label} | {one[key]} | {hundred[key]} |")
    keys = sorted((set(one["requests_per_event"]) | set(hundred["requests_per_event"])) - {"queued_bytes"})
    for k in keys:
        a, b = one["requests_per_event"].get(k, 0), hundred["requests_per_event"].get(k, 0)
        out.append(f"| {k} per event | {a:.4f} | {b:.4f} |")
    for k in ("webhook_events", "deliver_webhooks"):
        out.append(
            f"| Lambda {k} invocations per event | {one['invocations_per_event'].get(k, 0):.4f} "
            f"| {hundred['invocations_per_event'].get(k, 0):.4f} |"
        )

    # deliver_webhooks' time on AWS, modelled: a receiver answering in 100 ms, at 256 MB, each request
    # billed in full (no credit for the ten of a batch made at once: an upper bound).
    def modelled(r: dict[str, Any]) -> float:
        return RECEIVER_S * 0.25 * r["requests"] / max(r["events"], 1)

    out.append(
        f"| **USD per million events** (the webhook functions' requests and invocations; deliver_webhooks "
        f"256 MB x {RECEIVER_S * 1000:.0f} ms per request) "
        f"| **{priced(one, modelled(one)):.2f}** | **{priced(hundred, modelled(hundred)):.2f}** |"
    )
    q = r["no_endpoint"]
    out += [
        "",
        f"A tenant with no endpoint: {q['stream_invocations_per_email']} webhook_events invocations and "
        f"{q['endpoint_queries_per_email']} endpoint queries per email (the ledger's stream, in batches of up to "
        "100 writes; Lambda's reads of a DynamoDB stream are not billed).",
    ]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipients", type=int, default=500)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--report", type=Path)
    args = ap.parse_args()
    r = run(args.recipients)
    text = markdown(r)
    if args.report:
        args.report.write_text(text + "\n")
    print(text if args.markdown or args.report else json.dumps(r, indent=2))
    return 0 if all(r[f"batch_{b}"]["events"] == 2 * args.recipients for b in (1, 100)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
