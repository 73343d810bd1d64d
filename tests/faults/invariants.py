"""The promises the fault explorer checks after every run, the same for every function: what a user of an ESP
counts on, read from the stack as a tenant or an operator would see it."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from email import message_from_bytes
from email.policy import strict
from typing import Any

from chalicelib import wiring
from chalicelib.core.routing import tenant_queue_name
from chalicelib.stores.ledger_model import FINAL, QUEUED, SUPPRESSED
from infra.ledger_checks import counter_drift, events_missing, ledger_events
from tests.conftest import read_sends

# A tenant's control the campaign is under when the run ends: what must hold at rest, whatever failed.
CANCELLED, PAUSED = "cancelled", "paused"


@dataclass(frozen=True)
class Campaign:
    user_id: str
    campaign_id: str
    recipients: tuple[str, ...]  # lower-cased
    items: tuple[tuple[str, str], ...] = ()  # a digest's: (recipient, item id), each due in one email of the period
    control: str | None = None  # CANCELLED or PAUSED (answered by the API) when the run ends
    seen_broken: tuple[str, ...] = ()  # a control undone while the scenario ran (a pause later lifted)
    suppressed: tuple[str, ...] = ()  # recipients put on the tenant's suppression list before their send

    @property
    def resting(self) -> frozenset[str]:
        """The recipients' states at rest: final, or queued (parked) under a pause."""
        return FINAL | {QUEUED} if self.control == PAUSED else FINAL


def _sends(stack: Any, c: Campaign) -> Counter[str]:
    return Counter(
        str(s["to"]).lower()
        for s in read_sends(stack.config.outbox)
        if s.get("userId") == c.user_id and s.get("campaignId") == c.campaign_id
    )


def mailed(stack: Any, c: Campaign) -> list[str]:
    """Who the campaign was mailed to (SES accepted it), by address."""
    return sorted(_sends(stack, c))


def mailed_more_than_once(stack: Any, c: Campaign) -> list[str]:
    return [f"{to} mailed {n} times" for to, n in sorted(_sends(stack, c).items()) if n > 1]


def control_undone(stack: Any, c: Campaign) -> list[str]:
    """A cancel answered by the API and then not kept: anyone mailed, or anyone in a state but `cancelled`;
    a suppression answered and then not kept; a pause not kept while it stood (seen by the scenario before
    its resume)."""
    out = list(c.seen_broken)
    if c.suppressed:
        out += [f"{to} mailed though suppressed" for to in mailed(stack, c) if to in c.suppressed]
        rows = wiring.container().ledger.recorded(c.user_id, c.campaign_id, c.suppressed)
        out += [f"{r}: {rows.get(r)}, not suppressed" for r in c.suppressed if rows.get(r) != SUPPRESSED]
    if c.control == CANCELLED:
        out += [f"{to} mailed after the cancel" for to in mailed(stack, c)]
        out += [f"{r}: not cancelled" for r in not_final(c, among=frozenset({CANCELLED}))]
    return out


def not_final(c: Campaign, among: frozenset[str] | None = None) -> list[str]:
    """The recipients whose state is not among `among` (by default, the campaign's states at rest)."""
    among = c.resting if among is None else among
    rows = wiring.container().ledger.recorded(c.user_id, c.campaign_id, c.recipients)
    return [f"{r}: {rows.get(r, 'no record')}" for r in c.recipients if rows.get(r) not in among]


def counters_off(c: Campaign) -> list[str]:
    """The counters against the ledger's tally (judged after the recount had its chance)."""
    drift = counter_drift(wiring.container(), c.user_id, c.campaign_id)
    return [f"{name}: the ledger says {delta:+} more" for name, delta in sorted(drift.items())]


def guard_off(c: Campaign) -> list[str]:
    """The reputation guard's window against the ledger: every bounce and complaint recorded is counted once."""
    container = wiring.container()
    window = container.reputation.window(c.user_id)
    tally = container.ledger.tally(c.user_id, c.campaign_id)
    out = []
    if window.complained != tally["complained"]:
        out.append(f"guard counted {window.complained} complaints, ledger has {tally['complained']}")
    if window.bounced != tally["bounced"]:
        out.append(f"guard counted {window.bounced} bounces, ledger has {tally['bounced']}")
    return out


