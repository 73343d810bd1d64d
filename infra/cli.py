"""The `moonsend` command: run the local stack, send a campaign, watch its progress."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chalicelib.core import log
from infra.operator_env import DEFAULT_ENDPOINT, choose_endpoint, client_env, stages
from infra.ops.server import OPS_PAGE_SAYS, OPS_PORT

__all__ = ["DEFAULT_ENDPOINT", "build_parser", "client_env", "main"]
ENDPOINT_HELP = f"AWS endpoint (default: AWS's own for a deployed stage, {DEFAULT_ENDPOINT} for --stage local)"


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
        api_port=args.api_port,
        aws_timing=args.aws_timing or None,
    )
    from infra.local.state import mark_running, previous_run, state_path, unmark_running

    # A stack killed without its clean stop saved nothing: say so, rather than start empty as if nothing was.
    before = previous_run(config.outbox)
    if before is not None and (before.alive or not args.fresh):
        print(f"moonsend up: {before.explain(config.outbox.resolve())}", file=sys.stderr)
        return 2
    config.state_file = state_path(config.outbox)
    if args.fresh and config.state_file.exists():
        config.state_file.unlink()
    stack = LocalStack(config)
    print("creating the local stack from the packaged template (packaging after a code change: ~20 s)", flush=True)
    mark_running(config.outbox)
    try:
        stack.start()
    except StackError as exc:
        unmark_running(config.outbox)
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
    kept = f"loaded ({stack.loaded.summary()})" if stack.loaded else "started empty"
    print(f"  state: {config.state_file.resolve()}: {kept}; saved when stopped with Ctrl-C or SIGTERM (--fresh: empty)")
    print(f"  app's HTTP routes (unsubscribe links): {stack.api_url}")
    from infra.demo import console_way_back

    for line in console_way_back(stack):  # the demo's saved state: its admin's way in
        print(f"  {line}")
    from infra.ops.server import start_beside

    ops = start_beside(stack.endpoint, args.ops_port)
    if config.aws_timing:
        print("  AWS's timing: alarms every minute on SQS's published metrics, an inactive queue's 15 min late")
    print("Point any AWS SDK at it with AWS_ENDPOINT_URL. Ctrl-C stops.", flush=True)
    stop.wait()
    print("stopping: running functions finish, then the state is saved ...", flush=True)
    if ops is not None:
        ops.terminate()
    stack.stop()
    if stack.saved is not None:
        unmark_running(config.outbox)  # saved: the next start loads it
        print(f"stopped; state {stack.saved.summary()} in {config.state_file}", flush=True)
    else:
        print("stopped", flush=True)
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    import boto3

    from chalicelib.core.config import Settings
    from infra.producer import CampaignSpec, messages, new_campaign_id, publish, read_recipients

    outputs = client_env(args.endpoint, args.stage)
    settings = Settings.from_env()
    subject = args.subject if args.subject is not None else Path(args.subject_file).read_text()
    body = Path(args.body_file).read_text(encoding="utf-8")
    sender: dict[str, Any] = {
        "ratePerSecond": str(args.rate),
        "emailAddress": args.sender,
        "fromName": args.from_name or "",
    }
    if args.region:
        sender["region"] = args.region
    if args.api_key:
        sender.update(apiKey=args.api_key, apiSecret=args.api_secret or "")
    campaign_id = args.campaign_id or new_campaign_id()
    options = {k: v for k, v in (("scheduledAt", args.at), ("expiresAfter", args.expires_after)) if v}
    spec = CampaignSpec(args.user, sender, subject.strip(), body, campaign_id, plan=args.plan, options=options)
    recipients = read_recipients(Path(args.recipients))
    if args.verify_sender:
        session = boto3.session.Session(
            aws_access_key_id=args.api_key or None, aws_secret_access_key=args.api_secret or None
        )
        session.client("sesv2", region_name=args.region).create_email_identity(EmailIdentity=args.sender)
    sns = boto3.client("sns")
    topic = outputs.get("PrecompileEmailTopicArn") or settings.topic_arn(settings.resources.precompile_topic.name)
    n = publish(sns, topic, messages(spec, recipients, per_message=args.per_message))
    print(campaign_id)
    print(f"{len(recipients)} recipients in {n} SNS message(s) to {topic}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    import boto3
    from rich.console import Console, Group
    from rich.live import Live

    from chalicelib.core.config import Settings
    from infra.status import campaign_table, paused_table, progress_view, queue_table, snapshot

    client_env(args.endpoint, args.stage)
    settings = Settings.from_env()
    sqs = boto3.client("sqs")
    # Piped or captured output has no width: print whole ids rather than "cli-t…".
    console = Console() if sys.stdout.isatty() else Console(width=320)
    if not args.watch:
        snap = snapshot(settings, sqs, args.user)
        console.print(queue_table(snap))
        console.print(campaign_table(snap))
        if snap.paused:
            console.print(paused_table(snap))
        return 0
    with Live(console=console, refresh_per_second=2) as live:
        try:
            while True:
                snap = snapshot(settings, sqs, args.user)
                live.update(Group(queue_table(snap), progress_view(snap)))
                time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0


def cmd_replay_failed(args: argparse.Namespace) -> int:
    client_env(args.endpoint, args.stage)
    acted = _operator(_container()).replay(args.function)
    _unlogged(acted)
    if acted.report is None:  # it failed before it could say what it replayed
        print(f"replay-failed: {acted.message}", file=sys.stderr)
        return 1
    for r in acted.report.replayed:
        print(f"replayed {r.function} (request {r.request_id}, {r.condition})")
    print(f"{len(acted.report.replayed)} failed invocation(s) replayed")
    if acted.report.unreadable:
        print(
            f"{len(acted.report.unreadable)} message(s) are no invocation record, left on the queue: "
            f"{acted.report.unreadable}"
        )
        return 1
    return 0


def _operator(container: Any) -> Any:
    """The operator's actions from the CLI: each recorded in the operator log (infra.ops.actions)."""
    from infra.ops.build import operator_actions

    return operator_actions(container, container.settings, "cli")


def _unlogged(acted: Any) -> None:
    """Said on stderr when the operator log could not keep an action (the action stands as it was taken)."""
    if acted.unlogged:
        print(f"moonsend: warning: {acted.unlogged}", file=sys.stderr)


def cmd_ops(args: argparse.Namespace) -> int:
    """The operator's page on loopback, with this shell's credentials, until Ctrl-C or SIGTERM."""
    from chalicelib.core.config import Settings
    from infra.ops.build import ops_app
    from infra.ops.server import serve

    client_env(args.endpoint, args.stage)
    app = ops_app(_container(), Settings.from_env(), args.port)
    try:
        server, _thread = serve(app, args.port)
    except OSError as exc:
        print(f"moonsend ops: port {args.port} on 127.0.0.1: {exc.strerror or exc}", file=sys.stderr)
        return 2
    app.port = server.server_port
    print(f"{OPS_PAGE_SAYS} http://127.0.0.1:{app.port}{app.sign_in_path}", flush=True)
    print(
        f"  stage {args.stage}, acting as {app.who}; the link holds this process's key: keep it to yourself", flush=True
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.until_stdin_closes:  # `moonsend up`'s own: it ends with the stack, however the stack ends

        def until_closed() -> None:
            sys.stdin.read()
            stop.set()

        threading.Thread(target=until_closed, daemon=True).start()
    stop.wait()
    server.shutdown()
    return 0


def cmd_recipients(args: argparse.Namespace) -> int:
    import csv

    from chalicelib.core.config import Settings
    from chalicelib.stores.ledger import Ledger
    from infra.terminal import plain, spreadsheet_safe

    client_env(args.endpoint, args.stage)
    settings = Settings.from_env()
    ledger = Ledger(settings.resources.ledger_table.name, settings.region)
    writer = csv.writer(sys.stdout) if args.csv else None
    if writer:
        writer.writerow(["email", "state", "reason", "message_id", "updated_at", "feedback", "retries"])
    count = 0
    cursor = None
    if args.limit:
        entries, cursor = ledger.page(args.user, args.campaign, state=args.state, limit=args.limit, after=args.after)
    else:
        entries = ledger.entries(args.user, args.campaign, state=args.state)
    for e in entries:
        count += 1
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.updated_at / 1000)) if e.updated_at else ""
        if writer:
            # Tenant and recipient text kept as it is, except that no cell may start a spreadsheet formula.
            row = [e.email, e.state or "", e.reason or "", e.message_id or "", when, e.feedback or ""]
            writer.writerow([*(spreadsheet_safe(v) for v in row), e.retries])
        else:
            extra = f"\t{plain(e.feedback).replace(chr(9), ' ')}" if e.feedback else ""
            # Tenant and recipient text, shown and never obeyed by the terminal.
            fields = (e.email, e.state or "-", when, e.message_id or "", e.reason or "")
            print("\t".join(plain(f).replace("\t", " ") for f in fields) + extra)
    if not writer:
        print(f"{count} recipient(s)", file=sys.stderr)
    if cursor:
        print(f"more: --after {cursor}", file=sys.stderr)
    return 0


