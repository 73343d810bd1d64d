"""The tenant API's reads as pure code: a campaign's state and progress, the list's paging and filter, and every
parameter and cursor a hostile client can send answered with a 400 that says what is wrong, never a look-up."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.control import params
from chalicelib.control.campaign_reads import CampaignReads
from chalicelib.control.campaign_views import accepted_count, campaign_json, final_count, state_of
from chalicelib.control.event_reads import EventReads
from chalicelib.control.suppression_api import SuppressionApi
from chalicelib.stores.ports.campaigns import CampaignCounts, Minute
from tests.fakes.answered import Answered, answered
from tests.fakes.event_log import FakeEventLog
from tests.fakes.suppressions import FakeSuppressions

NOW_MS = 1_790_000_000_000


def _counts(campaign_id: str = "c", created_ms: int | None = NOW_MS, **kw: Any) -> CampaignCounts:
    fields = {k: kw.pop(k) for k in ("control", "scheduled_at_ms", "deadline_ms") if k in kw}
    return CampaignCounts("acme", campaign_id, kw, created_ms=created_ms, **fields)


# --- state and progress ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "state"),
    [
        (_counts(queued=10, sent=4), "sending"),
        (_counts(queued=10, sent=8, failed=1, suppressed=1), "sending"),  # the suppressed were never queued
        (_counts(queued=9, sent=8, failed=1, suppressed=1), "done"),
        (_counts(queued=10, sent=4, control="paused"), "paused"),
        (_counts(queued=10, sent=4, cancelled=6, control="cancelled"), "cancelled"),
        (_counts(scheduled=10, scheduled_at_ms=NOW_MS + 60_000), "scheduled"),
        (_counts(scheduled=10, queued=3, scheduled_at_ms=NOW_MS - 1), "scheduled"),  # being released
        (_counts(scheduled=10, queued=10, sent=10, scheduled_at_ms=NOW_MS - 1), "done"),
        (_counts(rejected=3), "done"),  # every recipient refused: nothing more to do
    ],
)
def test_a_campaigns_state_follows_its_controls_its_time_and_its_outcomes(counts, state):
    assert state_of(counts, NOW_MS) == state


def test_progress_is_outcomes_over_accepted_recipients_and_says_more_may_come_until_nothing_can():
    c = _counts(queued=8, rejected=1, suppressed=1, sent=5, failed=1)
    assert (final_count(c), accepted_count(c)) == (8, 10)
    shown = campaign_json(c, NOW_MS)
    assert shown["progress"] == {"final": 8, "accepted": 10, "fraction": 0.8, "acceptedMayGrow": True}
    assert campaign_json(_counts(control="cancelled"), NOW_MS)["progress"]["acceptedMayGrow"] is False
    assert campaign_json(_counts(deadline_ms=NOW_MS - 1), NOW_MS)["progress"]["acceptedMayGrow"] is False
    assert campaign_json(_counts(), NOW_MS)["progress"]["fraction"] is None  # nothing accepted yet
    assert campaign_json(_counts(created_ms=None), NOW_MS)["createdAt"] is None


# --- the campaign list -------------------------------------------------------------------------------------------


class _Pages:
    """The campaigns' index in memory: newest first by (created ms, id); each call counted."""

    def __init__(self, campaigns: list[CampaignCounts]) -> None:
        self.campaigns = sorted(campaigns, key=lambda c: (c.created_ms or 0, c.campaign_id), reverse=True)
        self.calls: list[tuple[tuple[int, str] | None, int]] = []

    def newest(self, user_id: str, *, before: tuple[int, str] | None = None, limit: int = 50):
        self.calls.append((before, limit))
        keys = [(c.created_ms or 0, c.campaign_id) for c in self.campaigns]
        start = 0 if before is None else next((i + 1 for i, k in enumerate(keys) if k == before), len(keys))
        page = self.campaigns[start : start + limit]
        more = keys[start + limit - 1] if start + limit < len(keys) else None
        return page, more

    def get(self, user_id: str, campaign_id: str) -> CampaignCounts | None:
        return next((c for c in self.campaigns if c.campaign_id == campaign_id), None)


