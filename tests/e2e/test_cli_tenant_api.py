"""The operator's side of the tenant API, run as an operator runs it (`python -m infra ...` against the local
stack): `campaign list|show`, `suppression list|add|remove`, `events` and `tenant show`, each for `--user`,
answering what the API answers the tenant, with tenant text shown and never obeyed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.core.contract import Sender
from chalicelib.stores.ports.campaigns import SenderSnapshot

pytestmark = pytest.mark.e2e
HOSTILE = "[/] [bold]x\x1b[2J\x1b]0;owned\x07\x9b31m\u202e"


def _moonsend(stack: Any, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    return subprocess.run(
        [sys.executable, "-m", "infra", *args, "--endpoint", stack.endpoint],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        input=stdin,
    )


def _json(stack: Any, *args: str) -> Any:
    done = _moonsend(stack, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _event_id(n: int) -> str:
    return f"evt_{n:032x}"  # as chalicelib.webhooks.events names them


@dataclass(frozen=True)
class _Event:
    user_id: str
    type: str
    id: str
    data: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def tenant(stack: Any) -> str:
    """A paid tenant with three campaigns made through the stores (as their first messages and the drainer's
    flushes make them), one with a hostile subject; three events; no suppression yet."""
    user = f"cli-api-{time.time_ns() % 10**9:09d}"
    c = wiring.container()
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "News", None, None, None, 1.0), c.ses.account_of)
    now = int(time.time())
    for i, (campaign, subject) in enumerate((("one", "First"), ("two", "Second"), ("evil", HOSTILE))):
        snapshot = SenderSnapshot("paid", f"news@{user}.example", "News", "us-east-1", 10.0, 1, "123456789012")
        c.campaign_senders.fix(user, campaign, snapshot, subject)
        time.sleep(0.01)  # created one after the other: listed newest first
        seconds = {now - 120 + s: 5 for s in range(0, 90, 3)}  # 30 seconds over two minutes, 150 sends
        c.stats.add_counts(user, campaign, {"queued": 150 + i, "sent": 150}, sent_seconds=seconds)
    c.event_log.keep(
        (
            _Event(user, kind, _event_id(n), {"id": _event_id(n), "type": kind, "campaignId": "one", "recipient": who}),
            now * 1000 - 60_000 + n,
        )
        for n, (kind, who) in enumerate((("sent", "a@example.org"), ("delivered", "a@example.org"), ("sent", HOSTILE)))
    )
    return user


def test_campaign_list_pages_newest_first_and_a_bad_cursor_is_a_clear_usage_error(stack, tenant):
    page = _moonsend(stack, "campaign", "list", "--user", tenant, "--limit", "2")
    assert page.returncode == 0, page.stderr
    rows = [line for line in page.stdout.splitlines() if "│" in line]  # the header is drawn with ┃
    assert [r.split("│")[1].strip() for r in rows] == ["evil", "two"]
    assert "150/151" in rows[1] and "99.3%" in rows[1]  # sent/accepted and progress of `two`
    cursor = page.stderr.split("more: --after ", 1)[1].split()[0]
    rest = _moonsend(stack, "campaign", "list", "--user", tenant, "--limit", "2", "--after", cursor, "--json")
    body = json.loads(rest.stdout)
    assert [c["id"] for c in body["campaigns"]] == ["one"] and body["next"] is None
    assert body["campaigns"][0]["progress"] == {"final": 150, "accepted": 150, "fraction": 1.0, "acceptedMayGrow": True}

    bad = _moonsend(stack, "campaign", "list", "--user", tenant, "--after", "!!not-a-cursor!!")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "campaign list: after: not a cursor of this list" in bad.stderr
    other = _moonsend(stack, "campaign", "list", "--user", f"{tenant}-nobody", "--json")
    assert json.loads(other.stdout) == {"campaigns": [], "next": None}


def test_campaign_show_prints_the_summary_the_timeline_per_minute_and_the_busiest_second(stack, tenant):
    shown = _moonsend(stack, "campaign", "show", "--user", tenant, "--id", "two")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "Second" in out and "150 of 151 with an outcome" in out and "news@" in out
    minutes = [line for line in out.splitlines() if line.startswith("│ 20")]
    assert 2 <= len(minutes) <= 3 and sum(int(m.split("│")[2]) for m in minutes) == 150
    assert "busiest second: 5 sent at 20" in out
    as_json = _json(stack, "campaign", "show", "--user", tenant, "--id", "two")
    assert sum(m["sent"] for m in as_json["timeline"]["minutes"]) == 150

    missing = _moonsend(stack, "campaign", "show", "--user", tenant, "--id", "nope")
    assert missing.returncode == 1 and "no campaign 'nope'" in missing.stderr
    no_id = _moonsend(stack, "campaign", "show", "--user", tenant)
    assert no_id.returncode == 2 and "needs --id" in no_id.stderr


def test_tenant_text_in_tables_is_shown_escaped_and_never_reaches_the_terminal_as_controls(stack, tenant):
    for args in (("campaign", "list"), ("campaign", "show", "--id", "evil"), ("events",)):
        out = _moonsend(stack, *args, "--user", tenant)
        assert out.returncode == 0, out.stderr
        assert "[/] [bold]x" in out.stdout and "\\x1b[2J" in out.stdout and "\\u202e" in out.stdout
        assert not any(ch in out.stdout for ch in "\x1b\x07\x9b\u202e"), args
    as_json = _moonsend(stack, "campaign", "list", "--user", tenant, "--json")
    assert not any(ch in as_json.stdout for ch in "\x1b\x07\x9b\u202e")
    assert json.loads(as_json.stdout)["campaigns"][0]["subject"] == HOSTILE  # escaped as JSON, kept as it is


def test_events_are_listed_oldest_first_filtered_with_the_cursor_to_go_on_from(stack, tenant):
    page = _moonsend(stack, "events", "--user", tenant, "--limit", "2")
    assert page.returncode == 0, page.stderr
    rows = [line for line in page.stdout.splitlines() if "evt_" in line]
    assert [r.split("│")[2].strip() for r in rows] == ["sent", "delivered"]
    cursor = page.stderr.split("next (now or later): --after ", 1)[1].split()[0]
    rest = _json(stack, "events", "--user", tenant, "--after", cursor)
    assert [e["id"] for e in rest["events"]] == [_event_id(2)] and rest["next"]
    sent = _json(stack, "events", "--user", tenant, "--type", "sent")
    assert [e["id"] for e in sent["events"]] == [_event_id(0), _event_id(2)]
    later = _json(stack, "events", "--user", tenant, "--since", "2999-01-01T00:00:00Z")
    assert later["events"] == []
    bad = _moonsend(stack, "events", "--user", tenant, "--since", "yesterday")
    assert bad.returncode == 2 and "since: an instant in UTC" in bad.stderr
    bad_cursor = _moonsend(stack, "events", "--user", tenant, "--after", "x")
    assert bad_cursor.returncode == 2 and "after: not a cursor" in bad_cursor.stderr


def test_suppressions_are_added_listed_by_page_and_lifted_or_kept_saying_why(stack, tenant, tmp_path: Path):
    listed = tmp_path / "list.txt"
    listed.write_text("f1@example.org\n\nf2@example.org\n")
    added = _moonsend(
        stack, "suppression", "add", "--user", tenant, "a@example.org", "B@Example.org", "--file", str(listed)
    )
    assert added.returncode == 0 and "4 address(es) added" in added.stdout and "0 already" in added.stdout
    again = _moonsend(stack, "suppression", "add", "--user", tenant, "a@example.org", "--reason", "asked by phone")
    assert again.returncode == 0 and "0 address(es) added" in again.stdout and "1 already" in again.stdout
    invalid = _moonsend(
        stack, "suppression", "add", "--user", tenant, "ok@example.org", "no", "--file", "-", stdin="c\x1b@x\n"
    )
    assert invalid.returncode == 2 and "nothing was added" in invalid.stderr
    assert "#2: 'no': not an email address" in invalid.stderr and "#3: 'c\\\\x1b@x': holds control" in invalid.stderr
    wiring.container().suppressions.add(tenant, "angry@example.org", "complaint", "complaint (abuse)")

    page = _moonsend(stack, "suppression", "list", "--user", tenant, "--limit", "2", "--reason", "manual")
    assert page.returncode == 0, page.stderr
    assert "a@example.org" in page.stdout and "b@example.org" in page.stdout.lower()
    cursor = page.stderr.split("more: --after ", 1)[1].split()[0]
    rest = _json(stack, "suppression", "list", "--user", tenant, "--after", cursor)
    assert [s["email"] for s in rest["suppressions"]] == ["f1@example.org", "f2@example.org"]  # after b@, any reason
    found = _json(stack, "suppression", "list", "--user", tenant, "--prefix", "ANG")
    assert [(s["reason"], s["scope"]) for s in found["suppressions"]] == [("complaint", "tenant")]

    lifted = _moonsend(stack, "suppression", "remove", "--user", tenant, "A@example.org")
    assert lifted.returncode == 0 and "a@example.org lifted" in lifted.stdout
    gone = _moonsend(stack, "suppression", "remove", "--user", tenant, "a@example.org")
    assert gone.returncode == 1 and "is not on its suppression list" in gone.stderr
    kept = _moonsend(stack, "suppression", "remove", "--user", tenant, "angry@example.org")
    assert kept.returncode == 1 and "stays suppressed" in kept.stderr and "spam" in kept.stderr
    bad = _moonsend(stack, "suppression", "list", "--user", tenant, "--prefix", "x" * 2000)
    assert bad.returncode == 2 and "prefix: at most" in bad.stderr


def test_tenant_show_prints_its_plan_rate_and_standing(stack, tenant):
    shown = _moonsend(stack, "tenant", "show", "--user", tenant)
    assert shown.returncode == 0, shown.stderr
    assert "free" in shown.stdout and f"news@{tenant}.example" in shown.stdout and "paused" in shown.stdout
    body = _json(stack, "tenant", "show", "--user", tenant)
    assert body["id"] == tenant and body["plan"] == "free" and body["paused"] is False


def test_index_campaigns_lists_a_previous_releases_campaigns_and_says_how_many(stack):
    from chalicelib.stores.campaign_stats import CampaignStatsModel
    from chalicelib.stores.tables import bound

    user = f"cli-old-{time.time_ns() % 10**9:09d}"  # its own tenant: the module's keeps its three campaigns
    c = wiring.container()
    m = bound(CampaignStatsModel, c.settings.resources.campaigns_table.name, c.settings.region)
    snapshot = SenderSnapshot("paid", f"news@{user}.example", "News", "us-east-1", 10.0, 1, "123456789012")
    c.campaign_senders.fix(user, "after-upgrade", snapshot, "New")
    m(user, "from-before", sender_snapshot=snapshot.to_json(), first_sent_ms=1_600_000_000_000).save()
    assert [c["id"] for c in _json(stack, "campaign", "list", "--user", user)["campaigns"]] == ["after-upgrade"]
    done = _moonsend(stack, "index-campaigns")
    assert done.returncode == 0, done.stderr
    assert "campaign(s) of a previous release are now listed" in done.stdout and not done.stdout.startswith("0 ")
    listed = [c["id"] for c in _json(stack, "campaign", "list", "--user", user)["campaigns"]]
    assert listed == ["after-upgrade", "from-before"]  # the older last: its first send, long ago
