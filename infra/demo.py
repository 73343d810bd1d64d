"""`make demo`: the whole pipeline on the local stack, three tenants, personalised campaigns.

Starts the local stack in this process, gives two paid tenants their own SES accounts (rates 5 and
20 per second) and one free-plan tenant the platform's, publishes a Liquid-personalised campaign for
each through PrecompileEmail, shows live progress until every queue is drained, then prints a
per-tenant table and checks that every good recipient got exactly one email. Globex has a webhook
endpoint on a loopback receiver (infra.demo_webhooks), which hears, signed, of each of its emails being sent
and delivered. Then a fourth tenant's weekly digest (infra.demo_digest): items from two producers, one email
per reader when its schedule fires.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from infra.demo_digest import run_digest_demo
from infra.demo_webhooks import register
from infra.local.stack import LocalStack, StackConfig
from infra.producer import CampaignSpec, messages, publish
from infra.status import outbox_summary, progress_view, snapshot

SUBJECT = "{{ name | default: 'Friend' }}, your {{ company }} update"
BODY = """<html><body>
<h1>Hello {{ name }} {{ surname }}!</h1>
{% if interests.size > 0 %}<p>Picked for you:</p>
<ul>{% for topic in interests %}<li>{{ topic | capitalize }}</li>{% endfor %}</ul>
{% else %}<p>Tell us what you like.</p>{% endif %}
<p>Sent to {{ recipient.email }} for campaign {{ campaign.id }}.</p>
<p><a href="https://example.com/read?c={{ campaign.id }}">Read online</a></p>
</body></html>"""
FIRST = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tim"]
LAST = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson"]
TOPICS = ["serverless", "email", "queues", "liquid", "rates"]


@dataclass(frozen=True)
class DemoTenant:
    user_id: str
    company: str
    plan: str
    rate: float
    recipients: int
    access_key: str | None = None
    ses_max_rate: float | None = None
    bad_addresses: int = 0


# The tenant whose webhook endpoint the demo registers.
WEBHOOK_TENANT = "globex"
TENANTS = [
    DemoTenant("acme", "Acme", "paid", 5, 40, "AKIADEMOACME0000001", 14, bad_addresses=1),
    DemoTenant("globex", "Globex", "paid", 20, 200, "AKIADEMOGLOBEX00001", 50),
    DemoTenant("initech", "Initech", "free", 10, 30),
]


def recipients_for(t: DemoTenant) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(t.recipients):
        out.append(
            {
                "email": f"{FIRST[i % len(FIRST)].lower()}.{i}@{t.user_id}-customers.example",
                "metadata": {
                    "name": FIRST[i % len(FIRST)],
                    "surname": LAST[i % len(LAST)],
                    "company": t.company,
                    "interests": TOPICS[: i % 4],
                },
            }
        )
    out += [{"email": f"not-an-address-{i}", "metadata": {}} for i in range(t.bad_addresses)]
    return out


def run(
    port: int = 0, outbox: Path = Path("outbox"), timeout_s: float = 100.0, keep: bool = False, ops_port: int = 8025
) -> int:
    console = Console(width=120)
    started = time.monotonic()
    free_rate = next(t.rate for t in TENANTS if t.plan == "free")
    config = StackConfig(port=port, api_port=0, outbox=outbox, clear_outbox=True, free_rate=free_rate)
    console.print("creating the local stack from the packaged template (packaging after a code change: ~20 s)")
    with LocalStack(config) as stack:
        console.print(f"[bold]moonsend local stack ready[/] at {stack.endpoint}")
        assert stack.ses is not None and stack.settings is not None
        sns = stack.client("sns")
        topic = stack.topic_arns[stack.settings.resources.precompile_topic.name]
        expected: dict[str, int] = {}
        hooks = register(WEBHOOK_TENANT)  # before its campaign, as a tenant would
        for t in TENANTS:
            sender: dict[str, Any] = {
                "region": "us-east-1",
                "ratePerSecond": str(t.rate),
                "emailAddress": f"news@{t.user_id}.example",
                "fromName": f"{t.company} News",
            }
            if t.access_key:
                secret = f"demo-secret-{t.user_id}"
                stack.ses.configure(t.access_key, max_send_rate=t.ses_max_rate)
                ses = stack.client("sesv2", access_key=t.access_key, secret_key=secret)
                sender.update(apiKey=t.access_key, apiSecret=secret)
            else:
                ses = stack.client("sesv2")  # free plan: the platform's SES account
            ses.create_email_identity(EmailIdentity=sender["emailAddress"])
            spec = CampaignSpec(
                t.user_id,
                sender,
                SUBJECT,
                BODY,
                f"welcome-{t.user_id}",
                plan=t.plan if t.plan == "free" else None,
            )
            n = publish(sns, topic, messages(spec, recipients_for(t)))
            expected[t.user_id] = t.recipients
            console.print(
                f"published {t.recipients + t.bad_addresses} recipients of "
                f"{t.user_id} ({t.plan}, {t.rate:g}/s) in {n} SNS message(s)"
            )

        sqs = stack.client("sqs")
        with Live(console=console, refresh_per_second=2, transient=True) as live:
            deadline = time.monotonic() + timeout_s
            drained = False
            while time.monotonic() < deadline:
                live.update(progress_view(snapshot(stack.settings, sqs)))
                if stack.wait_until_drained(timeout=1.0, settle_s=0.5, poll_s=0.5):
                    drained = True
                    break
        snap = snapshot(stack.settings, sqs)
        sent = outbox_summary(outbox)
        table = Table(title="moonsend demo: per tenant")
        for col in (
            "tenant",
            "plan",
            "target/s",
            "queued",
            "sent",
            "failed",
            "rejected",
            "achieved/s",
            "max in 1 s",
            "in outbox",
        ):
            table.add_column(col, justify="left" if col in ("tenant", "plan") else "right")
        ok = drained
        for t in TENANTS:
            c = next((c for c in snap.campaigns if c.user_id == t.user_id), None)
            s = sent.get(t.user_id, {})
            rate = s.get("rate")
            table.add_row(
                t.user_id,
                t.plan,
                f"{t.rate:g}",
                str(c["queued"] if c else 0),
                str(c["sent"] if c else 0),
                str(c["failed"] if c else 0),
                str(c["rejected"] if c else 0),
                f"{rate:.2f}" if rate else "-",
                str(s.get("max_per_second", 0)),
                str(s.get("emails", 0)),
            )
            ok &= bool(c) and c["sent"] == expected[t.user_id] and c["rejected"] == t.bad_addresses
            ok &= s.get("emails") == s.get("unique") == expected[t.user_id]
            ok &= s.get("max_per_second", 0) <= max(1, int(t.rate))
        console.print(table)
        heard = hooks.wait(expected[WEBHOOK_TENANT])
        hooks.receiver.close()
        console.print(
            f"webhooks: {WEBHOOK_TENANT}'s endpoint received {heard['sent']} sent and {heard['delivered']} delivered "
            f"events in {heard['requests']} signed requests (up to 25 events each), every signature verified, "
            f"{heard['repeats']} repeated"
        )
        ok &= heard["ok"]
        digest = run_digest_demo(stack)
        console.print(
            f"digest: hooli's weekly digest, {digest.items_published} items from two producers for "
            f"{digest.readers} readers -> {digest.emails} emails carrying {digest.items_mailed} items "
            f"(one retracted); fired again for the same period: {digest.second_run_emails} more"
        )
        ok &= digest.ok
        console.print(f"Outbox: {outbox.resolve()} (one .eml per email, sends.jsonl per send)")
        console.print(f"Took {time.monotonic() - started:.1f}s.")
        if not ok:
            console.print("[bold red]demo check failed[/]: see the table above")
        else:
            console.print(
                "[bold green]every recipient got exactly one email, at its tenant's rate; every reader one digest[/]"
            )
        if keep:
            _keep_open(console, stack, ops_port)
        else:
            console.print("To watch these campaigns in the console: [bold]moonsend demo --keep[/] (docs/console.md)")
        return 0 if ok else 1


# The demo tenant's admin in the console, and how long the link the demo prints lasts: hours, so that it
# still works when a newcomer clicks it after reading the output (a stage's links last 15 minutes).
DEMO_ADMIN = "admin@acme.example"
DEMO_LINK_S = 8 * 3600


def console_way_in(stack: LocalStack) -> list[str]:
    """The console's address, the demo tenant's admin, and two ways in: a sign-in link (once, for hours; in
    the demo only) and the tenant's API key (this run's)."""
    from chalicelib import wiring
    from chalicelib.api.principal import Role

    c = wiring.container()
    user = TENANTS[0].user_id
    if c.people_store.get(user, DEMO_ADMIN) is None:
        c.people.invite(user, DEMO_ADMIN, Role.ADMIN, "operator")
    return [
        *_admins_link(stack),
        f"or with {user}'s API key: {c.api_keys.replace_all(user)}",
        f"later, ask for a link on the sign-in page: it lands in {stack.config.outbox.resolve()}/_console/",
    ]


def console_way_back(stack: LocalStack) -> list[str]:
    """`moonsend up` on a saved state: the console's address, and a link for the demo's admin if this is the
    demo's state (its admin is there). No key is issued: a new one would stop the tenant's key of before."""
    from chalicelib import wiring

    c = wiring.container()
    if stack.loaded is None or c.people_store.get(TENANTS[0].user_id, DEMO_ADMIN) is None:
        return [f"console: {stack.api_url}/console"]
    return _admins_link(stack)


def _admins_link(stack: LocalStack) -> list[str]:
    from chalicelib import wiring

    link = wiring.container().sign_in_links.mint(DEMO_ADMIN, lifetime_s=DEMO_LINK_S)
    return [
        f"console: {stack.api_url}/console",
        f"sign in as {DEMO_ADMIN} ({TENANTS[0].user_id}'s admin), once, within {DEMO_LINK_S // 3600} hours: "
        f"{stack.api_url}/console/link/{link}",
    ]


def _keep_open(console: Console, stack: LocalStack, ops_port: int) -> None:
    """The stack stays up for the console and the operator's page until Ctrl-C, with a way into each that works
    when clicked (the operator's first: once the console's way in is printed, both answer)."""
    from infra.ops.server import start_beside

    ops = None
    try:
        ops = start_beside(stack.endpoint, ops_port)
        for line in console_way_in(stack):
            console.print(line, soft_wrap=True)
        console.print(f"the moonsend command reaches this stack with: --endpoint {stack.endpoint}", soft_wrap=True)
        console.print("the stack stays up until Ctrl-C", soft_wrap=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        console.print("stopping the stack")
    if ops is not None:
        ops.terminate()