class _Timeline:
    def minutes(self, user_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1440):
        return [Minute(NOW_MS // 60_000 * 60, {"sent": 3})], None


def _reads(campaigns: list[CampaignCounts]) -> tuple[CampaignReads, _Pages]:
    pages = _Pages(campaigns)
    return CampaignReads(pages, _Timeline(), clock=lambda: NOW_MS / 1000), pages


def _list(reads: CampaignReads, **query: str) -> Answered:
    return answered(lambda: reads.list_for("acme", query))


def test_the_list_pages_newest_first_and_a_cursor_goes_on_where_the_page_stopped():
    reads, _ = _reads([_counts(f"c{i}", NOW_MS + i, queued=1, sent=1) for i in range(7)])
    seen, after = [], None
    for _ in range(10):
        body = _list(reads, limit="3", **({"after": after} if after else {})).body
        seen += [c["id"] for c in body["campaigns"]]
        after = body["next"]
        if after is None:
            break
    assert seen == [f"c{i}" for i in range(6, -1, -1)]


def test_a_state_filter_reads_on_past_pages_without_a_match_and_stops_at_its_read_budget():
    done = [_counts(f"d{i}", NOW_MS + 100 + i, queued=1, sent=1) for i in range(30)]
    sending = [_counts(f"s{i}", NOW_MS + i, queued=2, sent=1) for i in range(3)]
    reads, pages = _reads(done + sending)
    body = _list(reads, state="sending", limit="2").body
    assert [c["id"] for c in body["campaigns"]] == ["s2", "s1"] and body["next"]
    assert [c["id"] for c in _list(reads, state="sending", after=body["next"]).body["campaigns"]] == ["s0"]
    reads, pages = _reads([_counts(f"d{i}", NOW_MS + i, queued=1, sent=1) for i in range(3000)])
    body = _list(reads, state="paused").body
    assert body["campaigns"] == [] and body["next"] is not None  # a budget's worth read, and where it stopped
    assert sum(limit for _before, limit in pages.calls) <= 1000


@pytest.mark.parametrize(
    "query",
    [
        {"after": "x" * 10_000},
        {"after": "%%%"},
        {"after": params.encode_cursor("no-colon")},
        {"after": params.encode_cursor("12:" + "x" * 200)},  # no campaign can have that id
        {"after": params.encode_cursor("99999999999999999999:c")},
        {"after": "\udcff"},  # what a non-UTF-8 query string decodes to
        {"after": "YQ\x00"},
        {"state": "running"},
        {"state": "x" * 10_000},
        {"limit": "0"},
        {"limit": "201"},
        {"limit": "1e3"},
        {"limit": "-1"},
    ],
)
def test_an_absurd_list_parameter_is_a_400_that_names_it_and_reads_nothing(query):
    reads, pages = _reads([_counts("c", queued=1)])
    answer = _list(reads, **query)
    assert answer.status == 400 and answer.body["error"].split(":")[0] in query
    assert pages.calls == []


def test_no_key_is_a_401_and_a_wrong_key_or_another_tenants_campaign_the_same_404():
    from chalicelib.api.principal import from_authorization

    authenticate = lambda authorization: "acme" if authorization == "Bearer good" else None  # noqa: E731
    reads, _ = _reads([_counts("c", queued=1)])
    assert answered(lambda: {"tenant": from_authorization(None, authenticate).tenant_id}).status == 401
    assert answered(lambda: {"tenant": from_authorization("Bearer wrong", authenticate).tenant_id}).status == 404
    assert from_authorization("Bearer good", authenticate).tenant_id == "acme"
    for other_scheme in ("Basic YWNtZTpnb29k", "good", "Token good"):
        assert answered(lambda s=other_scheme: {"t": from_authorization(s, authenticate).tenant_id}).status == 401
    assert answered(lambda: reads.show_for("acme", "nope", {})).status == 404
    assert answered(lambda: reads.show_for("acme", "x" * 10_000, {})).status == 404
    bad_minute = {"timelineAfter": params.encode_cursor("2026-13")}
    assert answered(lambda: reads.show_for("acme", "c", bad_minute)).status == 400
    shown = reads.show_for("acme", "c", {})
    assert shown["timeline"]["minutes"][0]["sent"] == 3 and shown["timeline"]["minutes"][0]["minute"].endswith(
        ":00.000Z"
    )


# --- suppressions ------------------------------------------------------------------------------------------------


def _api() -> tuple[SuppressionApi, FakeSuppressions]:
    store = FakeSuppressions()
    return SuppressionApi(store), store


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("ann\x00@example.org", "holds control characters"),
        ("ann@example.org\r\nBcc: x@y.org", "holds control characters"),
        ("a" * 300 + "@example.org", "longer than 254 characters"),
        (17, "not a string"),
        ("no-at-sign", "not an email address"),
    ],
)
def test_an_address_that_is_not_one_is_named_with_why_and_nothing_is_added(given, why):
    api, store = _api()
    answer = answered(lambda: api.add_for("acme", {"addresses": ["ok@example.org", given]}))
    assert answer.status == 400 and answer.body["invalid"][0]["index"] == 1 and answer.body["invalid"][0]["why"] == why
    assert len(answer.body["invalid"][0]["address"]) <= 255
    assert store.entries == {}