def events_off(stack: Any, c: Campaign) -> list[str]:
    missing = events_missing(stack, wiring.container(), c.user_id, c.campaign_id)
    return [f"{who} {kind}" for who, kind in sorted(missing)]


def digest_items_off(stack: Any, c: Campaign) -> list[str]:
    """A digest's items against its period's email: each item in exactly one of its reader's emails."""
    if not c.items:
        return []
    seen: Counter[tuple[str, str]] = Counter()
    for eml in sorted((stack.config.outbox / c.user_id / c.campaign_id).glob("*.eml")):
        msg = message_from_bytes(eml.read_bytes(), policy=strict)
        to, html = str(msg["To"]).lower(), msg.get_body(("html",)).get_content()  # type: ignore[union-attr]
        seen.update((to, item) for item in re.findall(r"\[([^\]<]+)\]", html))
    pairs = sorted(set(c.items) | set(seen))
    return [f"{to} got {item} {seen[(to, item)]} times" for to, item in pairs if seen[(to, item)] != 1]


def webhooks_off(stack: Any, c: Campaign, receiver: Any) -> list[str]:
    """Every event the ledger implies was delivered to the tenant's endpoint (at least once: a receiver drops
    what it has seen by the event's id)."""
    if receiver is None:
        return []
    delivered = set()
    for _headers, body in list(receiver.requests):
        for event in json.loads(body).get("data", {}).get("events", []):
            if event.get("campaignId") == c.campaign_id:
                marked = "/machine" if event.get("machine") is True else ""  # as ledger_events tells it
                delivered.add((str(event["recipient"]).lower(), event["type"] + marked))
    table = stack.settings.resources.ledger_table.name
    missing = ledger_events(stack.client("dynamodb"), table, c.user_id, c.campaign_id) - delivered
    return [f"{who} {kind}" for who, kind in sorted(missing)]


def depths(stack: Any, names: list[str]) -> dict[str, tuple[int, int, int]]:
    """(visible, in flight, delayed) of the named queues that exist: these only, not every queue of the stage
    (after a few hundred runs, a few hundred tenants' queues, a request each per poll)."""
    sqs, out = stack.client("sqs"), {}
    for name in names:
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except sqs.exceptions.QueueDoesNotExist:
            continue  # not made yet, or retired
        a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        out[name] = tuple(
            int(a[f"ApproximateNumberOf{k}"]) for k in ("Messages", "MessagesNotVisible", "MessagesDelayed")
        )
    return out


def tenant_queue(stack: Any, c: Campaign) -> str:
    return tenant_queue_name(stack.settings.resources, c.user_id)


def queue_left(stack: Any, c: Campaign) -> list[str]:
    mine = depths(stack, [tenant_queue(stack, c)])
    return [f"{n}: visible, in flight, delayed {v}" for n, v in sorted(mine.items()) if sum(v)]


def deliveries_pending(stack: Any) -> list[str]:
    """SES's events and webhook deliveries still on their queues (visible, in flight: a failed one waiting out
    its visibility timeout, or waiting out a retry's delay): the pipeline is not at rest while one is."""
    r = stack.settings.resources
    return [f"{n}: {v}" for n, v in depths(stack, [r.events_queue.name, r.webhooks_queue.name]).items() if sum(v)]


def broken(stack: Any, c: Campaign, receiver: Any = None) -> list[str]:
    """Every promise broken for this campaign, each prefixed with which (`receiver`: the tenant's endpoint)."""
    checks = {
        "mailed twice": mailed_more_than_once(stack, c),
        "a control undone": control_undone(stack, c),
        "a digest's item not mailed once": digest_items_off(stack, c),
        "not final": not_final(c),
        "email left on a queue": queue_left(stack, c),
        "counters differ from the ledger": counters_off(c),
        "guard differs from the ledger": guard_off(c),
        "events missing from GET /events": events_off(stack, c),
        "events not delivered to the endpoint": webhooks_off(stack, c, receiver),
    }
    return [f"{what}: {'; '.join(found[:5])}" for what, found in checks.items() if found]
