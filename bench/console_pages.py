"""The console's pages at volume: the server time of a 100,000-recipient campaign's page on the local stack,
the bytes of HTML, CSS and JS each page view carries, the requests a view makes, and the DynamoDB requests
behind each page.

One paid tenant with a campaign of 100,000 recipients (ledger rows as precompile leaves them), sent at 14 a
second over two hours (its sends counted by the second, as the drainer's flushes count them) and opened,
clicked and bounced over the day after: its timeline holds a day of minutes, the most a page reads. Then,
signed in with a session cookie, `--requests` requests of each page, one after the other: the latency
median and p90 (the client's clock, request to last byte; the local gateway and moto's DynamoDB included),
the body's bytes raw and gzipped, and the DynamoDB requests the API's threads made (bench/tenant_api.py's
meter).

    python bench/console_pages.py [--recipients 100000] [--requests 30] [--report FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import threading  # noqa: E402

import botocore.handlers  # noqa: E402

from bench.tenant_api import _METER  # noqa: E402 (its meter is registered with botocore on import)


class DynamoClock:
    """The wall time the API's threads spend in DynamoDB calls (moto's, in this process) while on: the
    page's time less this is the time of moonsend's own code and the local gateway."""

    def __init__(self) -> None:
        self.spent_ms = 0.0
        self.lock = threading.Lock()

    def before(self, context: dict[str, Any], **_: Any) -> None:
        context["bench_started"] = time.perf_counter()

    def after(self, context: dict[str, Any], **_: Any) -> None:
        started = context.get("bench_started")
        if started is None or not _METER.on.is_set() or threading.current_thread() is threading.main_thread():
            return
        with self.lock:
            self.spent_ms += (time.perf_counter() - started) * 1000

    def take(self) -> float:
        with self.lock:
            spent, self.spent_ms = self.spent_ms, 0.0
        return spent


_CLOCK = DynamoClock()
botocore.handlers.BUILTIN_HANDLERS.append(("before-call.dynamodb.*", _CLOCK.before))
botocore.handlers.BUILTIN_HANDLERS.append(("after-call.dynamodb.*", _CLOCK.after))

TARGET_MS = 300  # the aim for a 100,000-recipient campaign's page
RATE = 14
CAMPAIGN = "big"


def _fetch(url: str, cookie: str) -> tuple[float, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers={"Cookie": f"moonsend_session={cookie}"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:
        body = answer.read()
        headers = {k.lower(): v for k, v in answer.getheaders()}
    return (time.perf_counter() - started) * 1000, body, headers


def _recipients(c: Any, user: str, n: int) -> None:
    emails = [f"reader{i:06d}@example.org" for i in range(n)]
    for i in range(0, n, 1000):
        c.ledger.record_queued(user, CAMPAIGN, emails[i : i + 1000])


def _history(c: Any, user: str, n: int, start: int) -> None:
    """`n` sends at RATE a second from `start`, each minute's counted with its seconds; then a day of
    minutes of what followed (delivered in the sending minutes, opens and clicks, a bounce now and then)."""
    sent = 0
    minute = 0
    while sent < n:
        seconds = {start + minute * 60 + s: RATE for s in range(60)}
        batch = min(n - sent, RATE * 60)
        if batch < RATE * 60:
            seconds = {start + minute * 60 + s: min(RATE, batch - s * RATE) for s in range(60) if batch > s * RATE}
        c.stats.add_counts(user, CAMPAIGN, {"sent": batch, "delivered": batch - batch // 60}, sent_seconds=seconds)
        sent += batch
        minute += 1
    for m in range(1440):  # the day after the first send: one timeline item a minute
        c.timeline.add(
            user, CAMPAIGN, start + m * 60 + 30, {"opened": 20, "clicked": 3, "bounced": int(m % 7 == 0)}, {}
        )
    c.stats.add_counts(user, CAMPAIGN, {"opened": 28_800, "clicked": 4_320, "bounced": 206})


def run(recipients: int, requests: int) -> dict[str, Any]:
    os.environ.setdefault("MOONSEND_LOG_LEVEL", "WARNING")
    from chalicelib import wiring
    from chalicelib.api.principal import Role
    from chalicelib.core.message_parser import parse_sender
    from chalicelib.stores.ports.campaigns import SenderSnapshot
    from infra.local.stack import LocalStack, StackConfig

    results: dict[str, Any] = {"recipients": recipients, "requests": requests, "pages": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalStack(StackConfig(port=0, api_port=0, outbox=Path(tmp), ses_latency_ms=5)) as stack,
    ):
        assert stack.settings is not None and stack.api_url
        r = stack.settings.resources
        _METER.tables = {
            r.campaigns_table.name: "campaigns",
            r.timeline_table.name: "timeline",
            r.ledger_table.name: "ledger",
            r.sessions_table.name: "sessions",
        }
        c = wiring.container()
        user = "bench-console"
        sender = parse_sender({"sender": stack.paid_sender(user, rate=RATE, ses_max_rate=RATE)}, [])
        keys = c.tenants.accept(user, "paid", sender, c.ses.account_of)
        started = time.monotonic()
        c.campaign_senders.fix(user, CAMPAIGN, SenderSnapshot.of("paid", sender, keys), "Winter sale, {{ name }}")
        c.stats.add_counts(user, CAMPAIGN, {"queued": recipients})
        _recipients(c, user, recipients)
        _history(c, user, recipients, int(time.time()) - 2 * 86_400)
        results["setup_s"] = round(time.monotonic() - started, 1)
        cookie, _session = c.sessions.start(user, None, Role.ADMIN)
        base, ddb = stack.api_url, stack.client("dynamodb")
        page = f"{base}/console/campaigns/{CAMPAIGN}"
        kinds = [
            ("the campaigns page `/console`", f"{base}/console"),
            (f"a campaign's page, {recipients:,} recipients", page),
            ("its live part `?part=live` (every 4 s while it sends)", f"{page}?part=live"),
            ("its recipients part `?part=recipients` (every 4 s while it sends)", f"{page}?part=recipients"),
            ("found by address `?address=reader05`", f"{page}?address=reader05"),
            ("filtered by a state none has `?state=failed`", f"{page}?state=failed"),
        ]
        for name, url in kinds:
            _fetch(url, cookie)  # once unmeasured: the API's container and its connections
            _METER.take(ddb)
            _CLOCK.take()
            _METER.on.set()
            times, body = [], b""
            for _ in range(requests):
                ms, body, _headers = _fetch(url, cookie)
                times.append(ms)
            _METER.on.clear()
            in_dynamodb = _CLOCK.take() / requests
            reads = _METER.take(ddb)
            results["pages"].append(
                {
                    "page": name,
                    "median_ms": round(statistics.median(times), 1),
                    "p90_ms": round(sorted(times)[int(len(times) * 0.9) - 1], 1),
                    "dynamodb_ms": round(in_dynamodb, 1),
                    "mean_ms": round(statistics.mean(times), 1),
                    "own_ms": round(statistics.mean(times) - in_dynamodb, 1),  # both means: one subtracts
                    "html_bytes": len(body),
                    "html_gzip_bytes": len(gzip.compress(body)),
                    "dynamodb_per_request": {k: round(v / requests, 2) for k, v in sorted(reads.calls.items())},
                    "rcu_per_request": round(reads.rcu / requests, 1),
                }
            )
        assets = {}
        for name in ("console.css", "console.js"):
            _ms, body, headers = _fetch(f"{base}/console/static/{name}", cookie)
            assets[name] = {"bytes": len(body), "gzip_bytes": len(gzip.compress(body))}
        _ms, body, _headers = _fetch(page, cookie)
        named = [line for line in body.decode().splitlines() if "/console/static/" in line]
        _ms, _body, headers = _fetch(f"{base}/console/static/console.css?v={named[0].split('?v=')[1][:12]}", cookie)
        results["assets"] = assets
        results["asset_cache"] = headers.get("cache-control")
    campaign_page = results["pages"][1]
    results["ok"] = campaign_page["median_ms"] < TARGET_MS
    results["own_ok"] = campaign_page["own_ms"] < TARGET_MS
    return results


def markdown(r: dict[str, Any]) -> str:
    css, js = r["assets"]["console.css"], r["assets"]["console.js"]
    lines = [
        f"`python bench/console_pages.py --recipients {r['recipients']} --requests {r['requests']}`: "
        f"{'target met' if r['ok'] else 'TARGET MISSED'} (a campaign's page under {TARGET_MS} ms, median, on the "
        f"local stack); outside the local DynamoDB, {'under' if r['own_ok'] else 'OVER'} {TARGET_MS} ms.",
        "",
        f"A campaign of {r['recipients']:,} recipients (ledger rows as precompile leaves them), its timeline a "
        f"day of minutes; made through the stores in {r['setup_s']} s (moto's). {r['requests']} requests of each "
        "page over HTTP with a session cookie, one after the other; the client's clock, request to last byte.",
        "",
        "| page | median | p90 | mean | of it in moto's DynamoDB | the rest | HTML | gzipped | DynamoDB requests each "
        "| RCU each |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for p in r["pages"]:
        calls = ", ".join(f"{n:g} {k}" for k, n in p["dynamodb_per_request"].items())
        lines.append(
            f"| {p['page']} | {p['median_ms']} ms | {p['p90_ms']} ms | {p['mean_ms']} ms | {p['dynamodb_ms']} ms | "
            f"{p['own_ms']} ms | "
            f"{p['html_bytes']:,} B | "
            f"{p['html_gzip_bytes']:,} B | {calls} | {p['rcu_per_request']} |"
        )
    lines += [
        "",
        f"Assets: console.css {css['bytes']:,} B ({css['gzip_bytes']:,} gzipped), console.js {js['bytes']:,} B "
        f"({js['gzip_bytes']:,} gzipped), named by their hash and kept `{r['asset_cache']}`. A first page view is "
        "3 requests (the page, its stylesheet, its script); every later one is 1; a campaign followed while it "
        "sends adds 2 small ones every 4 seconds (its live part and its recipients).",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipients", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--report", type=Path)
    args = ap.parse_args()
    r = run(args.recipients, args.requests)
    text = markdown(r)
    if args.report:
        args.report.write_text(text + "\n")
    print(text if args.markdown or args.report else json.dumps(r, indent=2))
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
