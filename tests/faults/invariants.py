"""The promises the fault explorer checks after every run, the same for every function: what a user of an ESP
counts on, read from the stack as a tenant or an operator would see it."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass
from typing import Any

from chalicelib import wiring
from chalicelib.core.webhook_contract import EVENT_TYPES
from chalicelib.stores.ledger_model import FEEDBACK, FINAL
from chalicelib.stores.ledger_tally import ENTRIES, STATED
from tests.conftest import read_sends


@dataclass(frozen=True)
class Campaign:
    user_id: str
    campaign_id: str
    recipients: tuple[str, ...]  # lower-cased


def mailed_more_than_once(stack: Any, c: Campaign) -> list[str]:
    sends = Counter(
        str(s["to"]).lower()
        for s in read_sends(stack.config.outbox)
        if s.get("userId") == c.user_id and s.get("campaignId") == c.campaign_id
    )
    return [f"{to} mailed {n} times" for to, n in sorted(sends.items()) if n > 1]


def not_final(c: Campaign) -> list[str]:
    rows = wiring.container().ledger.recorded(c.user_id, c.campaign_id, c.recipients)
    return [f"{r}: {rows.get(r, 'no record')}" for r in c.recipients if rows.get(r) not in FINAL]


def counters_off(c: Campaign) -> list[str]:
    """The counters against the ledger's tally (run after the recount had its chance)."""
    container = wiring.container()
    read = container.stats.read(c.user_id, c.campaign_id)
    tally = container.ledger.tally(c.user_id, c.campaign_id)
    names = STATED if read is None or read.entries_marked else [n for n in STATED if n not in ENTRIES]
    return [
        f"{n}: counted {read[n] if read else 0}, ledger {tally[n]}"
        for n in names
        if (read[n] if read else 0) != tally[n]
    ]


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


def events_missing(stack: Any, c: Campaign) -> list[str]:
    """The events the campaign's ledger rows imply that GET /events does not give (as the tenant reads it)."""
    expected: set[tuple[str, str]] = set()
    pages = (
        stack.client("dynamodb")
        .get_paginator("query")
        .paginate(
            TableName=stack.settings.resources.ledger_table.name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"{c.user_id}#{c.campaign_id}"}},
        )
    )
    for row in (item for page in pages for item in page["Items"]):
        email = (row.get("email") or row["rcpt"])["S"].lower()
        state = row.get("state", {}).get("S")
        if state in EVENT_TYPES:
            expected.add((email, state))
        expected.update((email, kind) for kind in FEEDBACK if f"{kind}_at" in row)
    key = wiring.container().reports.issue_key(c.user_id)
    seen: set[tuple[str, str]] = set()
    after = None
    while True:  # a page stops at its read bound: only an empty one says there is nothing more (docs/api.md)
        query = urllib.parse.urlencode(
            {"campaign": c.campaign_id, "limit": 1000, **({"after": after} if after else {})}
        )
        req = urllib.request.Request(f"{stack.api_url}/events?{query}", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            page = json.loads(resp.read())
        seen.update((str(e["recipient"]).lower(), str(e["type"])) for e in page["events"])
        if not page["events"] or not page.get("next"):
            break
        after = page["next"]
    return [f"{who} {kind}" for who, kind in sorted(expected - seen)]


def queue_left(stack: Any, c: Campaign) -> list[str]:
    mine = {n: v for n, v in stack.queue_depths().items() if c.user_id.lower() in n.lower() and sum(v)}
    return [f"{n}: visible, in flight, delayed {v}" for n, v in sorted(mine.items()) if not n.endswith("-dlq")]


def broken(stack: Any, c: Campaign) -> list[str]:
    """Every promise broken for this campaign, each prefixed with which."""
    checks = {
        "mailed twice": mailed_more_than_once(stack, c),
        "not final": not_final(c),
        "email left on a queue": queue_left(stack, c),
        "counters differ from the ledger": counters_off(c),
        "guard differs from the ledger": guard_off(c),
        "events missing from GET /events": events_missing(stack, c),
    }
    return [f"{what}: {'; '.join(found[:5])}" for what, found in checks.items() if found]
