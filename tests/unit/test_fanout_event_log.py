"""webhook_events and the event log: a tenant whose events cannot be kept now (its partition of the log
throttled: one partition takes 1,000 writes a second, and a tenant's events all go to its own) has them put on
the delivery queue, to be kept and delivered from there (chalicelib.webhooks.later_events). Its records given
again would hold the stream's shard for every tenant behind them, and once Lambda gave up on them, their events
were lost from both GET /events and the webhooks. The other tenants' events in the batch are kept and
delivered at once."""

from __future__ import annotations

from typing import Any

from chalicelib.core.webhook_contract import RETRY_WAITS_S
from chalicelib.webhooks.client import Answer
from chalicelib.webhooks.fanout import WebhookFanout
from chalicelib.webhooks.later_events import LaterEvents
from chalicelib.webhooks.queue_messages import QueueMessages
from tests.fakes.event_log import FakeEventLog
from tests.unit.test_webhook_delivery import _deliverer, _endpoint, _fanout, _Queue, _sent


def _queue_messages(fanout: WebhookFanout, queue: _Queue) -> QueueMessages:
    d, *_ = _deliverer(_endpoint(), [Answer(200, None, 1)])
    return QueueMessages(d, fanout.later, queue)  # type: ignore[arg-type]


def _queued_record(body: str, attempt: int) -> dict[str, Any]:
    return {
        "messageId": "m",
        "receiptHandle": "r",
        "body": body,
        "attributes": {"ApproximateReceiveCount": str(attempt)},
    }


def test_a_tenant_whose_event_log_cannot_be_written_has_its_events_kept_later_and_holds_no_one():
    # Its records given again would hold the shard for every tenant behind them, and be lost once the
    # mapping gives up: its events go round through the delivery queue instead, the stream goes on.
    queue, log = _Queue(), FakeEventLog(broken_for={"acme"})
    endpoints = [_endpoint(id="ep_a", max_events=1), _endpoint(user_id="globex", id="ep_b", max_events=1)]
    result = _fanout(endpoints, queue, event_log=log).handle([_sent("acme", 1), _sent("globex", 2), _sent("acme", 3)])
    assert result.failed == ()
    assert [d.user_id for d in queue.put_deliveries] == ["globex"]  # acme's are delivered from the later message
    ((user, body),) = queue.put_bodies
    later = LaterEvents.from_message(body)
    assert user == "acme" and later is not None and [e.at_ms for e in later.events] == [1, 3]  # records 1 and 3
    # deliver_webhooks meets it: kept (same ids, same recorded time), then delivered.
    log.broken_for.clear()
    messages = _queue_messages(_fanout(endpoints, queue, event_log=log), queue)
    assert messages.batch([_queued_record(body, 1)]) == {"batchItemFailures": []}
    assert sorted(e.at_ms for (u, _k), e in log.kept.items() if u == "acme") == [1, 3]
    assert [x.user_id for x in queue.put_deliveries] == ["globex", "acme", "acme"]


def test_events_kept_later_come_back_while_the_log_still_fails_and_fail_their_records_if_the_queue_does():
    queue, log = _Queue(), FakeEventLog(broken_for={"acme"})
    endpoint = _endpoint(id="ep_a", max_events=1)
    _fanout([endpoint], queue, event_log=log).handle([_sent("acme", 1)])
    ((_user, body),) = queue.put_bodies
    messages = _queue_messages(_fanout([endpoint], queue, event_log=log), queue)
    failed = {"batchItemFailures": [{"itemIdentifier": "m"}]}
    assert messages.batch([_queued_record(body, 1)]) == failed  # the log still fails: later again
    assert messages.batch([_queued_record(body, 40)]) == failed  # past the schedule: the DLQ takes it at 20
    assert queue.hidden == [("r", RETRY_WAITS_S[0]), ("r", RETRY_WAITS_S[-1])]
    down = _Queue(down=True)
    result = _fanout([endpoint], down, event_log=FakeEventLog(broken=True)).handle([_sent("acme", 1), _sent("acme", 2)])
    assert result.failed == ("1", "2") and down.put_deliveries == []  # neither kept nor queued: given again
