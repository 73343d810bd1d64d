"""What one recipient's digest carries: the planner's rules, on rows as the store gives them."""

from chalicelib.core.contract import parse_instant
from chalicelib.core.digest_contract import Item
from chalicelib.digest.plan import plan_recipient
from chalicelib.stores.digests import RecipientDigest, StoredItem

DAY = 86400.0
NOW = parse_instant("2026-11-25T13:00:00Z")
WEEK = 7 * DAY


def _rows(*items, mailed=(), last_period=None, open_period=None, open_ids=()):
    stored = [StoredItem(i, "Ann@example.org", {"name": "Ann"}) for i in items]
    return RecipientDigest("ann@example.org", stored, frozenset(mailed), last_period, open_period, frozenset(open_ids))


def _item(item_id, days_ago):
    return Item(item_id, "NearbyShow", NOW - days_ago * DAY, {"title": item_id})


def _plan(rows, retracted=frozenset(), max_items=50, period="20261125T1300Z"):
    return plan_recipient(rows, period, NOW, WEEK, max_items, frozenset(retracted))


def test_unmailed_items_in_the_window_go_newest_first():
    plan, skipped = _plan(_rows(_item("a", 3), _item("b", 1), _item("c", 2)))
    assert [i.id for i in plan.items] == ["b", "c", "a"] and plan.items_total == 3
    assert not skipped.expired and skipped.retracted == 0


def test_items_already_mailed_never_go_again_and_nothing_new_means_no_email():
    plan, _ = _plan(_rows(_item("a", 3), _item("b", 1), mailed={"a"}))
    assert [i.id for i in plan.items] == ["b"]
    nothing, _ = _plan(_rows(_item("a", 3), mailed={"a"}))
    assert nothing is None


def test_a_retracted_item_not_yet_mailed_is_left_out_and_counted():
    plan, skipped = _plan(_rows(_item("a", 3), _item("b", 1)), retracted={"a"})
    assert [i.id for i in plan.items] == ["b"] and skipped.retracted == 1
    nothing, _ = _plan(_rows(_item("a", 3)), retracted={"a"})
    assert nothing is None


def test_an_item_older_than_the_window_is_dropped_never_mailed_late():
    plan, skipped = _plan(_rows(_item("old", 7.001), _item("new", 1)))
    assert [i.id for i in plan.items] == ["new"] and skipped.expired == {"old"}
    nothing, skipped = _plan(_rows(_item("old", 8)))
    assert nothing is None and skipped.expired == {"old"}


def test_max_items_go_and_the_rest_wait_with_items_total_saying_how_many_there_were():
    rows = _rows(*(_item(f"i{n}", n / 10) for n in range(8)))
    plan, _ = _plan(rows, max_items=3)
    assert [i.id for i in plan.items] == ["i0", "i1", "i2"] and plan.items_total == 8


def test_a_period_already_mailed_sends_nothing_again_even_with_new_items():
    nothing, _ = _plan(_rows(_item("late", 0.001), last_period="20261125T1300Z"))
    assert nothing is None  # the item goes into the next period's email
    plan, _ = _plan(_rows(_item("late", 0.001), last_period="20261125T1300Z"), period="20261202T1300Z")
    assert [i.id for i in plan.items] == ["late"]


def test_an_assembly_a_crash_left_open_is_finished_as_it_was_under_its_own_period():
    rows = _rows(
        _item("a", 3), _item("b", 2), _item("arrived-since", 0.01), open_period="20261118T1300Z", open_ids={"a", "b"}
    )
    plan, _ = _plan(rows)
    assert plan.resumed and plan.period == "20261118T1300Z"
    assert [i.id for i in plan.items] == ["b", "a"]  # not the item stored after it was opened


def test_the_state_and_an_emails_markers_are_kept_until_their_items_leave_this_digests_window():
    plan, _ = _plan(_rows(_item("a", 3), _item("b", 1), mailed={"a"}))
    assert plan.keep_until == NOW - 1 * DAY + WEEK  # the newest item's end in this digest's window
    assert plan.markers_until == NOW - 1 * DAY + WEEK  # the marker names only "b"
    hourly, _ = plan_recipient(_rows(_item("c", 0.5 / 24)), "20261125T1300Z", NOW, 3600.0, 50, frozenset())
    assert hourly.markers_until == NOW - 1800 + 3600  # an hour's window: its marker, an hour (not 35 days)
    resumed = _rows(_item("d", 2), _item("e", 1), open_period="20261118T1300Z", open_ids={"d"})
    plan, _ = _plan(resumed)
    assert plan.markers_until == NOW - 2 * DAY + WEEK  # what the open assembly marks: "d"


def test_an_item_past_its_rows_expiry_is_never_mailed_even_in_a_window_lengthened_since():
    # Stored under a one-day window (its row expires then), the digest's window lengthened to a week since:
    # its marker went with the row's expiry, so it must not come back.
    mailed_long_ago = StoredItem(_item("old", 2), "ann@example.org", {}, expires_at=NOW - 1 * DAY)
    fresh = StoredItem(_item("new", 0.5), "ann@example.org", {}, expires_at=NOW + 6 * DAY)
    plan, skipped = _plan(RecipientDigest("ann@example.org", [mailed_long_ago, fresh]))
    assert [i.id for i in plan.items] == ["new"] and skipped.expired == {"old"}
