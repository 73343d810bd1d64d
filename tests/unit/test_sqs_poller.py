"""Lambda's SQS poller as the local stack stands in for it: the records it gives, what it deletes.

The records are read back through Powertools' SQS event class (its model of what Lambda sends, written by
AWS, not by us), and the answers follow Lambda's documented rules for partial batch responses.
"""

import hashlib
from types import SimpleNamespace

import pytest
from aws_lambda_powertools.utilities.data_classes import SQSEvent

from infra.local.cloudformation import EventSource, StackFunction, TemplateError
from infra.local.sqs_poller import check_mapping, failed_ids, sqs_record

SOURCE = EventSource("arn:aws:sqs:us-east-1:123456789012:moonsend-local-ses-events", "fn", 10, 5, True, True)


def _message(mid="m-1", body='{"eventType": "Send"}'):
    return SimpleNamespace(
        id=mid,
        receipt_handle=f"rh-{mid}",
        body=body,
        approximate_receive_count=2,
        sent_timestamp=1_700_000_000_123,
        sender_id="AIDAEXAMPLE",
        approximate_first_receive_timestamp=1_700_000_000_456,
    )


def test_a_record_reads_as_lambdas_sqs_record_through_powertools():
    event = SQSEvent({"Records": [sqs_record(_message(), SOURCE, "us-east-1")]})
    (record,) = list(event.records)
    assert (record.message_id, record.receipt_handle, record.body) == ("m-1", "rh-m-1", '{"eventType": "Send"}')
    assert record.attributes.approximate_receive_count == "2"
    assert record.attributes.sent_timestamp == "1700000000123"
    assert record.event_source == "aws:sqs" and record.event_source_arn == SOURCE.queue_arn
    assert record.aws_region == "us-east-1"
    assert record.md5_of_body == hashlib.md5(record.body.encode()).hexdigest()  # SQS's MD5OfBody


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        ({"batchItemFailures": []}, []),
        ({"batchItemFailures": [{"itemIdentifier": "b"}]}, ["b"]),
        (None, []),  # no answer: all succeeded
        ({}, []),
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, ["a", "b", "c"]),  # malformed: the whole batch
        ({"batchItemFailures": [{"itemIdentifier": "zzz"}]}, ["a", "b", "c"]),  # not in the batch
        ({"batchItemFailures": [{"id": "b"}]}, ["a", "b", "c"]),
        ({"batchItemFailures": "b"}, ["a", "b", "c"]),
    ],
)
def test_what_stays_on_the_queue_follows_lambdas_rules_for_partial_batch_responses(answer, kept):
    assert failed_ids(answer, ["a", "b", "c"], reports_failures=True) == kept


def test_without_report_batch_item_failures_an_answer_is_success_for_every_record():
    assert failed_ids({"batchItemFailures": [{"itemIdentifier": "b"}]}, ["a", "b"], reports_failures=False) == []


def _function(policies, timeout=30.0):
    return StackFunction("SesEvents", "fn", "app.ses_events", timeout, 256, {}, "arn:role", policies, None, 2)


def test_a_mapping_lambda_would_refuse_is_refused_with_lambdas_reason():
    allow = '{"Statement": [{"Effect": "Allow", "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"], "Resource": "arn:aws:sqs:*:*:moonsend-local-ses-events"}]}'  # noqa: E501
    check_mapping(SOURCE, _function((allow,)), 180)
    with pytest.raises(TemplateError, match="permissions to call DeleteMessage"):
        check_mapping(SOURCE, _function((allow.replace('"sqs:DeleteMessage", ', ""),)), 180)
    with pytest.raises(TemplateError, match="visibility timeout: 20 seconds is less than function timeout: 30"):
        check_mapping(SOURCE, _function((allow,)), 20)


class _Queue:
    """Enough of moto's SQS backend for the poller: a deque of messages, received ten at a time."""

    def __init__(self, n: int) -> None:
        import collections
        import threading

        self._lock = threading.Lock()
        self.left = collections.deque(_message(f"m-{i}") for i in range(n))

    def get_queue(self, name):
        return SimpleNamespace(visibility_timeout=60)

    def receive_message(self, queue, n, wait_s, visibility):
        import time

        with self._lock:
            got = [self.left.popleft() for _ in range(min(n, len(self.left)))]
        if not got:
            time.sleep(0.01)  # a short long poll
        return got

    def delete_message(self, queue, receipt_handle):
        pass


class _Runner:
    """Invokes a batch in 20 ms and keeps the most invocations that ran at once."""

    hurrying = False

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self.running = self.most = 0

    def invoke(self, fn, event):
        import time

        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        with self._lock:
            self.running -= 1
        return None


def _until(condition, timeout_s=10.0):
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize(("cap", "most"), [(None, 20), (7, 7)])
def test_a_backlog_adds_pollers_up_to_the_mappings_maximum_concurrency_and_they_retire_when_it_is_gone(
    monkeypatch, cap, most
):
    """Lambda starts five batches at once, adds more while messages are still available (to 1,000 or the
    mapping's MaximumConcurrency; here at most LOCAL_MAX_POLLERS), and scales back when traffic is low."""
    from dataclasses import replace

    from infra.local import sqs_poller

    monkeypatch.setattr(sqs_poller, "SCALE_UP_EVERY_S", 0.0)
    queue, runner = _Queue(3000), _Runner()
    fn = SimpleNamespace(handler_name="ses_events", function_name="moonsend-local-ses_events")
    poller = sqs_poller.SqsPoller(runner, fn, replace(SOURCE, window_s=0, max_concurrency=cap), lambda: queue, "r")
    poller.start()
    try:
        assert _until(lambda: not queue.left), "the backlog was handled"
        assert poller.most_pollers == most and runner.most <= most
        assert _until(lambda: poller.pollers == sqs_poller.POLLERS), "the extra pollers retired"
        assert poller.records == 3000 and poller.batches == 300
    finally:
        poller.stop()


def test_the_maximum_concurrency_is_lambdas_range():
    from infra.local.cloudformation import _max_concurrency

    assert _max_concurrency({}) is None and _max_concurrency({"ScalingConfig": {"MaximumConcurrency": 2}}) == 2
    for bad in (1, 1001):
        with pytest.raises(TemplateError):
            _max_concurrency({"ScalingConfig": {"MaximumConcurrency": bad}})
