"""webhook_events and the event log: a tenant whose events cannot be kept now (its partition of the log
throttled: one partition takes 1,000 writes a second, and a tenant's events all go to its own) has its own
records given again; the other tenants' events in the batch are kept and delivered at once, rather than
every record of the batch failing with it, and lost with it if Lambda gives up on them."""

from __future__ import annotations

from collections.abc import Iterable

from chalicelib.webhooks.events import WebhookEvent
from tests.fakes.event_log import FakeEventLog
from tests.unit.test_webhook_delivery import _endpoint, _fanout, _Queue, _sent


class _ThrottledFor(FakeEventLog):
    """The log, refusing any write that holds an event of one tenant (as a BatchWriteItem fails whole)."""

    def __init__(self, user_id: str) -> None:
        super().__init__()
        self.user_id = user_id

    def keep(self, events: Iterable[tuple[WebhookEvent, int]]) -> int:
        given = list(events)
        if any(e.user_id == self.user_id for e, _at in given):
            raise ConnectionError("ProvisionedThroughputExceededException")
        return super().keep(given)


def test_a_tenant_whose_events_cannot_be_kept_fails_its_own_records_and_the_others_go_on():
    log, queue = _ThrottledFor("acme"), _Queue()
    endpoints = [_endpoint(id="ep_a", max_events=1), _endpoint(user_id="globex", id="ep_g", max_events=1)]
    result = _fanout(endpoints, queue, event_log=log).handle([_sent("acme", 1), _sent("globex", 2), _sent("acme", 3)])
    assert result.failed == ("1", "3")
    assert [d.endpoint_id for d in queue.put_deliveries] == ["ep_g"]  # nothing of acme's before its log has it
    assert sorted(user for user, _k in log.kept) == ["globex"]
