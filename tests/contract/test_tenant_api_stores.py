"""The stores behind the tenant API's reads, on the real tables of the local stack: the campaigns' index (newest
first), the timeline (several writers adding up, the busiest second), the event log (order, filters, bounded
reads, the same event kept once) and a free tenant's From addresses."""

from __future__ import annotations

import threading
import time

from chalicelib import wiring
from chalicelib.stores import event_log as event_log_module
from chalicelib.stores.event_log import position_at, sort_key
from chalicelib.stores.ports.campaigns import SenderSnapshot
from chalicelib.webhooks.events import WebhookEvent


def _snapshot() -> SenderSnapshot:
    return SenderSnapshot("paid", "news@example.com", "News", "us-east-1", 5.0, 1, "111122223333")


def test_campaigns_are_listed_newest_first_a_page_at_a_time_and_only_the_tenants_own(stack, uid):
    c = wiring.container()
    user = f"u{uid}"
    for i in range(5):
        c.campaign_senders.fix(user, f"c{i}", _snapshot(), f"Subject {i}")
        time.sleep(0.002)  # each created in its own millisecond
    c.campaign_senders.fix(f"other{uid}", "c9", _snapshot(), "Another's")
    seen, before = [], None
    for _ in range(10):
        page, before = c.stats.newest(user, before=before, limit=2)
        seen += [(p.campaign_id, p.subject) for p in page]
        if before is None:
            break
    assert seen == [(f"c{i}", f"Subject {i}") for i in (4, 3, 2, 1, 0)]
    first = c.stats.get(user, "c0")
    assert first is not None and first.created_ms and first.sender_snapshot
    # A campaign's counters written before its first message was accepted (a digest's, an older release's)
    # have no created time: not in the index, so never listed, and no error.
    c.stats.add(user, "legacy", queued=1)
    assert "legacy" not in [p.campaign_id for p in c.stats.newest(user, limit=50)[0]]


