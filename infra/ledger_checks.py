"""What a tenant can read, against what the ledger says: the counters' drift, and the events missing from
GET /events. Read-only checks for the soak (bench/soak.py) and the fault explorer (tests/faults); every figure
is read as its reader reads it (the counters item, the API page by page), and the ledger row by row."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from chalicelib.core.webhook_contract import EVENT_TYPES
from chalicelib.stores.ledger_model import FEEDBACK, PERSON_OF
from chalicelib.stores.ledger_tally import ENTRIES, STATED


def counter_drift(container: Any, user: str, campaign: str) -> dict[str, int]:
    """What the ledger's tally says each counter should be, less what it is (only those that differ; the entry
    counters only for a campaign whose rows keep their entry times)."""
    read = container.stats.read(user, campaign)
    tally = container.ledger.tally(user, campaign)
    names = STATED if read is None or read.entries_marked else [n for n in STATED if n not in ENTRIES]
    drift = {n: tally[n] - (read[n] if read else 0) for n in names}
    return {n: d for n, d in drift.items() if d}


def ledger_events(dynamodb: Any, table: str, user: str, campaign: str) -> set[tuple[str, str]]:
    """(recipient, type) of each event the campaign's ledger rows imply: a final state that is an event, and
    each kind of feedback recorded (its `<kind>_at`; a machine's open or click as `opened/machine`, ...)."""
    expected: set[tuple[str, str]] = set()
    pages = dynamodb.get_paginator("query").paginate(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"{user}#{campaign}"}},
    )
    for row in (item for page in pages for item in page["Items"]):
        email = (row.get("email") or row["rcpt"])["S"].lower()
        state = row.get("state", {}).get("S")
        if state in EVENT_TYPES:
            expected.add((email, state))
        expected.update((email, _told_as(kind)) for kind in FEEDBACK if f"{kind}_at" in row)
    return expected


def _told_as(kind: str) -> str:
    """A feedback kind as its event tells it: a machine's open is an `opened` event marked `machine`."""
    person = PERSON_OF.get(kind)
    return f"{person}/machine" if person else kind


def events_read(api_url: str, key: str, campaign: str) -> set[tuple[str, str]]:
    """(recipient, type) of the campaign's events as GET /events gives them (a machine's open or click as
    `opened/machine`, ...), page by page: a page stops at its
    read bound with fewer events than asked and more to come, so only an empty page ends (docs/api.md)."""
    seen: set[tuple[str, str]] = set()
    after = None
    while True:
        query = urllib.parse.urlencode({"campaign": campaign, "limit": 1000, **({"after": after} if after else {})})
        req = urllib.request.Request(f"{api_url}/events?{query}", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            page = json.loads(resp.read())
        seen.update(
            (str(e["recipient"]).lower(), str(e["type"]) + ("/machine" if e.get("machine") is True else ""))
            for e in page["events"]
        )
        if not page["events"] or not page.get("next"):
            return seen
        after = page["next"]


def events_missing(stack: Any, container: Any, user: str, campaign: str) -> set[tuple[str, str]]:
    """The events the ledger implies that the tenant cannot read (a key issued for the reading)."""
    table = stack.settings.resources.ledger_table.name
    expected = ledger_events(stack.client("dynamodb"), table, user, campaign)
    return expected - events_read(stack.api_url, container.api_keys.replace_all(user), campaign)
