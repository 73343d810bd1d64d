"""The tenant API's reads over HTTP on the local stack: campaigns (newest first, state, progress, timeline),
the suppression list, the tenant's own settings and its events; each with the tenant's key only."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.control import params
from chalicelib.core.contract import Sender
from chalicelib.stores.ledger_model import SENT
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import eventually
from tests.e2e.test_pipeline_e2e import _tenant

pytestmark = pytest.mark.e2e
RATE = 20


def _call(
    method: str, url: str, key: str | None = None, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    data = json.dumps(body).encode() if body is not None else None
    sent = {**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})}
    if data is not None:
        sent["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=sent, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None, dict(resp.headers)
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None, dict(err.headers)


def _send(stack: Any, user: str, sender: dict[str, str], campaign: str, n: int, subject: str = "Hello {{ name }}"):
    spec = CampaignSpec(user, sender, subject, "<p>{{ name }}</p>", campaign)
    recipients = [{"email": f"r{i}@example.org", "metadata": {"name": f"N{i}"}} for i in range(n)]
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, recipients))


def _sent(user: str, campaign: str) -> int:
    """Sent as the ledger says and as the campaign's counters say (the drainer flushes them every second)."""
    counts = wiring.container().stats.get(user, campaign)
    ledger = sum(1 for e in wiring.container().ledger.entries(user, campaign) if e.state == SENT)
    return min(ledger, counts["sent"] if counts else 0)


@pytest.fixture(scope="module")
def tenant(stack: Any) -> dict[str, Any]:
    """A paid tenant with three campaigns sent, created one after the other; its key; another tenant's key."""
    uid = f"{time.time_ns() % 10**9:09d}"
    user = f"api-{uid}"
    sender = _tenant(stack, uid, rate=RATE, ses_rate=50)
    for campaign, n in (("first", 3), ("second", 4), ("third", 25)):
        _send(stack, user, sender, campaign, n, subject=f"{campaign} for {{{{ name }}}}")
        assert eventually(lambda c=campaign, k=n: _sent(user, c) == k, 60, poll_s=0.1)
    c = wiring.container()
    other = f"other-{uid}"
    c.tenants.accept(other, "free", Sender(f"news@{other}.example", "N", None, None, None, 1.0), c.ses.account_of)
    return {
        "user": user,
        "address": sender["emailAddress"],
        "key": c.api_keys.replace_all(user),
        "other": other,
        "other_key": c.api_keys.replace_all(other),
    }


def test_campaigns_are_listed_newest_first_with_summary_state_and_progress_and_page_by_cursor(stack, tenant):
    base, key = stack.api_url, tenant["key"]
    status, body, _ = _call("GET", f"{base}/campaigns", key)
    assert status == 200
    listed = [c["id"] for c in body["campaigns"]]
    assert listed == ["third", "second", "first"] and body["next"] is None
    third = body["campaigns"][0]
    assert third["subject"] == "third for {{ name }}" and third["plan"] == "paid"
    assert third["sender"] == {
        "emailAddress": tenant["address"],
        "fromName": "News",
        "region": "us-east-1",
    }
    assert third["ratePerSecond"] == RATE and third["createdAt"].endswith("Z")
    assert third["state"] == "done" and third["counts"]["sent"] == 25
    assert third["progress"] == {"final": 25, "accepted": 25, "fraction": 1.0, "acceptedMayGrow": True}

    pages, after = [], None
    while True:
        query = "limit=1" + (f"&after={urllib.parse.quote(after)}" if after else "")
        status, body, _ = _call("GET", f"{base}/campaigns?{query}", key)
        assert status == 200 and len(body["campaigns"]) <= 1
        pages.append([c["id"] for c in body["campaigns"]])
        after = body["next"]
        if not after:
            break
    assert [p for p in pages if p] == [["third"], ["second"], ["first"]]

    assert [c["id"] for c in _call("GET", f"{base}/campaigns?state=done", key)[1]["campaigns"]] == listed
    assert _call("GET", f"{base}/campaigns?state=sending", key)[1]["campaigns"] == []
    assert _call("GET", f"{base}/campaigns", tenant["other_key"])[1]["campaigns"] == []  # none of another's