def test_sends_add_up_by_minute_and_second_across_writers_and_the_busiest_second_is_kept(stack, uid):
    c = wiring.container()
    user = f"u{uid}"
    c.campaign_senders.fix(user, "t", _snapshot(), "S")
    minute = (int(time.time()) // 60 - 5) * 60  # a whole minute five minutes ago
    barrier = threading.Barrier(3)

    def drainer() -> None:  # three drainers of one campaign, each flushing its own gathered sends
        barrier.wait()
        c.stats.add_counts(user, "t", {"sent": 4}, sent_seconds={minute + 7: 3, minute + 61: 1})

    threads = [threading.Thread(target=drainer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    c.stats.add_counts(user, "t", {"delivered": 2, "opened": 1})
    minutes, more = c.timeline.minutes(user, "t")
    assert more is None
    assert [(m.start_s, m.counts.get("sent", 0)) for m in minutes[:2]] == [(minute, 9), (minute + 60, 3)]
    assert sum(m.counts.get("delivered", 0) for m in minutes) == 2
    counts = c.stats.get(user, "t")
    assert counts is not None and counts["sent"] == 12
    assert (counts.busiest_sent, counts.busiest_at_ms) == (9, (minute + 7) * 1000)
    # A later page starts after the minute key it was given.
    rest, _ = c.timeline.minutes(user, "t", after=time.strftime("%Y-%m-%dT%H:%M", time.gmtime(minute)))
    assert rest[0].start_s == minute + 60


def _event(user: str, campaign: str, kind: str, n: int, at_ms: int) -> WebhookEvent:
    data = {"id": f"evt_{n:032x}", "type": kind, "timestamp": "x", "campaignId": campaign, "recipient": f"r{n}@x.org"}
    return WebhookEvent(user, kind, data, at_ms)


def test_the_event_log_keeps_each_event_once_in_order_and_filters_with_a_bounded_read(stack, uid, monkeypatch):
    log = wiring.container().event_log
    user = f"u{uid}"
    base = 1_790_000_000_000
    events = [_event(user, "a" if n % 3 else "b", "sent" if n % 2 else "delivered", n, base + n) for n in range(40)]
    assert log.keep((e, e.at_ms) for e in events) == 40
    log.keep([(events[0], events[0].at_ms)])  # a redelivered record: the same item
    page = log.page(user, limit=100)
    assert [e["id"] for e in page.events] == [e.id for e in events]

    ids, after = [], None
    for _ in range(20):
        page = log.page(user, campaign="b", type="delivered", after=after, limit=3)
        ids += [e["id"] for e in page.events]
        if not page.events:
            break
        after = page.next
    expected = [e.id for e in events if e.data["campaignId"] == "b" and e.type == "delivered"]
    assert ids == expected
    assert log.page(user, after=position_at(base + 30), limit=100).events == [e.data for e in events[30:]]
    assert log.page(f"other{uid}").events == []

    # A filter matching nothing reads at most MAX_READ_BYTES and answers where it stopped; asked again from
    # there, each answer goes on, and the last reaches the end of the log.
    budget = 16 * event_log_module.MAX_EVENT_BYTES
    monkeypatch.setattr(event_log_module, "MAX_READ_BYTES", budget)
    fill, reads = type(log)._fill, []

    def counted(self, shard, after, size, newest_first):  # type: ignore[no-untyped-def]
        n = fill(self, shard, after, size, newest_first)
        reads.append(n)
        return n

    monkeypatch.setattr(type(log), "_fill", counted)
    positions, after = [], None
    for _ in range(40):
        reads.clear()
        page = log.page(user, type="opened", limit=5, after=after)
        assert page.events == [] and page.next is not None
        assert sum(reads) <= budget and len(reads) <= event_log_module.MAX_ROUNDS * event_log_module.SHARDS
        positions.append(page.next)
        if page.next == after:
            break
        after = page.next
    assert positions == sorted(positions) and positions[-1] == sort_key(events[-1], events[-1].at_ms)


def test_the_largest_event_the_log_keeps_fits_the_size_its_reads_are_bounded_by(stack, uid):
    """A page's bound in bytes holds only if no event is larger than MAX_EVENT_BYTES: the largest one, a
    1,000-character reason of characters outside the BMP (JSON escapes each as 12 bytes) for a recipient of
    254 such characters' worth, kept and read back, measured as DynamoDB counts it."""
    from chalicelib.ingest.machines import Hit, machine_evidence
    from chalicelib.stores.event_log import MAX_EVENT_BYTES, item_bytes

    log, user = wiring.container().event_log, "u" * 100 + uid
    campaign = "c" * 128
    data = {
        "id": f"evt_{'f' * 32}",
        "type": "failed",
        "timestamp": "2026-11-27T12:00:00.000Z",
        "campaignId": campaign,
        "recipient": "\U0001f600" * 64 + "@" + "\U0001f600" * 189,
        "reason": "\U0001f600" * 1000,
        "messageId": "0100018c" + "a" * 60,
    }
    # And a machine's click (chalicelib.ingest.machines): its link as long, with its evidence beside it.
    evidence = machine_evidence(Hit("GET", {"user-agent": "\U0001f600" * 500 + " Googlebot/2.1"}, 0), None)
    assert evidence is not None
    click = {k: v for k, v in data.items() if k != "reason"}
    click.update(id=f"evt_{'e' * 32}", type="clicked", detail=data["reason"], machine=True, evidence=evidence)
    at = 1_790_000_000_000
    log.keep([(WebhookEvent(user, "failed", data, at), at), (WebhookEvent(user, "clicked", click, at), at)])
    model = log._model
    for shard in "fe":
        (item,) = model._get_connection().query(f"{user}#{int(shard, 16) % event_log_module.SHARDS}")["Items"]
        assert 12_000 < item_bytes(item) <= MAX_EVENT_BYTES


def test_a_free_tenants_from_addresses_are_listed_on_its_row_and_follow_an_operators_assignment(stack, uid):
    c = wiring.container()
    first, second = f"f{uid}", f"g{uid}"
    address = f"news@{uid}.example"
    stack.client("sesv2").create_email_identity(EmailIdentity=address)  # its own identity: claimable
    c.free_addresses.claim(first, address, 1)
    c.tenants.accept(first, "free", _sender(address), c.ses.account_of)
    assert c.tenants.get(first, fresh=True).from_addresses == (address,)
    c.free_addresses.assign(second, address, 2)
    assert c.tenants.get(first, fresh=True).from_addresses == ()


def _sender(address: str):
    from chalicelib.core.contract import Sender

    return Sender(address, "N", None, None, None, 1.0)


def test_a_previous_releases_campaigns_are_listed_after_the_operators_index_run_once(stack, uid):
    from chalicelib.stores.campaign_stats import CampaignStatsModel
    from chalicelib.stores.tables import bound

    c = wiring.container()
    user = f"u{uid}"
    m = bound(CampaignStatsModel, c.settings.resources.campaigns_table.name, c.settings.region)
    # As a previous release wrote them: counters and a sender, no created time.
    m(user, "old", sender_snapshot=_snapshot().to_json(), first_sent_ms=1_700_000_000_000).save()
    m(user, "older", sender_snapshot=_snapshot().to_json(), scheduled_at_ms=1_600_000_000_000).save()
    assert c.stats.newest(user)[0] == []
    assert c.stats.list_unlisted(now_ms=1_800_000_000_000) >= 2
    assert [p.campaign_id for p in c.stats.newest(user)[0]] == ["old", "older"]
    assert c.stats.get(user, "old").created_ms == 1_700_000_000_000
    assert c.stats.list_unlisted(now_ms=1_800_000_000_000) == 0  # nothing left: safe to run again


def _queries(monkeypatch) -> list[str]:
    """The DynamoDB Queries this test's thread makes (the stack's own threads are not counted)."""
    from pynamodb.connection.base import Connection

    calls: list[str] = []
    real, me = Connection._make_api_call, threading.get_ident()

    def counted(self, op, kw, *a, **k):
        if threading.get_ident() == me and op == "Query":
            calls.append(op)
        return real(self, op, kw, *a, **k)

    monkeypatch.setattr(Connection, "_make_api_call", counted)
    return calls


def test_a_filtered_recipients_page_reads_at_most_its_limit_of_rows_and_goes_on_by_its_cursor(stack, uid, monkeypatch):
    """The review's case: `state=failed&limit=1` on a 400-recipient campaign made 400 Queries (pynamodb went
    on until one row matched); on a million recipients it read the whole partition, past API Gateway's 29 s.
    (Here the rare state is `cancelled`: the same filter.)"""
    ledger, user = wiring.container().ledger, f"rp{uid}"
    emails = [f"r{i:03d}@example.org" for i in range(400)]
    ledger.record_queued(user, "c1", emails)
    cancelled = ["r120@example.org", "r250@example.org", "r399@example.org"]
    ledger.record_unsent(user, "c1", "cancelled", cancelled, "campaign cancelled")
    queries = _queries(monkeypatch)

    entries, cursor = ledger.page(user, "c1", state="cancelled", limit=1)
    assert len(queries) == 1 and entries == [] and cursor == "r000@example.org"  # one row read, not a match

    found, after, pages = [], None, 0
    while True:
        entries, after = ledger.page(user, "c1", state="cancelled", limit=100, after=after)
        found += [e.email for e in entries]
        pages += 1
        if after is None:
            break
    assert found == cancelled and pages <= 5  # 400 rows, 100 a page (a last page may be empty)
    assert len(queries) == 1 + pages  # one Query a page, whatever the filter finds


def test_a_previous_releases_scheduled_campaign_counts_its_releases_after_the_operators_run_once(stack, uid):
    from chalicelib.control.campaign_views import campaign_json, state_of
    from chalicelib.stores.campaign_stats import CampaignStatsModel
    from chalicelib.stores.tables import bound

    c = wiring.container()
    user = f"u{uid}"
    m = bound(CampaignStatsModel, c.settings.resources.campaigns_table.name, c.settings.region)
    # As the release before wrote it: 10 queued at once and sent, 10 scheduled of which 4 released and sent
    # (counted as queued only), 1 rejected; the other 6 still wait. No `released`, no marker.
    c.ledger.record_queued(user, "mixed", [f"now{i}@example.org" for i in range(10)])
    c.ledger.record_scheduled(user, "mixed", [f"later{i}@example.org" for i in range(10)])
    c.ledger.record_released(user, "mixed", [f"later{i}@example.org" for i in range(4)])
    c.ledger.record_rejected(user, "mixed", [("bad", "not an email address")])
    m(user, "mixed", sender_snapshot=_snapshot().to_json(), queued=14, scheduled=10, rejected=1, sent=14).save()
    # And one with nothing scheduled, and one begun by this release (marked by its first message).
    m(user, "plain", sender_snapshot=_snapshot().to_json(), queued=3, sent=3).save()
    c.campaign_senders.fix(user, "new", _snapshot(), "New")
    c.stats.add(user, "new", scheduled=2)

    before = c.stats.get(user, "mixed")
    assert not before.counts_releases and state_of(before, 0) == "done"  # the old guess: 14 of max(14, 10) + 1
    assert c.stats.count_releases(c.ledger.count) >= 1
    after = c.stats.get(user, "mixed")
    assert after.counts_releases and after["released"] == 4
    progress = campaign_json(after, 0)["progress"]
    assert (progress["final"], progress["accepted"]) == (15, 21) and state_of(after, 0) == "sending"
    assert c.stats.get(user, "plain").counts_releases and c.stats.get(user, "plain")["released"] == 0
    assert c.stats.get(user, "new").counts_releases  # never counted by the run: its first message marked it

    # A release after the run adds to the count; a second run changes nothing.
    c.ledger.record_released(user, "mixed", [f"later{i}@example.org" for i in range(4, 10)])
    c.stats.add(user, "mixed", queued=6, released=6, sent=6)
    assert c.stats.count_releases(c.ledger.count) == 0
    done = c.stats.get(user, "mixed")
    assert done["released"] == 10 and state_of(done, 0) == "done"
    assert campaign_json(done, 0)["progress"]["accepted"] == 21


def test_a_prefix_reads_only_the_addresses_that_begin_with_it_in_any_case(stack, uid, monkeypatch):
    """Finding one recipient among many is one key condition, not a filter over the campaign's rows."""
    ledger, user = wiring.container().ledger, f"rx{uid}"
    emails = [f"{name}{i}@example.org" for name in ("ann", "bob", "Anna") for i in range(30)]
    ledger.record_queued(user, "c1", emails)
    queries = _queries(monkeypatch)

    entries, cursor = ledger.page(user, "c1", prefix="ANN", limit=100)
    assert len(queries) == 1 and cursor is None
    assert sorted(e.email.lower() for e in entries) == sorted(e.lower() for e in emails if e.lower().startswith("ann"))
    exact, _ = ledger.page(user, "c1", prefix="bob7@example.org", limit=100)
    assert [e.email for e in exact] == ["bob7@example.org"]

    found, after = [], None
    while True:
        entries, after = ledger.page(user, "c1", prefix="bob", state="queued", limit=7, after=after)
        found += [e.email for e in entries]
        if after is None:
            break
    assert sorted(found) == sorted(e for e in emails if e.startswith("bob"))
