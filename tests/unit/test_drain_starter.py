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
