"""The `moonsend` command: run the local stack, send a campaign, watch its progress."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from chalicelib import log

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"


def _parse_ses_account(spec: str) -> tuple[str, float, float | None]:
    """`KEY=RATE` or `KEY=RATE/DAILY`."""
    key, _, rest = spec.partition("=")
    rate, _, daily = rest.partition("/")
    if not key or not rate:
        raise argparse.ArgumentTypeError("use ACCESS_KEY=RATE or ACCESS_KEY=RATE/DAILY")
    return key, float(rate), float(daily) if daily else None


def cmd_up(args: argparse.Namespace) -> int:
    from infra.local.stack import LocalStack, StackConfig, StackError

    config = StackConfig.from_env(
        port=args.port,
        outbox=args.outbox,
        host=args.host,
        ses_latency_ms=args.ses_latency_ms,
        free_rate=args.free_rate,
        fast_sqs=False if args.stock_sqs else None,
    )
    stack = LocalStack(config)
    try:
        stack.start()
    except StackError as exc:
        print(f"moonsend up: {exc}", file=sys.stderr)
        return 2
    assert stack.ses is not None
    for key, rate, daily in args.ses_account or []:
        stack.ses.configure(key, max_send_rate=rate, max_24h_send=daily)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    topics = " ".join(f"{name}={arn}" for name, arn in stack.topic_arns.items())
    print(f"moonsend local stack ready at {stack.endpoint} topics: {topics}")
    print(f"  outbox: {config.outbox.resolve()}")
    print("Point any AWS SDK at it with AWS_ENDPOINT_URL. Ctrl-C stops.", flush=True)
    stop.wait()
    print("stopping...", flush=True)
    stack.stop()
    print("stopped", flush=True)
    return 0


def _client_env(endpoint: str | None, stage: str) -> None:
    """Point this process's SDK clients at the endpoint, with local defaults where unset."""
    from infra.local.stack import PLATFORM_ACCESS_KEY, PLATFORM_SECRET_KEY

    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL") or DEFAULT_ENDPOINT
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    os.environ["MOONSEND_STAGE"] = stage
    if stage == "local":
        os.environ.setdefault("AWS_ACCESS_KEY_ID", PLATFORM_ACCESS_KEY)
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", PLATFORM_SECRET_KEY)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