@pytest.mark.parametrize(
    "body",
    [
        None,
        {},
        {"addresses": "a@b.org"},
        {"addresses": []},
        {"addresses": ["a@b.org"] * 1001},
        {"addresses": ["a@b.org"], "reason": 3},
    ],
)
def test_a_body_without_a_list_of_1_to_1000_addresses_or_with_a_bad_reason_is_a_400(body):
    api, store = _api()
    assert answered(lambda: api.add_for("acme", body)).status == 400 and store.added == []


def test_a_suppression_list_of_100000_entries_is_paged_through_each_entry_once():
    api, store = _api()
    store.add_many("acme", (f"r{i:06d}@example.org" for i in range(100_000)), "import")
    seen, after, pages = 0, None, 0
    while True:
        body = api.list_for("acme", {"limit": "1000", **({"after": after} if after else {})})
        seen += len(body["suppressions"])
        pages += 1
        after = body["next"]
        if after is None:
            break
    assert (seen, pages) == (100_000, 100)


def test_removing_an_address_that_cannot_be_one_is_a_404_without_a_look_up():
    class NoLookUps(FakeSuppressions):
        def entry(self, user_id: str, email: str):
            raise AssertionError(f"looked up: {email!r}")

    api = SuppressionApi(NoLookUps())
    for address in ("x" * 10_000, "a\x00@b.org", "\udcff@b.org"):
        assert answered(lambda a=address: api.remove_for("acme", a)).status == 404


# --- events -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        {"since": "yesterday"},
        {"since": "2026-02-30T00:00:00Z"},
        {"since": "2026-11-26T03:00:00+02:00"},
        {"since": "2026-11-26T03:00:00Z", "after": params.encode_cursor("1790000000000#")},
        {"after": params.encode_cursor("1790000000000#evt_nothex")},
        {"type": "sent,delivered"},
        {"campaign": "has space"},
        {"campaign": "c" * 129},
    ],
)
def test_an_absurd_events_parameter_is_a_400(query):
    reads = EventReads(FakeEventLog())
    assert answered(lambda: reads.list_for("acme", query)).status == 400


def test_since_an_instant_before_1970_or_after_2286_reads_from_the_log_s_ends():
    reads = EventReads(FakeEventLog())
    for since in ("1900-01-01T00:00:00Z", "2999-01-01T00:00:00.5Z"):
        body = reads.list_for("acme", {"since": since})
        assert body["events"] == [] and json.dumps(body)


def test_a_tenant_pause_reason_that_is_not_text_is_a_400_and_none_says_no_reason():
    from chalicelib.control.tenant_api import DigestRuns, TenantApi

    class Actions:
        def pause_tenant(self, user: str, reason: str, by_tenant: bool) -> Any:
            from chalicelib.control.campaign_actions import Done

            self.reason = reason
            return Done(True, "paused")

    actions = Actions()
    digests = DigestRuns(None, lambda *_: None)  # type: ignore[arg-type]
    api = TenantApi(actions, None, None, digests, lambda _user, _campaign: None)  # type: ignore[arg-type]
    for bad in (False, 0, [], {}, 17, "x" * 201):
        assert answered(lambda b=bad: api.pause_tenant("acme", {"reason": b})).status == 400, bad
    for none in (None, ""):
        assert answered(lambda n=none: api.pause_tenant("acme", {"reason": n})).status == 200
        assert actions.reason == "no reason given"


def test_a_campaign_with_nothing_counted_yet_is_sending_for_an_hour_then_done_with_none():
    assert state_of(_counts(created_ms=NOW_MS - 60_000), NOW_MS) == "sending"  # not "done", 0 of 0
    assert state_of(_counts(created_ms=NOW_MS - 2 * 3_600_000), NOW_MS) == "done"  # never sending for ever