def _registry() -> Any:
    """The tenant registry with the operator's credentials (after `client_env`)."""
    from chalicelib.core.config import Settings
    from chalicelib.stores.tenant_secrets import TenantSecrets
    from chalicelib.stores.tenants import TenantRegistry

    settings = Settings.from_env()
    r = settings.resources
    secrets = TenantSecrets.of(r.tenant_secrets_alias, settings.region)
    return TenantRegistry(r.tenants_table.name, settings.region, secrets)


def cmd_seal_keys(args: argparse.Namespace) -> int:
    """Encrypt every tenant's SES secret still stored in the clear (rows written before secrets were
    encrypted; each is sealed at its next write anyway). Safe to run again: sealed rows are left as they are."""
    client_env(args.endpoint, args.stage)
    registry = _registry()
    users = registry.unsealed()
    sealed = sum(registry.seal_stored(u) for u in users)
    print(f"{sealed} tenant(s) had SES secrets stored in the clear: now encrypted with the stage's key")
    return 0


def cmd_index_campaigns(args: argparse.Namespace) -> int:
    """List the campaigns of a previous release in GET /campaigns: each with a fixed Sender and no created time
    gets the time of its first send (or its schedule). A scan of the campaigns table; safe to run again."""
    import time as _time

    client_env(args.endpoint, args.stage)
    listed = _container().stats.list_unlisted(int(_time.time() * 1000))
    print(f"{listed} campaign(s) of a previous release are now listed (GET /campaigns, moonsend campaign list)")
    return 0


def cmd_count_released(args: argparse.Namespace) -> int:
    """Count the releases of each campaign begun before releases were counted, so that GET /campaigns' progress
    and state add up (a campaign with recipients sent now and others scheduled later). Safe to run again."""
    client_env(args.endpoint, args.stage)
    container = _container()
    counted = container.stats.count_releases(container.ledger.count)
    print(
        f"{counted} campaign(s) with scheduled recipients, begun before releases were counted, now count them "
        "(GET /campaigns' progress and state)"
    )
    return 0


def cmd_keep_parked(args: argparse.Namespace) -> int:
    """Move paused campaigns' parked email out of the 45-day lifecycle of `scheduled/`. Safe to run again."""
    from chalicelib.queueing.parked_email import keep_parked

    client_env(args.endpoint, args.stage)
    kept, gone = keep_parked(_container().schedule)
    print(f"{kept} parked batch(es) moved under parked/, where no lifecycle expires them ({gone} resumed meanwhile)")
    return 0


def cmd_tenant(args: argparse.Namespace) -> int:
    from chalicelib.core.config import Settings

    client_env(args.endpoint, args.stage)
    settings = Settings.from_env()
    registry = _registry()
    if args.action == "audit-from":
        return _audit_from(args)
    if not args.user:
        print(f"tenant {args.action}: --user is required", file=sys.stderr)
        return 2
    if args.action == "assign-from":  # also before the tenant's first message: its first send may need it
        return _assign_from(args, registry)
    if registry.get(args.user) is None:
        print(f"no tenant {args.user!r}", file=sys.stderr)
        return 1
    if args.action == "key":
        from chalicelib.control.api_keys import ApiKeys
        from chalicelib.stores.api_keys import ApiKeyStore

        keys = ApiKeys(ApiKeyStore(settings.resources.api_keys_table.name, settings.region), registry)
        key = keys.replace_all(args.user)
        print(f"{args.user}: new API key (shown once; every other key of the tenant stops working):\n{key}")
        return 0
    if args.action in ("keys", "move-keys"):
        return _tenant_sender(args, registry)
    if args.action == "invite":
        return _invite(args, settings)
    if args.action == "show":  # GET /tenant
        from infra.tenant_views import tenant_view

        return _show_answer(
            "tenant show", _asked(lambda: _container().tenant_view.get_for(args.user)), tenant_view, args.json
        )
    actions = _operator(_container())
    from infra.terminal import plain

    # An operator's own pause by default, or the tenant's at its request; a resume lifts every owner's pause
    # by default, or only `--owner`'s (docs/operations.md, "Who pauses a tenant").
    owner = None if args.owner in (None, "all") else args.owner
    if args.action == "pause":
        if args.owner not in (None, "operator", "tenant"):
            print("pause --owner: operator or tenant (the guard and SES pause by themselves)", file=sys.stderr)
            return 2
        done = actions.pause(args.user, args.reason, owner or "operator")
    else:
        done = actions.resume(args.user, owner)
    _unlogged(done)
    print(f"{args.user}: {plain(done.message)}", file=sys.stdout if done.ok else sys.stderr)
    return 0 if done.ok else 1