def cmd_send(args: argparse.Namespace) -> int:
    import boto3

    from chalicelib.config import Settings
    from infra.producer import CampaignSpec, messages, new_campaign_id, publish, read_recipients

    _client_env(args.endpoint, args.stage)
    settings = Settings.from_env()
    subject = args.subject if args.subject is not None else Path(args.subject_file).read_text()
    body = Path(args.body_file).read_text(encoding="utf-8")
    sender: dict[str, Any] = {
        "region": args.region,
        "ratePerSecond": str(args.rate),
        "emailAddress": args.sender,
        "fromName": args.from_name or "",
    }
    if args.api_key:
        sender.update(apiKey=args.api_key, apiSecret=args.api_secret or "")
    campaign_id = args.campaign_id or new_campaign_id()
    spec = CampaignSpec(args.user, sender, subject.strip(), body, campaign_id, plan=args.plan)
    recipients = read_recipients(Path(args.recipients))
    if args.verify_sender:
        session = boto3.session.Session(
            aws_access_key_id=args.api_key or None, aws_secret_access_key=args.api_secret or None
        )
        session.client("sesv2", region_name=args.region).create_email_identity(EmailIdentity=args.sender)
    sns = boto3.client("sns")
    topic = settings.topic_arn(settings.resources.precompile_topic.name)
    n = publish(sns, topic, messages(spec, recipients, per_message=args.per_message))
    print(campaign_id)
    print(f"{len(recipients)} recipients in {n} SNS message(s) to {topic}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import boto3
    from rich.console import Console, Group
    from rich.live import Live

    from chalicelib.config import Settings
    from infra.status import campaign_table, progress_view, queue_table, snapshot

    _client_env(args.endpoint, args.stage)
    settings = Settings.from_env()
    sqs = boto3.client("sqs")
    # Piped or captured output has no width: print whole ids rather than "cli-t…".
    console = Console() if sys.stdout.isatty() else Console(width=200)
    if not args.watch:
        snap = snapshot(settings, sqs, args.user)
        console.print(queue_table(snap))
        console.print(campaign_table(snap))
        return 0
    with Live(console=console, refresh_per_second=2) as live:
        try:
            while True:
                snap = snapshot(settings, sqs, args.user)
                live.update(Group(queue_table(snap), progress_view(snap)))
                time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0


def cmd_recipients(args: argparse.Namespace) -> int:
    import csv

    from chalicelib.config import Settings
    from chalicelib.ledger import Ledger

    _client_env(args.endpoint, args.stage)
    settings = Settings.from_env()
    ledger = Ledger(settings.resources.ledger_table.name, settings.region)
    writer = csv.writer(sys.stdout) if args.csv else None
    if writer:
        writer.writerow(["email", "state", "reason", "message_id", "updated_at"])
    count = 0
    for e in ledger.entries(args.user, args.campaign, state=args.state):
        count += 1
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.updated_at / 1000)) if e.updated_at else ""
        if writer:
            writer.writerow([e.email, e.state or "", e.reason or "", e.message_id or "", when])
        else:
            print(f"{e.email}\t{e.state or '-'}\t{when}\t{e.message_id or ''}\t{e.reason or ''}")
    if not writer:
        print(f"{count} recipient(s)", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from infra.demo import run

    return run(port=args.port, outbox=args.outbox)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moonsend", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start the local stack (moto on loopback + the runtime)")
    up.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=None, help="port (default 4566, env MOONSEND_PORT)")
    up.add_argument(
        "--outbox",
        type=Path,
        default=None,
        help="where sent emails are written (default ./outbox, env MOONSEND_OUTBOX)",
    )
    up.add_argument(
        "--ses-latency-ms",
        type=float,
        default=None,
        help="latency of every SES send (default 50, env MOONSEND_SES_LATENCY_MS)",
    )
    up.add_argument(
        "--ses-account",
        type=_parse_ses_account,
        action="append",
        metavar="KEY=RATE[/DAILY]",
        help="an SES account's MaxSendRate and daily quota",
    )
    up.add_argument("--free-rate", type=float, default=None, help="the free plan's sends per second")
    up.add_argument(
        "--stock-sqs",
        action="store_true",
        help="use moto's own SQS model (slow at depth; for comparison in benches)",
    )
    up.set_defaults(func=cmd_up)

    send = sub.add_parser("send", help="publish a campaign to PrecompileEmail")
    send.add_argument("--user", required=True, help="the tenant's userId")
    send.add_argument("--from", dest="sender", required=True, help="sender address")
    send.add_argument("--from-name", default="")
    g = send.add_mutually_exclusive_group(required=True)
    g.add_argument("--subject", help="subject template (Liquid)")
    g.add_argument("--subject-file", help="file with the subject template")
    send.add_argument("--body-file", required=True, help="file with the HTML body template")
    send.add_argument("--recipients", required=True, help="CSV (email + metadata columns) or JSONL")
    send.add_argument("--rate", type=float, default=1.0, help="ratePerSecond")
    send.add_argument("--api-key", default=None, help="the tenant's SES access key id")
    send.add_argument("--api-secret", default=None, help="the tenant's SES secret key")
    send.add_argument("--region", default="us-east-1")
    send.add_argument("--plan", choices=["free", "paid"], default=None)
    send.add_argument("--campaign-id", default=None)
    send.add_argument("--per-message", type=int, default=200, help="recipients per SNS message")
    send.add_argument(
        "--verify-sender",
        action="store_true",
        help="verify the sender address in the SES account first (local stack)",
    )
    send.add_argument("--endpoint", default=None, help=f"AWS endpoint (default {DEFAULT_ENDPOINT})")
    send.add_argument("--stage", default="local")
    send.set_defaults(func=cmd_send)

    st = sub.add_parser("status", help="queue depths and campaign counts")
    st.add_argument("--user", default=None)
    st.add_argument("--watch", action="store_true", help="live progress bars")
    st.add_argument("--interval", type=float, default=1.0)
    st.add_argument("--endpoint", default=None)
    st.add_argument("--stage", default="local")
    st.set_defaults(func=cmd_status)

    rc = sub.add_parser("recipients", help="each recipient of a campaign with its state and reason")
    rc.add_argument("--user", required=True)
    rc.add_argument("--campaign", required=True)
    rc.add_argument("--state", choices=["queued", "sent", "failed", "rejected", "suppressed"], default=None)
    rc.add_argument("--csv", action="store_true", help="CSV with a header, for large campaigns")
    rc.add_argument("--endpoint", default=None)
    rc.add_argument("--stage", default="local")
    rc.set_defaults(func=cmd_recipients)

    demo = sub.add_parser("demo", help="run three tenants' campaigns through the local stack")
    demo.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    demo.add_argument("--outbox", type=Path, default=Path("outbox"))
    demo.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    level = os.environ.get("MOONSEND_LOG_LEVEL", "WARNING")
    logging.basicConfig(level=level, format="%(message)s")
    log.set_level(level)  # the handlers' JSON lines: warnings and errors only, unless asked
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
