"""The tenant API's reads against what DynamoDB refuses and what the OpenAPI document says.

A cursor the list never gave must be a 400 before any look-up: DynamoDB answers a start key holding an empty
string, or one outside the query's key condition (another `prefix` than the cursor's), with a
ValidationException, which the route would answer 500; moto and the fakes accept both, so only the API's own
check keeps them out. And every query parameter a route reads is in the document, so that clients generated
from it can ask what the code answers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from chalicelib.api.answers import status_of
from chalicelib.control import openapi, params
from chalicelib.control.campaign_reads import CampaignReads
from chalicelib.control.campaign_views import campaign_json, state_of
from chalicelib.control.event_reads import EventReads
from chalicelib.control.suppression_api import SuppressionApi
from chalicelib.core.errors import Refused
from chalicelib.stores.ports.campaigns import CampaignCounts
from chalicelib.stores.ports.suppression import Suppression
from tests.fakes.event_log import FakeEventLog
from tests.fakes.suppressions import FakeSuppressions

NOW_MS = 1_790_000_000_000
# Cursors that decode to the empty string: base64 skips what is not of its alphabet, and `=` is padding.
EMPTY_CURSORS = ("====", "!!!!", ".", "=")


def _answered(read: Callable[[], dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """A read's status and body, as the API answers it (chalicelib.api.answers)."""
    try:
        return 200, read()
    except Refused as refused:
        return status_of(refused), {"error": refused.detail, **refused.members}


class _Campaigns:
    """One campaign, `c`; every look-up recorded."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.campaign = CampaignCounts("acme", "c", {"queued": 1}, created_ms=NOW_MS)

    def newest(self, user_id: str, *, before: tuple[int, str] | None = None, limit: int = 50):
        self.calls.append(("newest", before))
        return [self.campaign], None

    def get(self, user_id: str, campaign_id: str) -> CampaignCounts | None:
        self.calls.append(("get", campaign_id))
        return self.campaign if campaign_id == "c" else None


class _Timeline:
    def __init__(self) -> None:
        self.calls: list[str | None] = []

    def minutes(self, user_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1440):
        self.calls.append(after)
        return [], None


class _Suppressions(FakeSuppressions):
    """The fake, with each page asked for recorded (DynamoDB's key rules are not the fake's)."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: list[dict[str, Any]] = []

    def page(self, user_id: str, **kw: Any) -> tuple[list[Suppression], str | None]:
        self.pages.append(kw)
        return super().page(user_id, **kw)


class _Events(FakeEventLog):
    def __init__(self) -> None:
        super().__init__()
        self.pages: list[dict[str, Any]] = []

    def page(self, user_id: str, **kw: Any) -> Any:
        self.pages.append(kw)
        return super().page(user_id, **kw)


# --- cursors DynamoDB would refuse --------------------------------------------------------------------------------


@pytest.mark.parametrize("given", EMPTY_CURSORS)
def test_a_cursor_of_nothing_is_a_400_on_every_list_before_any_look_up(given: str) -> None:
    campaigns, timeline = _Campaigns(), _Timeline()
    reads = CampaignReads(campaigns, timeline, clock=lambda: NOW_MS / 1000)
    suppressions, events = _Suppressions(), _Events()
    answers = {
        "campaigns": _answered(lambda: reads.list_for("acme", {"after": given})),
        "timeline": _answered(lambda: reads.show_for("acme", "c", {"timelineAfter": given})),
        "suppressions": _answered(lambda: SuppressionApi(suppressions).list_for("acme", {"after": given})),
        "events": _answered(lambda: EventReads(events).list_for("acme", {"after": given})),
    }
    assert {name: a[0] for name, a in answers.items()} == dict.fromkeys(answers, 400)
    assert (campaigns.calls, timeline.calls, suppressions.pages, events.pages) == ([], [], [], [])


def test_a_suppression_cursor_outside_the_prefix_asked_for_is_a_400_not_a_query_dynamodb_refuses() -> None:
    """A page of `prefix=m` ends at `m4@...`; the same cursor with `prefix=z` names a start key outside the
    key condition `begins_with(rcpt, "z")`, which DynamoDB answers with a ValidationException."""
    store = _Suppressions()
    store.add_many("acme", [f"m{i}@example.org" for i in range(6)] + ["zed@example.org"], "by phone")
    api = SuppressionApi(store)
    first = api.list_for("acme", {"prefix": "m", "limit": "2"})
    assert first["next"]
    for prefix in ("z", "a", "m5"):
        status, _ = _answered(lambda p=prefix: api.list_for("acme", {"prefix": p, "after": first["next"]}))
        assert status == 400, prefix
    assert len(store.pages) == 1
    # The cursor with its own prefix (in any case), or with none, goes on.
    assert api.list_for("acme", {"prefix": "M", "after": first["next"]})["suppressions"]
    assert api.list_for("acme", {"after": first["next"]})["suppressions"]


