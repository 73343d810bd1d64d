"""Digest events on the PrecompileEmail topic: the issue's contract, parsed, with every error named."""

import re

import pytest

from chalicelib.core.digest_contract import parse_digest_message, parse_window
from chalicelib.core.errors import MessageInvalid
from tests.conftest import canonical


def _event(**overrides):
    msg = canonical()
    del msg["campaign"]
    msg["digest"] = {
        "id": "weekly-news",
        "subject": "Your week",
        "body": "{% for item in items %}{{ item.data.title }}{% endfor %}",
        "schedule": "cron(0 13 ? * WED *)",
        "window": "P7D",
        "maxItems": 50,
    }
    msg["item"] = {"id": "show-533998b1", "type": "NearbyShow", "at": "2026-11-20T10:00:00Z", "data": {"title": "A"}}
    msg.update(overrides)
    return msg


def test_the_issues_item_event_is_accepted_as_written():
    req = parse_digest_message(_event())
    assert req.user_id == "user-1" and req.sender is not None and req.sender.api_key == "AKIAEXAMPLE"
    assert req.digest.complete and req.digest.window_s == 7 * 86400 and req.digest.max_items == 50
    (only,) = req.recipients
    assert only.recipient.email == "ann@example.org" and only.recipient.metadata["name"] == "Ann"
    assert [(i.id, i.type, i.data) for i in only.items] == [("show-533998b1", "NearbyShow", {"title": "A"})]


def test_batched_recipients_carry_one_item_or_several_and_a_bad_one_is_rejected_alone():
    msg = _event()
    del msg["recipient"], msg["item"]
    at = "2026-11-20T10:00:00+01:00"
    msg["recipients"] = [
        {"email": "a@example.org", "item": {"id": "x1", "type": "T", "at": at}},
        {"email": "b@example.org", "items": [{"id": "x1", "type": "T", "at": at}, {"id": "x2", "type": "T", "at": at}]},
        {"email": "c@example.org", "items": [{"id": "x3", "type": "T", "at": "yesterday"}]},
        {"email": "d@example.org"},
    ]
    req = parse_digest_message(msg)
    assert [(r.recipient.email, len(r.items)) for r in req.recipients] == [("a@example.org", 1), ("b@example.org", 2)]
    assert [(r.email, r.reason) for r in req.rejected] == [
        ("c@example.org", "recipients[2].items[0].at: not an ISO 8601 date-time (e.g. 2026-12-01T09:00:00+01:00)"),
        ("d@example.org", "recipients[3]: give one of item or items"),
    ]


def test_a_definition_alone_and_an_item_without_one_are_both_events():
    definition = _event()
    del definition["recipient"], definition["item"]
    assert parse_digest_message(definition).recipients == []
    bare = _event(digest={"id": "weekly-news"})
    req = parse_digest_message(bare)
    assert not req.digest.complete and len(req.recipients) == 1  # the stored definition fills it in


def test_retract_takes_one_id_or_a_list():
    msg = {"userId": "user-1", "digest": {"id": "weekly-news"}, "retract": "show-533998b1"}
    assert parse_digest_message(msg).retract == ["show-533998b1"]
    msg["retract"] = ["a", "b"]
    assert parse_digest_message(msg).retract == ["a", "b"]


def test_a_retraction_that_names_its_recipient_is_taken_for_every_recipient():
    # An item is one event (a show), in every digest it is in: the recipient is redundant, not an error.
    msg = {
        "userId": "user-1",
        "digest": {"id": "weekly-news"},
        "retract": "show-533998b1",
        "recipient": {"email": "ann@example.org"},
    }
    req = parse_digest_message(msg)
    assert req.retract == ["show-533998b1"] and req.recipients == [] and req.rejected == []
    del msg["recipient"]
    msg["recipients"] = [{"email": "ann@example.org"}, {"email": "bob@example.org", "item": _event()["item"]}]
    req = parse_digest_message(msg)
    assert req.retract == ["show-533998b1"] and req.rejected == []
    assert [r.recipient.email for r in req.recipients] == ["bob@example.org"]  # a recipient with items still gets them


def test_a_retraction_says_which_recipients_it_named_that_do_not_narrow_it():
    msg = {
        "userId": "user-1",
        "digest": {"id": "weekly-news"},
        "retract": "show-533998b1",
        "recipients": [{"email": "Ann@example.org"}, {"email": "bob@example.org", "item": _event()["item"]}],
    }
    req = parse_digest_message(msg)
    assert req.retract_named == ["Ann@example.org"]  # named, and widened: the answer says so
    msg.pop("recipients")
    assert parse_digest_message(msg).retract_named == []