def test_a_campaign_shows_its_timeline_per_minute_and_its_busiest_second(stack, tenant):
    status, body, _ = _call("GET", f"{stack.api_url}/campaigns/third", tenant["key"])
    assert status == 200 and body["id"] == "third"
    minutes = body["timeline"]["minutes"]
    assert body["timeline"]["resolution"] == "minute" and minutes
    assert sum(m["sent"] for m in minutes) == 25
    assert all(m["minute"].endswith(":00.000Z") for m in minutes)
    assert [m["minute"] for m in minutes] == sorted(m["minute"] for m in minutes)
    busiest = body["timeline"]["busiestSecond"]
    # At most the rate in any second (the promise), and at least one second had several sends.
    assert busiest is not None and 2 <= busiest["sent"] <= RATE
    assert _call("GET", f"{stack.api_url}/campaigns/third", tenant["other_key"])[0] == 404


def test_lists_answer_an_etag_and_304_with_no_body_when_the_client_has_it(stack, tenant):
    url = f"{stack.api_url}/campaigns"
    status, body, headers = _call("GET", url, tenant["key"])
    tag = headers["ETag"]
    status, body, headers = _call("GET", url, tenant["key"], headers={"If-None-Match": tag})
    assert status == 304 and body is None and headers["ETag"] == tag
    assert _call("GET", url, tenant["key"], headers={"If-None-Match": '"stale"'})[0] == 200


def test_the_tenant_reads_its_own_settings_and_never_a_secret(stack, tenant):
    status, body, _ = _call("GET", f"{stack.api_url}/tenant", tenant["key"])
    assert status == 200 and body["id"] == tenant["user"] and body["plan"] == "paid"
    assert body["ratePerSecond"] == RATE and body["paused"] is False and body["pauses"] == []
    assert body["fromAddresses"] == [tenant["address"]] and body["dailyCap"] is None
    assert "secret" not in json.dumps(body).lower()
    status, body, _ = _call("GET", f"{stack.api_url}/tenant", tenant["other_key"])
    assert status == 200 and body["plan"] == "free" and body["dailyCap"]["limit"] > 0
    assert body["dailyCap"]["usedToday"] == 0 and body["dailyCap"]["resetsAt"].endswith("T00:00:00.000Z")
    c = wiring.container()
    c.actions.pause_tenant(tenant["other"], "abuse report", by_tenant=False)
    try:
        body = _call("GET", f"{stack.api_url}/tenant", tenant["other_key"])[1]
        assert body["paused"] is True and [p["by"] for p in body["pauses"]] == ["operator"]
    finally:
        c.actions.resume_tenant(tenant["other"], by_tenant=False)
    assert _call("GET", f"{stack.api_url}/tenant")[0] == 401


def test_the_tenants_events_are_read_in_order_filtered_and_from_where_the_last_page_stopped(stack, tenant):
    base, key = stack.api_url, tenant["key"]

    def sent_events() -> list[dict[str, Any]]:
        return _call("GET", f"{base}/events?type=sent&campaign=third&limit=1000", key)[1]["events"]

    assert eventually(lambda: len(sent_events()) == 25, 30, poll_s=0.2)
    events = sent_events()
    assert {e["type"] for e in events} == {"sent"} and {e["campaignId"] for e in events} == {"third"}
    assert len({e["id"] for e in events}) == 25
    assert [e["timestamp"] for e in events] == sorted(e["timestamp"] for e in events)

    seen, after = [], None
    for _ in range(100):
        query = "limit=7&campaign=second" + (f"&after={urllib.parse.quote(after)}" if after else "")
        status, body, _ = _call("GET", f"{base}/events?{query}", key)
        assert status == 200
        seen += [e["id"] for e in body["events"]]
        if not body["events"]:
            break
        after = body["next"]
    assert len(seen) == len(set(seen)) >= 4  # each of second's four recipients' `sent`, each once
    # The page after the end is empty and answers where to go on from: no earlier than where it was asked
    # from (past any other campaign's events it read meanwhile: they are not read again).
    status, body, _ = _call("GET", f"{base}/events?campaign=second&after={urllib.parse.quote(after)}", key)
    assert status == 200 and body["events"] == []
    assert params.decode_cursor({"after": body["next"]}) >= params.decode_cursor({"after": after})

    later = _call("GET", f"{base}/events?since=2999-01-01T00:00:00Z", key)[1]
    assert later["events"] == []
    assert _call("GET", f"{base}/events", tenant["other_key"])[1]["events"] == []