@pytest.mark.parametrize("given", ["\u00b2", "\u00b9\u2070", "\u0661\u0662"])  # ², ¹⁰, Arabic-Indic 12
def test_a_limit_of_digits_that_are_not_ascii_is_a_400_on_every_list(given: str) -> None:
    """str.isdigit takes superscripts, which int() refuses (Arabic-Indic digits it reads): a 400, never a
    ValueError, which no route catches (a 500)."""
    reads = CampaignReads(_Campaigns(), _Timeline(), clock=lambda: NOW_MS / 1000)
    answers = {
        "campaigns": _answered(lambda: reads.list_for("acme", {"limit": given})),
        "suppressions": _answered(lambda: SuppressionApi(_Suppressions()).list_for("acme", {"limit": given})),
        "events": _answered(lambda: EventReads(_Events()).list_for("acme", {"limit": given})),
    }
    assert {name: (a[0], a[1]["error"].split(":")[0]) for name, a in answers.items()} == dict.fromkeys(
        answers, (400, "limit")
    )


# --- the document and the code -------------------------------------------------------------------------------------


class _Asked(Mapping[str, str]):
    """A query string with nothing in it that records every parameter the code asks it for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.asked.add(name)
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        self.asked.add(name)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:  # the readers' `params or {}` must not swap it for an empty dict
        return True


def _documented_query(path: str) -> set[str]:
    document = json.loads(openapi.document())
    out = set()
    for given in document["paths"][path]["get"].get("parameters", []):
        if "$ref" in given:
            given = document["components"]["parameters"][given["$ref"].rsplit("/", 1)[1]]
        if given["in"] == "query":
            out.add(given["name"])
    return out


def _readers() -> dict[str, Callable[[Mapping[str, str]], Any]]:
    reads = CampaignReads(_Campaigns(), _Timeline(), clock=lambda: NOW_MS / 1000)
    return {
        "/campaigns": lambda q: reads.list_for("acme", q),
        "/campaigns/{campaign_id}": lambda q: reads.show_for("acme", "c", q),
        "/suppressions": lambda q: SuppressionApi(FakeSuppressions()).list_for("acme", q),
        "/events": lambda q: EventReads(FakeEventLog()).list_for("acme", q),
    }


@pytest.mark.parametrize("path", sorted(_readers()))
def test_every_query_parameter_a_list_reads_is_in_the_openapi_document(path: str) -> None:
    asked = _Asked()
    assert isinstance(_readers()[path](asked), dict)  # answered, not refused
    assert asked.asked == _documented_query(path)


# --- a campaign's state -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "counts",
    [{"rejected": 3}, {"suppressed": 2, "rejected": 1}],
    ids=["all-rejected", "all-suppressed-or-rejected"],
)
def test_a_campaign_scheduled_later_whose_every_recipient_was_refused_is_done_not_scheduled(counts) -> None:
    """Its time is noted with its counts, but nothing waits for it: `scheduled` at 100% would contradict itself."""
    c = CampaignCounts("acme", "c", counts, created_ms=NOW_MS, scheduled_at_ms=NOW_MS + 86_400_000)
    shown = campaign_json(c, NOW_MS)
    assert (shown["state"], shown["progress"]["fraction"]) == ("done", 1.0)


def test_a_campaign_with_recipients_sent_now_and_others_scheduled_later_is_not_done() -> None:
    c = CampaignCounts(
        "acme",
        "c",
        {"queued": 10, "sent": 10, "scheduled": 10},
        created_ms=NOW_MS,
        scheduled_at_ms=NOW_MS + 86_400_000,
        counts_releases=True,
    )
    assert state_of(c, NOW_MS) == "sending"
    assert campaign_json(c, NOW_MS)["progress"] == {
        "final": 10,
        "accepted": 20,
        "fraction": 0.5,
        "acceptedMayGrow": True,
    }


def test_once_its_scheduled_recipients_are_released_and_sent_the_campaign_is_done() -> None:
    counts = {"queued": 20, "released": 10, "sent": 20, "scheduled": 10}
    c = CampaignCounts("acme", "c", counts, created_ms=NOW_MS, counts_releases=True)
    assert state_of(c, NOW_MS) == "done" and campaign_json(c, NOW_MS)["progress"]["accepted"] == 20


def test_a_campaign_begun_before_releases_were_counted_keeps_the_old_guess_until_it_is_counted() -> None:
    # Its `released` holds only the releases since the upgrade: taken as it stands it would count every
    # earlier release twice and show the campaign sending for good. `moonsend count-released` counts it.
    counts = {"queued": 20, "released": 4, "sent": 20, "scheduled": 10}
    c = CampaignCounts("acme", "c", counts, created_ms=NOW_MS)
    assert campaign_json(c, NOW_MS)["progress"]["accepted"] == 20 and state_of(c, NOW_MS) == "done"


def test_cursor_of_a_page_decodes_to_what_it_encoded() -> None:
    assert params.decode_cursor({"after": params.encode_cursor("m4@example.org")}) == "m4@example.org"