def test_a_recipient_without_an_item_and_no_retraction_is_still_refused():
    msg = {"userId": "user-1", "digest": {"id": "weekly-news"}, "recipient": {"email": "ann@example.org"}}
    with pytest.raises(MessageInvalid, match="item: is required with a recipient"):
        parse_digest_message(msg)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"digest": {"id": "w", "schedule": "every wednesday"}},
            "digest.schedule: must be an EventBridge cron expression",
        ),
        ({"digest": {"id": "w", "window": "P1M"}}, "digest.window: must be an ISO 8601 duration"),
        ({"digest": {"id": "w", "window": "PT10M"}}, "digest.window: must be between 1 hour and 35 days"),
        ({"digest": {"id": "w", "maxItems": 0}}, "digest.maxItems: must be a whole number from 1 to 500"),
        ({"digest": {"id": "w", "maxItems": True}}, "digest.maxItems: must be a whole number"),
        ({"digest": {"id": "../w"}}, "digest.id"),
        ({"digest": {"id": "w" * 114}}, "digest.id: longer than 113 characters"),  # its campaigns must be ids
        ({"digest": {"id": "w", "schedule": "cron(0 13 ? * 9 *)"}}, "digest.schedule: day-of-week: 9"),
        ({"digest": {"id": "w", "schedule": "cron(0/0 * * * ? *)"}}, "digest.schedule: minutes: the step"),
        ({"digest": {"id": "w", "schedule": "cron(0/30 * * * ? *)"}}, "digest.schedule: fires more often than once"),
        ({"digest": {"id": "w", "schedule": "cron(0,59 9 * * ? *)"}}, "digest.schedule: fires more often than once"),
        ({"retract": []}, "retract: must be an item id or a list"),
        ({"retract": ["ok", 5]}, "retract[1]"),
    ],
)
def test_a_bad_envelope_is_refused_with_the_field_and_why(change, expected):
    with pytest.raises(MessageInvalid, match=re.escape(expected)):
        parse_digest_message(_event(**change))


def test_an_event_that_says_nothing_is_refused():
    with pytest.raises(MessageInvalid, match="an event needs items, retract, or the digest's definition"):
        parse_digest_message({"userId": "u", "digest": {"id": "w"}})


@pytest.mark.parametrize(("text", "seconds"), [("P7D", 604800), ("P1W", 604800), ("PT12H", 43200), ("P1DT6H", 108000)])
def test_windows_are_iso_8601_durations(text, seconds):
    assert parse_window(text) == seconds


def test_item_data_past_its_limit_rejects_the_recipient_not_the_message():
    msg = _event()
    msg["item"]["data"] = {"blob": "x" * 9000}
    req = parse_digest_message(msg)
    assert req.recipients == [] and "recipient.item.data: larger than 8192 bytes" in req.rejected[0].reason


def test_an_item_dated_more_than_a_day_ahead_rejects_its_recipient():
    import time

    ahead = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2 * 86400))
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    msg = _event()
    del msg["recipient"], msg["item"]
    msg["recipients"] = [
        {"email": "ann@example.org", "item": {"id": "a", "at": ahead}},
        {"email": "bob@example.org", "item": {"id": "b", "at": soon}},  # clocks differ: an hour ahead is taken
    ]
    req = parse_digest_message(msg)
    assert [r.recipient.email for r in req.recipients] == ["bob@example.org"]
    (rejected,) = req.rejected
    assert rejected.email == "ann@example.org" and "more than a day in the future" in rejected.reason


def test_the_largest_digest_id_still_makes_campaign_ids_that_are_ids():
    from chalicelib.core.contract import MAX_ID_LENGTH
    from chalicelib.digest.assembly import campaign_id, period_of

    did = "w" * 113
    assert parse_digest_message(_event(digest={"id": did})).digest.id == did
    assert len(campaign_id(did, period_of(0))) == MAX_ID_LENGTH


def test_item_data_nested_a_thousand_levels_rejects_its_recipient_with_why_and_crashes_nothing():
    # The topic's JSON parse takes it (under Python's recursion limit); measuring its size would not.
    deep: dict = {}
    inner = deep
    for _ in range(990):
        inner["x"] = {}
        inner = inner["x"]
    msg = _event(item={"id": "show-1", "type": "T", "at": "2026-11-20T10:00:00Z", "data": deep})
    req = parse_digest_message(msg)
    assert req.recipients == [] and req.rejected[0].reason == "recipient.item.data: nested more than 32 levels"
    shallow = _event(item={"id": "show-1", "type": "T", "at": "2026-11-20T10:00:00Z", "data": {"a": {"b": [1]}}})
    assert parse_digest_message(shallow).rejected == []
