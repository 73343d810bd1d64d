"""The writer of a queue starts its drain when no drainer holds it (issue 22: the first email in seconds)."""

from chalicelib.queueing.drain_starter import RECENTLY_S, DrainStarter
from tests.fakes.leases import FakeLeases
from tests.fakes.parts import Starts


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_queue_with_no_drainer_gets_one_started_at_once_or_at_the_emails_time():
    starts, leases = Starts(), FakeLeases()
    starter = DrainStarter(leases, starts, Clock())
    assert starter.ensure("q1") and starter.ensure("q2", start_at_ms=1_800_000_000_000)
    assert starts == [("q1", None), ("q2", 1_800_000_000_000)]


def test_a_queue_a_drainer_holds_gets_no_second_drain():
    starts = Starts()
    assert not DrainStarter(FakeLeases(held={"q1"}), starts, Clock()).ensure("q1")
    assert starts == []


def test_a_burst_of_messages_to_one_queue_costs_one_lease_read_until_the_memory_fades():
    starts, leases, clock = Starts(), FakeLeases(), Clock()
    starter = DrainStarter(leases, starts, clock)
    for _ in range(50):
        starter.ensure("q1")
    assert (len(starts), leases.reads) == (1, 1)
    clock.now += RECENTLY_S + 0.1  # its drain may have ended since: asked again
    leases.held.add("q1")
    assert not starter.ensure("q1") and leases.reads == 2 and len(starts) == 1


def test_a_start_that_fails_is_left_to_the_alarm_and_asked_again_by_the_next_writer():
    calls = []

    def refuses(queue, at, slot=0):
        calls.append(queue)
        raise ConnectionError("Lambda unreachable")

    starter = DrainStarter(FakeLeases(), refuses, Clock())
    assert not starter.ensure("q1")  # no exception: the email is on its queue, the backstops start it
    assert not starter.ensure("q1") and calls == ["q1", "q1"]  # not remembered as started


def test_a_drain_asked_for_is_trusted_no_longer_than_its_last_empty_polls():
    """A drain ends after two empty long polls: with 1 s polls (the local stage) a writer that trusted its
    start for 5 s left a campaign sent 3 s after the last one's drain ended to the sweeper's minute."""
    from chalicelib.queueing.drain_starter import trusted_for_s

    assert trusted_for_s(1) == 2 and trusted_for_s(5) == RECENTLY_S and trusted_for_s(0) == 0
    starts: list[str] = []
    clock = Clock()
    starter = DrainStarter(FakeLeases(), lambda q, at=None, slot=0: starts.append(q), clock, trusted_s=2)
    assert starter.ensure("q1")
    clock.now += 3  # that drain has ended (two empty 1 s polls): the next email asks again
    assert starter.ensure("q1") and starts == ["q1", "q1"]