def test_a_tenant_adds_lists_and_lifts_its_own_suppressions_and_keeps_what_it_may_not_lift(stack, tenant, uid):
    base, key = stack.api_url, tenant["key"]
    addresses = [f"s{i}-{uid}@example.org" for i in range(5)] + [f"Mixed.Case+{uid}@Example.org"]
    status, body, _ = _call("POST", f"{base}/suppressions", key, {"addresses": addresses, "reason": "asked by phone"})
    assert status == 200 and body == {"added": 6, "alreadySuppressed": 0}
    assert _call("POST", f"{base}/suppressions", key, {"addresses": addresses[:2]})[1]["alreadySuppressed"] == 2
    c = wiring.container()
    c.suppressions.add(tenant["user"], f"angry-{uid}@example.org", "complaint", "complaint (abuse) about campaign x")

    pages, after = [], None
    while True:
        query = "limit=2&prefix=s&reason=manual" + (f"&after={urllib.parse.quote(after)}" if after else "")
        status, body, _ = _call("GET", f"{base}/suppressions?{query}", key)
        assert status == 200
        pages += [s["email"] for s in body["suppressions"]]
        after = body["next"]
        if not after:
            break
    assert sorted(pages) == sorted(addresses[:5])
    mixed = _call("GET", f"{base}/suppressions?prefix=mixed.case", key)[1]["suppressions"]
    assert [(s["email"], s["reason"], s["scope"], s["detail"]) for s in mixed] == [
        (addresses[5], "manual", "tenant", "asked by phone")
    ]

    # Lifted by its own address (any case, encoded as a client encodes a path segment); then it is gone.
    quoted = urllib.parse.quote(addresses[5].upper(), safe="")
    status, body, _ = _call("DELETE", f"{base}/suppressions/{quoted}", key)
    assert status == 200 and body == {"email": addresses[5], "lifted": True}
    assert _call("DELETE", f"{base}/suppressions/{quoted}", key)[0] == 404
    status, body, headers = _call("DELETE", f"{base}/suppressions/angry-{uid}%40example.org", key)
    assert status == 409 and body["reason"] == "complaint" and body["scope"] == "tenant"
    assert "spam" in body["detail"] and headers["Content-Type"] == "application/problem+json"
    assert _call("DELETE", f"{base}/suppressions/s0-{uid}%40example.org", tenant["other_key"])[0] == 404
    assert _call("GET", f"{base}/suppressions", tenant["other_key"])[1]["suppressions"] == []

    status, body, _ = _call("POST", f"{base}/suppressions", key, {"addresses": ["ok@example.org", "no", "a\x00@b.org"]})
    assert status == 400 and [(i["index"], i["why"]) for i in body["invalid"]] == [
        (1, "not an email address"),
        (2, "holds control characters"),
    ]
    assert c.suppressions.entry(tenant["user"], "ok@example.org") is None  # nothing added


def test_a_platform_bounce_shows_on_the_list_of_a_tenant_that_met_the_address_and_of_no_other(stack, tenant, uid):
    c = wiring.container()
    gone = f"gone-{uid}@example.org"
    c.suppressions.add(None, gone, "bounce", "permanent bounce: 550 5.1.1 user unknown")
    assert _call("GET", f"{stack.api_url}/suppressions?prefix=gone", tenant["key"])[1]["suppressions"] == []
    assert gone in c.suppressions.check(tenant["user"], [gone])  # the tenant meets it: it now applies
    listed = _call("GET", f"{stack.api_url}/suppressions?prefix=gone", tenant["key"])[1]["suppressions"]
    assert [(s["email"], s["reason"], s["scope"]) for s in listed] == [(gone, "bounce", "platform")]
    status, body, _ = _call("DELETE", f"{stack.api_url}/suppressions/{gone}", tenant["key"])
    assert status == 409 and body["scope"] == "platform"
    assert _call("GET", f"{stack.api_url}/suppressions?prefix=gone", tenant["other_key"])[1]["suppressions"] == []