def _invite(args: argparse.Namespace, settings: Any) -> int:
    """A person added to the tenant's console (or given the role, if one already), invited by the operator:
    an email with a sign-in link when the stage has a console From address, and the link printed on
    `--link` (for a first admin whose mail is slow, or a stage that emails none)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from chalicelib.api.principal import Role
    from chalicelib.console.links import LINK_S
    from chalicelib.console.mail import invitation_mail
    from chalicelib.console.people import PersonRefused
    from infra.terminal import plain

    container = _container()
    try:
        invited = container.people.invite(args.user, args.address or "", Role[args.role.upper()], "operator")
    except PersonRefused as why:
        print(f"invite: {plain(str(why))}", file=sys.stderr)
        return 2
    who = invited.person.address
    print(f"{args.user}: {who} is {'now' if invited.new else 'already one of its people, now'} its {args.role}")
    base = settings.link_base_url or settings.api_url
    if not base:
        print("the stage's URL is unknown (no stack output EndpointURL): no link made", file=sys.stderr)
        return 0
    console = f"{base.rstrip('/')}/console"
    if args.link:  # first: a refused email below must not take the way in with it
        print(f"sign-in link (once, {LINK_S // 60} minutes): {console}/link/{container.sign_in_links.mint(who)}")
    if settings.console_from:
        token = container.sign_in_links.mint(who)
        mail = invitation_mail(
            settings.console_from,
            who,
            args.user,
            args.role,
            "The operator",
            f"{console}/link/{token}",
            f"{console}/sign-in",
            LINK_S // 60,
        )
        try:
            container.console_mailer.send(mail)
        except (ClientError, BotoCoreError) as exc:  # SES's sandbox, an unverified From: said, not raised
            print(f"the invitation could not be emailed: {plain(str(exc))}", file=sys.stderr)
        else:
            print(f"an invitation with a sign-in link was emailed to {who} from {settings.console_from}")
    else:
        print("this stage emails no sign-in links (MOONSEND_CONSOLE_FROM is not set): use --link", file=sys.stderr)
    print(f"later, they ask for a link at {console}/sign-in")
    return 0


def _assign_from(args: argparse.Namespace, registry: Any) -> int:
    """A free-plan From address given to the tenant, whoever had it: checked to be an address, and the
    identity of the platform's SES account that covers it said (none: SES refuses its email until one is
    verified). A tenant not registered yet may be given one: its first message may be from it."""
    import time

    from chalicelib.core.fields import is_email, is_id
    from infra.terminal import plain

    if not is_id(args.user):
        print(f"assign-from: {plain(args.user)!r} is not a tenant id", file=sys.stderr)
        return 2
    if not args.address or not is_email(args.address):
        print(f"assign-from: --address {plain(args.address or '')!r} is not an email address", file=sys.stderr)
        return 2
    container = _container()
    coverage = container.platform_identities.covering(args.address)
    previous = container.free_addresses.assign(args.user, args.address, int(time.time() * 1000))
    was = f" (it was {plain(previous)}'s)" if previous and previous != args.user else ""
    new = "" if registry.get(args.user) is not None else " (no message from this tenant yet)"
    said = f"{plain(args.address)} is now its free-plan From address{was}"
    print(f"{args.user}{new}: {said}")
    print(f"covered in the platform's SES account by {coverage.describe()}")
    _unlogged(_operator(container).record("assign-from", args.user, args.address, True, said))
    if not (coverage.own or coverage.domain):
        print(
            f"warning: SES refuses email from {plain(args.address)} until the address or its domain is verified "
            "in the platform's SES account",
            file=sys.stderr,
        )
    return 0


def _audit_from(args: argparse.Namespace) -> int:
    """The free-plan From claims made by a first send whose address has no verified identity of its own
    (claimed under the earlier rule: `security@` of the platform's domain by any free tenant); `--fix` drops
    them, and each such address is then refused until an operator assigns it. Exit 1 when some are listed
    and not dropped."""
    from datetime import UTC, datetime

    from infra.terminal import plain

    addresses = _container().free_addresses
    claims = addresses.unproven()
    for c in claims:
        since = datetime.fromtimestamp(c.claimed_at / 1000, UTC).isoformat() if c.claimed_at else "unknown"
        fate = ""
        if args.fix:
            fate = " -> dropped" if addresses.release(c) else " -> kept (reassigned or assigned meanwhile)"
        print(
            f"{plain(c.address)}  claimed by {plain(c.owner)} since {since}, covered by {c.coverage.describe()}{fate}"
        )
    if not claims:
        print("no free-plan From claim lacks an identity of its own")
    elif args.fix:
        print(
            f"{len(claims)} claim(s) checked; a dropped address is refused until an operator assigns it "
            "(moonsend tenant assign-from --user <tenant> --address <address>)"
        )
    else:
        print(f"{len(claims)} claim(s) without an identity of their own: drop them with --fix")
    return 1 if claims and not args.fix else 0


def _tenant_sender(args: argparse.Namespace, registry: Any) -> int:
    """The tenant's key versions, an explicit move to another AWS account."""
    from chalicelib.core.contract import Sender
    from chalicelib.core.errors import SenderRefused

    container = _container()
    if args.action == "move-keys":
        # From the environment, never the command line: arguments are visible to every user of the machine.
        key, secret = os.environ.get("MOONSEND_NEW_API_KEY"), os.environ.get("MOONSEND_NEW_API_SECRET")
        if not key or not secret:
            print("move-keys reads the new keys from MOONSEND_NEW_API_KEY and MOONSEND_NEW_API_SECRET", file=sys.stderr)
            return 2
        try:
            new = registry.replace_keys(
                args.user, Sender("", "", args.region, key, secret, 1.0), container.ses.account_of
            )
        except SenderRefused as exc:
            print(f"{args.user}: {exc}", file=sys.stderr)
            return 1
        print(f"{args.user}: keys version {new.version} (AWS account {new.account}) are now its keys")
        return 0
    tenant = registry.get(args.user, fresh=True)
    for k in tenant.keys:
        current = "  current" if k is tenant.current_keys else ""
        print(f"version {k.version}\t{k.api_key[:4]}...{k.api_key[-4:]}\taccount {k.account or '?'}{current}")
    if not tenant.keys:
        print(f"{args.user}: no keys registered (it sends on the free plan)")
    return 0


def _container() -> Any:
    """The app's own objects, built from this process's environment (after `client_env`)."""
    from chalicelib import wiring

    wiring.reset()
    return wiring.container()


def _query(**given: object) -> dict[str, str]:
    """A tenant-API route's query parameters from a command's options (None: not given)."""
    return {name: str(value) for name, value in given.items() if value is not None}


def _console() -> Any:
    from rich.console import Console

    # Piped or captured output has no width: print whole ids and addresses rather than "cli-t…".
    return Console() if sys.stdout.isatty() else Console(width=320)


def _asked(call: Callable[[], dict[str, Any]], status: int = 200) -> Any:
    """The domain's answer to a tenant's request made by the operator, as the API would give it."""
    from chalicelib.api.answers import answer_of

    return answer_of(call, status)


def _show_answer(command: str, answer: Any, view: Any, as_json: bool, *, more: str = "more") -> int:
    """A tenant-API answer on the terminal: a 4xx's message on stderr (exit 2 for a 400: what was given is
    wrong; 1 otherwise), the JSON body as the API answers it (`--json`), or `view(body)` with the next page's
    cursor on stderr. JSON is printed with every non-ASCII character escaped: no control reaches the terminal."""
    import json

    from infra.terminal import plain

    if answer.status >= 400:
        print(f"{command}: {plain(answer.body.get('error', answer.status))}", file=sys.stderr)
        return 2 if answer.status == 400 else 1
    if as_json:
        print(json.dumps(answer.body, indent=2))
        return 0
    _console().print(view(answer.body))
    cursor = answer.body.get("next")
    if cursor:
        print(f"{more}: --after {cursor}", file=sys.stderr)
    return 0


def _campaign_read(args: argparse.Namespace, c: Any) -> int:
    """`campaign list` and `campaign show`: GET /campaigns and GET /campaigns/{id}, for the tenant `--user`."""
    from infra import tenant_views

    if args.action == "list":
        query = _query(state=args.state, limit=args.limit, after=args.after)
        answer = _asked(lambda: c.campaign_reads.list_for(args.user, query))
        return _show_answer("campaign list", answer, lambda b: tenant_views.campaigns_table(b["campaigns"]), args.json)
    timeline = _query(timelineAfter=args.timeline_after)
    answer = _asked(lambda: c.campaign_reads.show_for(args.user, args.campaign, timeline))
    if answer.status == 404:
        print(f"no campaign {args.campaign!r} of {args.user!r}", file=sys.stderr)
        return 1
    code = _show_answer("campaign show", answer, tenant_views.campaign_view, args.json)
    more = answer.body.get("timeline", {}).get("next") if answer.status == 200 else None
    if more and not args.json:
        print(f"more minutes: --timeline-after {more}", file=sys.stderr)
    return code


def _campaign_send(args: argparse.Namespace) -> int:
    """`campaign send`: POST /campaigns, as the operator, for the tenant `--user`."""
    from infra import uploading

    if not (args.subject and args.body and (args.upload or args.to)):
        print("campaign send needs --subject, --body, and --upload (an upload's id) or --to", file=sys.stderr)
        return 2
    body = Path(args.body[1:]).read_text(encoding="utf-8") if args.body.startswith("@") else args.body
    given: dict[str, Any] = {"subject": args.subject, "body": body}
    if args.upload:
        given["uploadId"] = args.upload
    else:
        given["recipients"] = [{"email": a} for a in args.to]
    if args.at:
        given["scheduledAt"] = args.at
    if args.from_address:
        given["from"] = {"emailAddress": args.from_address}
    client_env(args.endpoint, args.stage)
    return uploading.send(_container(), args.user, given, args.idempotency_key)


def cmd_upload(args: argparse.Namespace) -> int:
    from infra import uploading

    path = Path(args.file)
    if not path.is_file():
        print(f"upload: no file {args.file}", file=sys.stderr)
        return 2
    kind = args.format or ("jsonl" if path.suffix.lower() in (".jsonl", ".ndjson") else "csv")
    client_env(args.endpoint, args.stage)
    return uploading.upload(_container(), args.user, path, kind, args.address_column)


def cmd_campaign(args: argparse.Namespace) -> int:
    from chalicelib.core.contract import parse_instant

    if args.action == "send":
        return _campaign_send(args)
    if args.action != "list" and not args.campaign:
        print(f"campaign {args.action} needs --id (or --campaign): campaign list shows them", file=sys.stderr)
        return 2
    client_env(args.endpoint, args.stage)
    c = _container()
    if args.action in ("list", "show"):
        return _campaign_read(args, c)
    if c.stats.get(args.user, args.campaign) is None:
        print(f"no campaign {args.campaign!r} of {args.user!r}", file=sys.stderr)
        return 1
    actions = c.actions
    if args.action == "retry-failed":
        r = actions.retry_failed(args.user, args.campaign, args.reason_contains)
        print(
            f"{args.user}/{args.campaign}: {r.requeued} failed recipient(s) queued again "
            f"(of {r.matched} matching); {len(r.no_copy)} without a kept copy; {len(r.not_queued)} not queued"
            + (f"; {r.requeued_again} an earlier retry queued, queued once more" if r.requeued_again else "")
        )
        for email in r.no_copy[:20]:
            print(f"  no copy kept: {email}", file=sys.stderr)
        return 0 if not r.not_queued else 1
    if args.action == "schedule":
        if not args.at:
            print("schedule needs --at (ISO 8601 with offset, e.g. 2026-12-01T09:00:00+01:00)", file=sys.stderr)
            return 2
        try:
            at = parse_instant(args.at)
        except ValueError as exc:
            print(f"--at: {exc}", file=sys.stderr)
            return 2
        done = actions.reschedule(args.user, args.campaign, at)
    elif args.action == "resume":  # as the API resumes: a publication the pause stopped goes on too
        answer = _asked(lambda: c.tenant_api.resume(args.user, args.campaign))
        said = answer.body.get("message") or answer.body.get("error", "")
        print(f"{args.user}/{args.campaign}: {said}", file=sys.stdout if answer.status == 200 else sys.stderr)
        return 0 if answer.status == 200 else 1
    elif args.action == "cancel":  # as the API cancels, and recorded in the operator log
        done = _operator(c).cancel(args.user, args.campaign)
        _unlogged(done)
    else:
        done = actions.pause(args.user, args.campaign)
    print(f"{args.user}/{args.campaign}: {done.message}", file=sys.stdout if done.ok else sys.stderr)
    return 0 if done.ok else 1


def cmd_digest(args: argparse.Namespace) -> int:
    from chalicelib.digest.assembly import DigestBusy, DigestNotReady
    from chalicelib.digest.status import DigestStatusReader

    client_env(args.endpoint, args.stage)
    c = _container()
    if args.action == "run":
        try:
            run = c.digest_assembly.run(args.user, args.digest)  # the period of this minute
        except (DigestBusy, DigestNotReady) as exc:
            print(f"{args.user}/{args.digest}: {exc}", file=sys.stderr)
            return 1
        print(f"{args.user}/{args.digest}: period {run.period}")
        for name, value in run.as_dict().items():
            if name not in ("user_id", "digest_id", "period"):
                print(f"  {name.replace('_', ' ')}: {value}")
        return 0
    status = DigestStatusReader(c.digests).status(args.user, args.digest)
    if status is None:
        print(f"no digest {args.digest!r} of {args.user!r}", file=sys.stderr)
        return 1
    d = status.as_dict()
    print(f"{args.user}/{args.digest}: {'ready' if status.head.complete else 'not ready (definition incomplete)'}")
    print(f"  schedule: {d['schedule']} ({'scheduled' if status.head.scheduled else 'not scheduled yet'})")
    print(f"  next run: {d['nextRunAt']}")
    last = status.head.last_run or {}
    summary = f", {last.get('emails', 0)} email(s), {last.get('items_mailed', 0)} item(s)" if last else ""
    print(f"  last run: {d['lastRunAt']}{summary}{' (running now)' if status.head.running else ''}")
    more = "" if status.counts_complete else "+"  # the status stopped reading: at least these
    print(f"  recipients pending: {status.recipients_pending}{more} of {status.recipients}{more} with items")
    print(
        f"  items stored: {status.items_stored}{more} ({status.items_pending}{more} pending, "
        f"{status.items_expired}{more} past the window, {status.items_retracted}{more} retracted)"
    )
    for failure in last.get("failures") or []:
        print(f"  last run failed for {failure['recipient']} ({failure['step']}): {failure['reason']}")
    return 0


def cmd_webhook(args: argparse.Namespace) -> int:
    import json

    client_env(args.endpoint, args.stage)
    registration = _container().webhook_registration
    if args.action == "add":
        if not args.url:
            print("add needs --url", file=sys.stderr)
            return 2
        body: dict[str, object] = {"url": args.url, "maxEventsPerRequest": args.max_events}
        if args.events:
            body["eventTypes"] = [t.strip() for t in args.events.split(",") if t.strip()]
        answer = _asked(lambda: registration.add(args.user, body), 201)
    elif args.action == "list":
        answer = _asked(lambda: registration.list(args.user))
    elif not args.id:
        print(f"{args.action} needs --id (moonsend webhook list shows them)", file=sys.stderr)
        return 2
    elif args.action == "remove":
        answer = _asked(lambda: registration.remove(args.user, args.id))
    elif args.action == "replay":
        answer = _asked(lambda: registration.replay(args.user, args.id))
    else:
        answer = _asked(lambda: registration.test(args.user, args.id))
    ok = answer.status < 300 and answer.body.get("ok", True)
    if ok and "job" in answer.body and not args.no_wait:
        answer = _wait_for_job(registration, args.user, args.id, answer, args.wait_s)
        ok = answer.status < 300
    print(json.dumps(answer.body, indent=2), file=sys.stdout if ok else sys.stderr)
    if args.action == "add" and ok:
        print("the secret is shown this once: keep it where your receiver verifies signatures", file=sys.stderr)
    return 0 if ok else 1


def _wait_for_job(registration: Any, user: str, endpoint_id: str, answer: Any, wait_s: float) -> Any:
    """The answer of a replay or a removal once its background job is done (webhook_jobs), its progress on
    stderr meanwhile: `replayed` (or `deleted`) is how many held requests it handled. A job still running
    after `wait_s` is shown as it is (exit status 1); `webhook list` shows it until it is done."""
    deadline = time.monotonic() + wait_s
    job = registration.job(user, endpoint_id)
    while job is not None and job.state == "running" and time.monotonic() < deadline:
        print(f"{job.kind}: {job.done} parked deliveries done", file=sys.stderr)
        time.sleep(1.0)
        job = registration.job(user, endpoint_id)
    if job is None:  # done long ago and expired: nothing to show but what was answered
        return answer
    count: dict[str, object] = {"deleted": job.done}
    if job.kind == "replay":  # how many it did: exact once it is done
        count = {"replayed": job.done, "replayedIsLowerBound": job.state != "done"}
    body = {**answer.body, "job": job.public(time.time()), **count}
    from chalicelib.api.answers import DomainAnswer

    return DomainAnswer(answer.status if job.state == "done" else 504, body)


def _addresses(args: argparse.Namespace) -> list[str]:
    """The addresses given on the command line, then those of `--file` (one a line; blank lines skipped)."""
    given = list(args.addresses)
    if getattr(args, "file", None):
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        given += [line.strip() for line in text.splitlines() if line.strip()]
    return given


def _suppression_add(user: str, api: Any, addresses: list[str], reason: str | None) -> int:
    """POST /suppressions, MAX_ADD addresses at a time. A batch with an invalid address adds nothing, and
    no later batch is tried: each invalid one is named with its position in what was given."""
    from chalicelib.control.suppression_api import MAX_ADD
    from infra.terminal import plain

    added = already = 0
    for start in range(0, len(addresses), MAX_ADD):
        batch = addresses[start : start + MAX_ADD]
        body: dict[str, Any] = {"addresses": batch, **({"reason": reason} if reason is not None else {})}
        answer = _asked(functools.partial(api.add_for, user, body))
        if answer.status != 200:
            print(f"suppression add: {plain(answer.body['error'])}", file=sys.stderr)
            for bad in answer.body.get("invalid", []):
                print(f"  #{start + bad['index'] + 1}: {plain(bad['address'])!r}: {bad['why']}", file=sys.stderr)
            if start:
                print(f"  (the {start} address(es) before this batch of {MAX_ADD} were taken)", file=sys.stderr)
            return 2 if answer.status == 400 else 1
        added += answer.body["added"]
        already += answer.body["alreadySuppressed"]
    print(f"{user}: {added} address(es) added to its suppression list; {already} already on it")
    return 0


def cmd_suppression(args: argparse.Namespace) -> int:
    """The tenant's suppression list: GET, POST /suppressions, DELETE /suppressions/{address}."""
    from infra import tenant_views
    from infra.terminal import plain

    addresses = _addresses(args) if args.action != "list" else []
    if args.action == "add" and not addresses:
        print("suppression add: give addresses, or --file with one a line", file=sys.stderr)
        return 2
    client_env(args.endpoint, args.stage)
    api = _container().suppression_api
    if args.action == "list":
        query = _query(reason=args.reason, prefix=args.prefix, limit=args.limit, after=args.after)
        answer = _asked(lambda: api.list_for(args.user, query))
        return _show_answer(
            "suppression list", answer, lambda b: tenant_views.suppressions_table(b["suppressions"]), args.json
        )
    if args.action == "add":
        return _suppression_add(args.user, api, addresses, args.reason)
    answer = _asked(lambda: api.remove_for(args.user, addresses[0]))
    if answer.status == 200:
        still = answer.body.get("stillSuppressed")
        after = f"still not sent to: {plain(still)}" if still else "it may be sent to again"
        print(f"{args.user}: {plain(answer.body['email'])} lifted: {after}")
        return 0
    if answer.status == 409:
        print(f"{args.user}: {plain(answer.body['error'])}", file=sys.stderr)
    else:
        print(f"{args.user}: {plain(addresses[0])} is not on its suppression list", file=sys.stderr)
    return 1


def cmd_events(args: argparse.Namespace) -> int:
    """GET /events: the tenant's recorded events, oldest first; the next page's cursor, now or later."""
    from infra import tenant_views

    client_env(args.endpoint, args.stage)
    query = _query(type=args.type, campaign=args.campaign, since=args.since, after=args.after, limit=args.limit)
    answer = _asked(lambda: _container().event_reads.list_for(args.user, query))
    return _show_answer(
        "events", answer, lambda b: tenant_views.events_table(b["events"]), args.json, more="next (now or later)"
    )


def cmd_link_key(args: argparse.Namespace) -> int:
    """The keys that sign the stage's links, with the operator's credentials: never a key's value printed."""
    import boto3

    from chalicelib.core.config import Settings

    client_env(args.endpoint, args.stage)
    settings = Settings.from_env()
    sm = boto3.client("secretsmanager", region_name=args.region) if args.region else boto3.client("secretsmanager")
    outbox = None
    if args.stage == "local":
        outbox = args.outbox or Path(os.environ.get("MOONSEND_OUTBOX", "outbox"))
    return _link_key(sm, settings.resources.link_secret_name, args.action, args.kid, args.force, outbox, time.time())


def _link_key(sm: Any, name: str, action: str, kid: str | None, force: bool, outbox: Path | None, now: float) -> int:
    from botocore.exceptions import ClientError

    from chalicelib.core.links import REFRESH_S, RETIRE_AFTER_S, LinkKeys

    try:
        keys = LinkKeys.parse(sm.get_secret_value(SecretId=name)["SecretString"])
    except ClientError as exc:
        print(f"link-key: the secret {name}: {exc.response['Error']['Code']}", file=sys.stderr)
        return 1
    except ValueError as exc:  # its message names what is wrong, never a value
        print(f"link-key: {name}: {exc}", file=sys.stderr)
        return 1
    if action == "list":
        _print_link_keys(keys, now)
        return 0
    before = keys
    if action == "rotate":
        keys = keys.rotated(now)
        said = (
            f"{keys.current} is now the current key: new links name it, every container signs with it within "
            f"{int(REFRESH_S // 60)} minutes; the links signed with the others still verify"
        )
    else:
        if not kid:
            print("retire needs --kid (moonsend link-key list shows them)", file=sys.stderr)
            return 2
        refusal = keys.retire_refusal(kid, now)
        if keys.get(kid) is None or kid == keys.current:
            print(f"link-key: {refusal}", file=sys.stderr)
            return 1
        if refusal and not force:
            print(f"link-key: {refusal}; --force drops it anyway (the links it signed stop working)", file=sys.stderr)
            return 1
        keys = keys.without(kid)
        said = f"{kid} retired: links signed with it no longer verify"
    try:
        sm.put_secret_value(SecretId=name, SecretString=keys.dumps())
    except ClientError as exc:
        print(f"link-key: the secret {name} not changed: {exc.response['Error']['Code']}", file=sys.stderr)
        return 1
    print(said)
    if outbox is not None:
        _keep_local_link_keys(outbox, before, keys)
    _print_link_keys(keys, now)
    if action == "rotate":
        print(
            f"a key that stopped signing may be retired {RETIRE_AFTER_S // 86400} days later, "
            "when the last link it signed has expired",
            file=sys.stderr,
        )
    return 0


def _print_link_keys(keys: Any, now: float) -> None:
    from chalicelib.core.links import RETIRE_AFTER_S

    def day(t: float) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(t))

    for k in sorted(keys.keys, key=lambda k: (k.created or 0, k.kid)):
        made = f"made {day(k.created)} ({int((now - k.created) // 86400)} day(s) ago)" if k.created else "made ?"
        if k.kid == keys.current:
            state = "current: signs new links"
        elif k.retired is None:
            state = "verifies old links (when it stopped signing is not recorded)"
        else:
            until = day(k.retired + RETIRE_AFTER_S)
            state = f"verifies old links; stopped signing {day(k.retired)}, may be retired from {until}"
        print(f"{k.kid}\t{made}\t{state}")


