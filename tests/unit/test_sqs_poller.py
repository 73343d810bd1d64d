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


def test_a_mapping_whose_maximum_concurrency_is_below_five_starts_that_many_pollers():
    from dataclasses import replace

    from infra.local.sqs_poller import POLLERS, SqsPoller

    fn = SimpleNamespace(handler_name="deliver_webhooks", function_name="moonsend-local-deliver_webhooks")
    for cap, pollers in ((2, 2), (None, POLLERS), (20, POLLERS)):
        poller = SqsPoller(SimpleNamespace(), fn, replace(SOURCE, max_concurrency=cap), lambda: None, "us-east-1")
        assert poller._pollers == pollers


def test_the_maximum_concurrency_is_lambdas_range():
    from infra.local.cloudformation import _max_concurrency

    assert _max_concurrency({}) is None and _max_concurrency({"ScalingConfig": {"MaximumConcurrency": 2}}) == 2
    for bad in (1, 1001):
        with pytest.raises(TemplateError):
            _max_concurrency({"ScalingConfig": {"MaximumConcurrency": bad}})