def _keep_local_link_keys(outbox: Path, before: Any, after: Any) -> None:
    """The local stack makes its secret again at each start from the key kept beside its outbox: the change
    is kept there too, if that file holds this stack's key (another stack's is left alone)."""
    from chalicelib.core.links import LinkKeys
    from infra.local.stack import keep_link_secret, link_secret_path

    path = link_secret_path(outbox)
    try:
        mine = LinkKeys.parse(path.read_text(encoding="utf-8").strip()) == before
    except (OSError, ValueError):
        mine = False
    if mine:
        keep_link_secret(outbox, after.dumps())
    else:
        print(
            f"{path} does not hold this stack's key: the change lasts until the local stack stops "
            "(--outbox: the folder moonsend up writes to)",
            file=sys.stderr,
        )


def cmd_demo(args: argparse.Namespace) -> int:
    from infra.demo import run

    return run(port=args.port, outbox=args.outbox, keep=args.keep, ops_port=args.ops_port)


def cmd_package(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from infra.package import package

    report = package(args.stage, Path(args.out) if args.out else None)
    print(json.dumps(dataclasses.asdict(report), indent=2))
    return 1 if report.dev_only_packages else 0


def _aws_clients(region: str | None) -> dict[str, Any]:
    import boto3

    session = boto3.session.Session(region_name=region)
    names: tuple[str, ...] = ("cloudformation", "s3", "sqs", "cloudwatch", "dynamodb", "sns", "sts", "scheduler")
    names += ("secretsmanager", "sesv2", "kms")  # sesv2: which identity covers the smoke's From; kms: destroy
    names += ("lambda",)  # deploy's preflight: the account's concurrency
    return {n: session.client(n) for n in names}


def _artifacts_bucket(clients: dict[str, Any], *, create: bool) -> str:
    """`moonsend-artifacts-<account>-<region>`, created (private, encrypted) if it does not exist."""
    from botocore.exceptions import ClientError

    s3 = clients["s3"]
    region = s3.meta.region_name
    name = f"moonsend-artifacts-{clients['sts'].get_caller_identity()['Account']}-{region}"
    try:
        s3.head_bucket(Bucket=name)
    except ClientError:
        if create:
            kwargs: dict[str, Any] = {}
            if region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
            s3.create_bucket(Bucket=name, **kwargs)
            s3.put_public_access_block(
                Bucket=name,
                PublicAccessBlockConfiguration={
                    "BlockPublicAcls": True,
                    "IgnorePublicAcls": True,
                    "BlockPublicPolicy": True,
                    "RestrictPublicBuckets": True,
                },
            )
    return name


def cmd_deploy(args: argparse.Namespace) -> int:
    import json

    import boto3

    from infra import preflight
    from infra.deploy import deploy_plan, execute
    from infra.package import packaged

    choose_endpoint(args.stage, args.endpoint)
    # The preflight (infra/preflight.py) before anything changes, --dry-run too. No --skip-preflight: each
    # fail is a deploy that would break (no region, credentials, bucket elsewhere) or a stage that could not
    # send (SES disabled, concurrency under Lambda's floor); --smoke-sender is checked only when given.
    checks = [preflight.stage(args.stage), preflight.region(boto3.session.Session(region_name=args.region).region_name)]
    if preflight.stop(checks, last=False):
        return 2
    clients = _aws_clients(args.region)
    with packaged(args.stage) as report:  # made again only when an input changed since the last package
        template = json.loads(Path(report.template).read_text())
        checks += preflight.run(
            clients,
            args.stage,
            template,
            artifacts_bucket_name=args.artifacts_bucket,
            smoke_sender_address=args.smoke_sender,
        )
        if preflight.stop(checks, last=True):
            return 2
        bucket = args.artifacts_bucket or _artifacts_bucket(clients, create=not args.dry_run)
        region = clients["s3"].meta.region_name
        plan, _ = deploy_plan(
            args.stage,
            Path(report.template),
            Path(report.bundle),
            bucket,
            data_file=Path(report.data_template),
            region=region,
            parameters={"OperatorEmail": args.operator_email} if args.operator_email is not None else None,
        )
        if args.dry_run:
            print("\n".join(str(a) for a in plan))
            return 0
        execute(plan, clients)
    print(f"deployed stacks moonsend-{args.stage}-data and moonsend-{args.stage}")
    return 0


def cmd_destroy(args: argparse.Namespace) -> int:
    from infra.deploy import destroy_plan, email_at_risk, execute

    choose_endpoint(args.stage, args.endpoint)
    clients = _aws_clients(args.region)
    account = clients["sts"].get_caller_identity()["Account"]
    at_risk = email_at_risk(args.stage, clients["sqs"], clients["s3"], account)
    if at_risk:
        print("a destroy would lose email no recipient has been sent yet:", file=sys.stderr)
        for line in at_risk:
            print(f"  {line}", file=sys.stderr)
        if not args.discard_email:
            print(
                "let the queues drain (moonsend status), cancel the campaigns (moonsend campaign cancel), "
                "or pass --discard-email to lose it",
                file=sys.stderr,
            )
            return 1
    plan = destroy_plan(
        args.stage,
        clients["sqs"],
        clients["cloudwatch"],
        clients["scheduler"],
        delete_data=args.delete_data,
        account_id=account,
    )
    print("\n".join(str(a) for a in plan))
    if args.dry_run:
        return 0
    if not args.yes and input(f"destroy moonsend-{args.stage}? type the stage name: ").strip() != args.stage:
        print("nothing done")
        return 1
    execute(plan, clients, say=lambda line: None, tell=print)  # the plan printed; why a step is redone
    if not args.delete_data:
        print(
            f"kept: the data stack moonsend-{args.stage}-data (the tables, which hold the ledger and counters, and "
            "the key of the links already sent); the next deploy uses it; --delete-data removes it too"
        )
    return 0


def cmd_smoke(args: argparse.Namespace) -> int:
    if args.stage != "local":
        if not args.sender:
            print("moonsend smoke: --sender (a verified SES identity of the account) is required", file=sys.stderr)
            return 2
        choose_endpoint(args.stage, args.endpoint)
        return _smoke(_aws_clients(args.region), args.stage, args.sender, args.timeout)
    import tempfile

    from infra.local.stack import LocalStack, StackConfig

    # The same smoke, on a local stack created from the local stage's packaged template.
    sender = args.sender or "smoke@moonsend.example"
    with tempfile.TemporaryDirectory() as outbox:
        config = StackConfig.from_env(port=0, api_port=0, outbox=Path(outbox))
        with LocalStack(config) as stack:
            names = ("cloudformation", "s3", "sqs", "cloudwatch", "dynamodb", "sns", "sts", "sesv2")
            clients = {n: stack.client(n) for n in names}
            clients["sesv2"].create_email_identity(EmailIdentity=sender)  # the platform account's identity
            code = _smoke(clients, "local", sender, args.timeout)
            refused = stack.access.denied if stack.access is not None else []
            if refused:
                print(f"calls the functions' IAM policies refused: {sorted(set(refused))}")
                code = 1
            return code


def _smoke(clients: dict[str, Any], stage: str, sender: str, timeout: float) -> int:
    """The smoke campaign (infra/smoke.py): its three simulator addresses must reach SES's delivery, bounce and
    complaint in the ledger and the suppression list, then one email must be drained through the alarm."""
    import json
    import uuid

    from chalicelib.core.config import Settings
    from infra import smoke
    from infra.deploy import stack_name
    from infra.operator_env import stage_variables

    account = clients["sts"].get_caller_identity()["Account"]
    outputs = clients["cloudformation"].describe_stacks(StackName=stack_name(stage))["Stacks"][0]["Outputs"]
    output = {o["OutputKey"]: o["OutputValue"] for o in outputs}
    region = clients["sns"].meta.region_name
    env = {**stage_variables(stage), "MOONSEND_STAGE": stage, "MOONSEND_ACCOUNT_ID": account, "AWS_REGION": region}
    settings = Settings.from_env({**env, "MOONSEND_API_URL": output["EndpointURL"].rstrip("/")})
    refused = _smoke_sender(settings, clients["sesv2"], sender)
    if refused:
        print(f"moonsend smoke: {refused}", file=sys.stderr)
        return 2
    campaign = f"smoke-{uuid.uuid4().hex[:8]}"
    for message in smoke.smoke_messages(sender, campaign):
        clients["sns"].publish(TopicArn=output["PrecompileEmailTopicArn"], Message=json.dumps(message))
    poll = 5 if stage != "local" else 0.5
    print(f"published campaign {campaign}; waiting for SES's delivery, bounce and complaint ...", flush=True)
    seen = smoke.wait_for(settings, campaign, smoke.wanted(campaign), timeout, poll)
    for address, what in seen.items():
        print(f"{address:<56} {what.line()}")
    if not all(check(seen[a]) for a, check in smoke.wanted(campaign).items()):
        print("moonsend smoke: SES's events did not all reach the ledger (docs/deploying.md)", file=sys.stderr)
        return 1
    put_at = smoke.queue_for_the_alarm(settings, clients["cloudwatch"], sender, campaign, timeout)
    address = smoke.alarm_address(campaign)
    print("queued one email with no drain started; waiting for the queue's alarm to drain it ...", flush=True)
    alarmed = {address: lambda s: s.state == "sent" and s.feedback == "delivered"}
    last = smoke.wait_for(settings, campaign, alarmed, timeout, poll)[address]
    fired = smoke.alarm_fired_since(clients["cloudwatch"], settings, put_at)
    print(f"{address:<56} {last.line()}; the alarm {'fired' if fired else 'never changed state'}")
    return 0 if alarmed[address](last) and fired else 1


def _smoke_sender(settings: Any, ses: Any, sender: str) -> str | None:
    """The smoke's From assigned to `moonsend-smoke` by the operator running it, whatever identity covers it
    (a domain-covered address is claimed by no first send, and an assignment is what `tenant audit-from`
    leaves alone), unless another tenant has it: the smoke then stops and says whose it is."""
    from chalicelib.stores.free_senders import FreeAddresses
    from chalicelib.stores.platform_identities import PlatformIdentities
    from infra.smoke import SMOKE_TENANT

    identities = PlatformIdentities(lambda: ses)
    addresses = FreeAddresses(settings.resources.tenants_table.name, settings.region, identities)
    owner = addresses.owner(sender)
    if owner not in (None, SMOKE_TENANT):
        return f"{sender} is the free-plan From address of {owner}: give the smoke an address of its own"
    addresses.assign(SMOKE_TENANT, sender, int(time.time() * 1000))  # again if it has it: one write a smoke
    return None


def build_parser() -> argparse.ArgumentParser:
    from chalicelib.stores.ledger_model import STATES

    p = argparse.ArgumentParser(prog="moonsend", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start the local stack (moto on loopback + the runtime)")
    up.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=None, help="port (default 4566, env MOONSEND_PORT)")
    up.add_argument(
        "--api-port", type=int, default=None, help="port of the app's HTTP routes (default 8000, env MOONSEND_API_PORT)"
    )
    up.add_argument(
        "--aws-timing",
        action="store_true",
        help="alarms and schedules in real time, on SQS metrics as AWS publishes them (see how long a tenant waits)",
    )
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
        "--ops-port", type=int, default=OPS_PORT, help="the operator's page's port on 127.0.0.1 (default 8025; 0: any)"
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        help="start empty: drop the state the last stop saved beside the outbox (<outbox>/.state)",
    )
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
    send.add_argument(
        "--region", default=None, help="sender.region: the tenant's SES region (default: none, the stage's own)"
    )
    send.add_argument("--plan", choices=["free", "paid"], default=None)
    send.add_argument("--campaign-id", default=None)
    send.add_argument("--per-message", type=int, default=200, help="recipients per SNS message")
    send.add_argument("--at", default=None, help="scheduledAt: send at this time (ISO 8601 with offset)")
    send.add_argument(
        "--expires-after", default=None, help="expiresAfter: send nothing later than start + this (e.g. PT2H)"
    )
    send.add_argument(
        "--verify-sender",
        action="store_true",
        help="verify the sender address in the SES account first (local stack)",
    )
    send.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    send.add_argument("--stage", default="local", choices=stages())
    send.set_defaults(func=cmd_send)

    st = sub.add_parser("status", help="queue depths and campaign counts")
    st.add_argument("--user", default=None)
    st.add_argument("--watch", action="store_true", help="live progress bars")
    st.add_argument("--interval", type=float, default=1.0)
    st.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    st.add_argument("--stage", default="local", choices=stages())
    st.set_defaults(func=cmd_status)

    rf = sub.add_parser("replay-failed", help="invoke again the async events Lambda gave up on (the on-failure queue)")
    rf.add_argument("--function", default=None, help="only this function's (e.g. moonsend-dev-precompile_email)")
    rf.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    rf.add_argument("--stage", default="local", choices=stages())
    rf.set_defaults(func=cmd_replay_failed)

    op = sub.add_parser(
        "ops", help="the operator's page on loopback: every tenant's state, and pause, resume, cancel, replay from it"
    )
    op.add_argument("--port", type=int, default=OPS_PORT, help="its port on 127.0.0.1 (default 8025; 0: any free one)")
    op.add_argument("--until-stdin-closes", action="store_true", help=argparse.SUPPRESS)
    op.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    op.add_argument("--stage", default="local", choices=stages())
    op.set_defaults(func=cmd_ops)

    rc = sub.add_parser("recipients", help="each recipient of a campaign with its state and reason")
    rc.add_argument("--user", required=True)
    rc.add_argument("--campaign", required=True)
    rc.add_argument("--state", choices=list(STATES), default=None)
    rc.add_argument("--csv", action="store_true", help="CSV with a header, every page (for large campaigns)")
    rc.add_argument("--limit", type=int, default=None, help="one page of this many (prints the next page's cursor)")
    rc.add_argument("--after", default=None, help="the cursor a previous page printed")
    rc.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    rc.add_argument("--stage", default="local", choices=stages())
    rc.set_defaults(func=cmd_recipients)

    pk = sub.add_parser("package", help="the deployable template and bundle of a stage (build/<stage>/)")
    pk.add_argument("--stage", default="dev", choices=stages())
    pk.add_argument("--out", default=None, help="output folder (default build/<stage>)")
    pk.set_defaults(func=cmd_package)

    dp = sub.add_parser("deploy", help="package and deploy a stage to the AWS account of your credentials")
    dp.add_argument("--stage", default="dev", choices=stages())
    dp.add_argument(
        "--artifacts-bucket",
        default=None,
        help="S3 bucket for the bundle (default moonsend-artifacts-<account>-<region>)",
    )
    dp.add_argument("--region", default=None)
    dp.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    dp.add_argument("--dry-run", action="store_true", help="print the preflight and the plan, change nothing")
    dp.add_argument("--smoke-sender", default=None, help="check that the smoke's sender is a verified SES identity")
    dp.add_argument(
        "--operator-email",
        default=None,
        help="where the stage's alarms are e-mailed (AWS mails a confirmation link first); kept from the last "
        "deploy when not given, '' to stop",
    )
    dp.set_defaults(func=cmd_deploy)

    ds = sub.add_parser("destroy", help="remove a stage: tenant queues and alarms, payloads, the stack")
    ds.add_argument("--stage", default="dev", choices=stages())
    ds.add_argument("--region", default=None)
    ds.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    ds.add_argument(
        "--delete-data", action="store_true", help="also delete the data stack: tables (ledger, counters), links' key"
    )
    ds.add_argument(
        "--discard-email", action="store_true", help="destroy even though email is still queued or scheduled"
    )
    ds.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    ds.add_argument("--yes", action="store_true", help="do not ask")
    ds.set_defaults(func=cmd_destroy)

    sm = sub.add_parser("smoke", help="send a small campaign to the SES mailbox simulator and check the ledger")
    sm.add_argument("--stage", default="dev", choices=stages())
    sm.add_argument(
        "--sender", default=None, help="a verified SES identity of the platform account (local: made up and verified)"
    )
    sm.add_argument("--region", default=None)
    sm.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    sm.add_argument("--timeout", type=float, default=600)
    sm.set_defaults(func=cmd_smoke)

    cp = sub.add_parser(
        "campaign",
        help="list a tenant's campaigns, show one with its timeline; pause, resume, cancel, reschedule a campaign, "
        "or queue its failed recipients again",
    )
    cp.add_argument("action", choices=["list", "show", "send", "pause", "resume", "cancel", "retry-failed", "schedule"])
    cp.add_argument("--user", required=True)
    cp.add_argument("--campaign", "--id", dest="campaign", default=None, help="the campaign (every action but list)")
    cp.add_argument("--at", default=None, help="schedule: the new time; send: when (ISO 8601 with offset)")
    cp.add_argument("--upload", default=None, help="send: the upload whose recipients to send to (moonsend upload)")
    cp.add_argument("--to", nargs="+", default=None, help="send: these addresses instead (up to 1,000)")
    cp.add_argument("--subject", default=None, help="send: the subject (Liquid)")
    cp.add_argument("--body", default=None, help="send: the HTML body (Liquid), or @file to read it from a file")
    cp.add_argument("--from", dest="from_address", default=None, help="send: one of the tenant's From addresses")
    cp.add_argument("--idempotency-key", default=None, help="send: the request's key (default: a new one)")
    cp.add_argument("--reason-contains", default=None, help="retry-failed: only failures whose reason has this")
    cp.add_argument("--state", choices=["scheduled", "sending", "paused", "done", "cancelled"], help="list: only these")
    cp.add_argument("--limit", type=int, default=None, help="list: campaigns a page (1-200, default 50)")
    cp.add_argument("--after", default=None, help="list: the cursor the page before printed")
    cp.add_argument("--timeline-after", default=None, help="show: the cursor of the timeline's next minutes")
    cp.add_argument("--json", action="store_true", help="list, show: the API's JSON answer")
    cp.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    cp.add_argument("--stage", default="local", choices=stages())
    cp.set_defaults(func=cmd_campaign)

    up = sub.add_parser(
        "upload", help="upload a tenant's recipients (CSV with a header row, or JSON Lines) and print the report"
    )
    up.add_argument("--user", required=True)
    up.add_argument("--file", required=True, help="the file: .csv, or .jsonl / .ndjson")
    up.add_argument("--format", choices=["csv", "jsonl"], default=None, help="default: by the file's suffix")
    up.add_argument("--address-column", default=None, help="the CSV column of the addresses (default: email, ...)")
    up.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    up.add_argument("--stage", default="local", choices=stages())
    up.set_defaults(func=cmd_upload)

    dg = sub.add_parser(
        "digest", help="a digest's status (pending recipients, items, last and next run), or run it now"
    )
    dg.add_argument("action", choices=["status", "run"])
    dg.add_argument("--user", required=True)
    dg.add_argument("--digest", required=True)
    dg.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    dg.add_argument("--stage", default="local", choices=stages())
    dg.set_defaults(func=cmd_digest)

    wh = sub.add_parser(
        "webhook",
        help="a tenant's webhook endpoints: add, list, remove, test one (signed), or replay a disabled one's events",
    )
    wh.add_argument("action", choices=["add", "list", "remove", "test", "replay"])
    wh.add_argument("--user", required=True)
    wh.add_argument("--url", help="add: the endpoint (https; http to loopback on the local stack)")
    wh.add_argument("--events", help="add: the event types, comma-separated (default: all)")
    wh.add_argument("--max-events", type=int, default=1, help="add: events per request (1-100)")
    wh.add_argument("--id", help="remove, test, replay: the endpoint's id")
    wh.add_argument("--no-wait", action="store_true", help="replay, remove: show the background job and return at once")
    wh.add_argument("--wait-s", type=float, default=900.0, help="replay, remove: how long to wait for the job")
    wh.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    wh.add_argument("--stage", default="local", choices=stages())
    wh.set_defaults(func=cmd_webhook)

    sp = sub.add_parser("suppression", help="a tenant's suppression list: list it, add addresses, lift one")
    sp_actions = sp.add_subparsers(dest="action", required=True)
    sl = sp_actions.add_parser("list", help="the list by address, a page at a time (GET /suppressions)")
    sl.add_argument("--reason", choices=["bounce", "complaint", "unsubscribe", "manual"], help="only this reason")
    sl.add_argument("--prefix", default=None, help="addresses starting with this (any case)")
    sl.add_argument("--limit", type=int, default=None, help="entries a page (1-1000, default 100)")
    sl.add_argument("--after", default=None, help="the cursor the page before printed")
    sl.add_argument("--json", action="store_true", help="the API's JSON answer")
    sa = sp_actions.add_parser("add", help="never send to these addresses again (POST /suppressions)")
    sa.add_argument("addresses", nargs="*", metavar="ADDRESS")
    sa.add_argument("--file", default=None, help="a file of addresses, one a line (- for stdin)")
    sa.add_argument("--reason", default=None, help="why, as the list shows it (default: added by the tenant)")
    sr = sp_actions.add_parser("remove", help="lift one of the tenant's own entries (DELETE /suppressions/{address})")
    sr.add_argument("addresses", nargs=1, metavar="ADDRESS")
    for action in (sl, sa, sr):
        action.add_argument("--user", required=True)
        action.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
        action.add_argument("--stage", default="local", choices=stages())
        action.set_defaults(func=cmd_suppression)

    ev = sub.add_parser("events", help="a tenant's recorded events (what its webhooks carry), oldest first")
    ev.add_argument("--user", required=True)
    ev.add_argument("--type", default=None, help="only this type (sent, delivered, bounced, ...)")
    ev.add_argument("--campaign", default=None, help="only this campaign's")
    ev.add_argument("--since", default=None, help="recorded from this UTC instant on (2026-11-26T03:00:00Z)")
    ev.add_argument("--after", default=None, help="the cursor the page before printed (now or later)")
    ev.add_argument("--limit", type=int, default=None, help="events a page (1-1000, default 100)")
    ev.add_argument("--json", action="store_true", help="the API's JSON answer")
    ev.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    ev.add_argument("--stage", default="local", choices=stages())
    ev.set_defaults(func=cmd_events)

    tn = sub.add_parser(
        "tenant", help="show a tenant's standing; pause or resume its sending; its API key, SES keys and From address"
    )
    tn.add_argument(
        "action",
        choices=["show", "pause", "resume", "key", "keys", "move-keys", "assign-from", "audit-from", "invite"],
        help="show: its plan, rate, From addresses, pauses, SES status, daily cap (GET /tenant); "
        "key: a new API key; keys: its SES key versions; move-keys: register keys of another AWS account "
        "(read from MOONSEND_NEW_API_KEY and MOONSEND_NEW_API_SECRET); assign-from: give it a free-plan From "
        "address; audit-from (no --user): list the From claims made by a first send whose address has no "
        "verified identity of its own; invite: add a person (--address, --role) to its console's people and email "
        "them a sign-in link",
    )
    tn.add_argument("--user", help="the tenant (every action but audit-from)")
    tn.add_argument("--fix", action="store_true", help="audit-from: drop the claims it lists")
    tn.add_argument("--reason", default="no reason given")
    tn.add_argument(
        "--owner",
        choices=["tenant", "operator", "guard", "ses", "all"],
        default=None,
        help="pause: whose pause it is (operator, the default, or tenant: one the tenant may lift); resume: lift "
        "only this owner's pause (all, the default: every owner's; ses: only once SES has lifted its own)",
    )
    tn.add_argument("--address", help="assign-from: the From address; invite: the person's address")
    tn.add_argument("--role", choices=["viewer", "sender", "admin"], default="admin", help="invite: their role (admin)")
    tn.add_argument("--link", action="store_true", help="invite: also print a sign-in link (15 minutes, once)")
    tn.add_argument("--region", help="move-keys: the SES region of the new keys")
    tn.add_argument("--json", action="store_true", help="show: the API's JSON answer")
    tn.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    tn.add_argument("--stage", default="local", choices=stages())
    tn.set_defaults(func=cmd_tenant)

    sk = sub.add_parser(
        "seal-keys", help="encrypt the tenants' SES secrets stored in the clear before secrets were encrypted"
    )
    sk.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    sk.add_argument("--stage", default="local", choices=stages())
    sk.set_defaults(func=cmd_seal_keys)

    ic = sub.add_parser(
        "index-campaigns", help="list the campaigns sent before the tenant API's campaign list (once, after upgrading)"
    )
    ic.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    ic.add_argument("--stage", default="local", choices=stages())
    ic.set_defaults(func=cmd_index_campaigns)

    cr = sub.add_parser(
        "count-released",
        help="count the released recipients of campaigns begun before they were counted (once, after upgrading)",
    )
    cr.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    cr.add_argument("--stage", default="local", choices=stages())
    cr.set_defaults(func=cmd_count_released)

    kp = sub.add_parser(
        "keep-parked",
        help="move paused campaigns' parked email out of the 45-day lifecycle of scheduled/ (once, after upgrading)",
    )
    kp.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    kp.add_argument("--stage", default="local", choices=stages())
    kp.set_defaults(func=cmd_keep_parked)

    lk = sub.add_parser(
        "link-key",
        help="the keys that sign links in emails: list them (ids and ages, never values), rotate, retire an old one",
    )
    lk.add_argument(
        "action",
        choices=["list", "rotate", "retire"],
        help="rotate: a new key signs from now on, the others still verify; retire: drop a key that stopped "
        "signing longer ago than the longest link lives (400 days)",
    )
    lk.add_argument("--kid", default=None, help="retire: the key's id (list shows them)")
    lk.add_argument("--force", action="store_true", help="retire: even a key whose links may still be live")
    lk.add_argument(
        "--outbox",
        type=Path,
        default=None,
        help="local stage: the stack's outbox, where its key is kept (default ./outbox, env MOONSEND_OUTBOX)",
    )
    lk.add_argument("--region", default=None)
    lk.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    lk.add_argument("--stage", default="local", choices=stages())
    lk.set_defaults(func=cmd_link_key)

    demo = sub.add_parser("demo", help="run three tenants' campaigns through the local stack")
    demo.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    demo.add_argument("--outbox", type=Path, default=Path("outbox"))
    demo.add_argument(
        "--keep", action="store_true", help="keep the stack up after the run (Ctrl-C stops it): open its console"
    )
    demo.add_argument(
        "--ops-port", type=int, default=OPS_PORT, help="--keep: the operator's page's port (default 8025; 0: any)"
    )
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
