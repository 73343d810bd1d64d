"""The local endpoint lists queues and takes back a deleted queue's name as SQS does (infra/local/sqs_queues.py):
ListQueues without MaxResults answers at most 1,000 URLs and no NextToken, with MaxResults pages of it; a
queue's name is refused for 60 s (the stack's minute) after it was deleted. Each through boto3."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.sqs.models import sqs_backends

ACCOUNT, REGION = "123456789012", "us-east-1"


@pytest.fixture
def sqs(stack: Any) -> Any:
    return stack.client("sqs")


@pytest.fixture
def many(uid: str) -> Iterator[str]:
    """1,001 queues under a prefix of this test's own, made in moto's backend (the listing is what is tested)."""
    prefix = f"many-{uid}-"
    backend = sqs_backends[ACCOUNT][REGION]
    names = [f"{prefix}{i:04d}" for i in range(1_001)]
    for name in names:
        backend.create_queue(name)
    yield prefix
    for name in names:
        backend.queues.pop(name, None)


def test_list_queues_without_max_results_answers_at_most_a_thousand_and_no_next_token(sqs, many):
    answer = sqs.list_queues(QueueNamePrefix=many)
    assert len(answer["QueueUrls"]) == 1_000 and "NextToken" not in answer
    pages = list(sqs.get_paginator("list_queues").paginate(QueueNamePrefix=many))  # no PageSize: no MaxResults
    assert len(pages) == 1 and len(pages[0]["QueueUrls"]) == 1_000


def test_list_queues_with_max_results_pages_through_every_queue_once(sqs, many):
    pages = list(sqs.get_paginator("list_queues").paginate(QueueNamePrefix=many, PaginationConfig={"PageSize": 1000}))
    assert [len(p["QueueUrls"]) for p in pages] == [1_000, 1]
    urls = [u for p in pages for u in p["QueueUrls"]]
    assert len(set(urls)) == 1_001 and urls[-1].endswith(f"/{ACCOUNT}/{many}1000")
    first = sqs.list_queues(QueueNamePrefix=many, MaxResults=400)
    assert len(first["QueueUrls"]) == 400 and first["NextToken"]
    rest = sqs.list_queues(QueueNamePrefix=many, MaxResults=1000, NextToken=first["NextToken"])
    assert len(rest["QueueUrls"]) == 601 and "NextToken" not in rest
    assert not set(first["QueueUrls"]) & set(rest["QueueUrls"])


@pytest.mark.parametrize("value", [0, 1001])
def test_max_results_out_of_its_range_is_refused_as_sqs_refuses_it(sqs, value):
    with pytest.raises(ClientError) as refused:
        sqs.list_queues(MaxResults=value)
    error = refused.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Error"]["Code"] == "InvalidParameterValue"
    assert f"Value {value} for parameter MaxResults is invalid" in error["Error"]["Message"]


def test_a_queue_name_is_refused_for_sqs_wait_after_its_delete_and_taken_after(stack, sqs, uid, monkeypatch):
    reuse = stack.gateway.queue_reuse
    now = [1_000.0]
    monkeypatch.setattr(reuse, "clock", lambda: now[0])
    name = f"reuse-{uid}"
    sqs.delete_queue(QueueUrl=sqs.create_queue(QueueName=name)["QueueUrl"])
    now[0] += reuse.wait_s * 0.99
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(QueueName=name)
    error = refused.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Error"]["Code"] == "AWS.SimpleQueueService.QueueDeletedRecently"
    assert error["Error"]["Message"] == (
        "You must wait 60 seconds after deleting a queue before you can create another with the same name."
    )
    assert f"reuse-{uid}" not in sqs_backends[ACCOUNT][REGION].queues
    sqs.create_queue(QueueName=f"other-{uid}")  # another name is not held up
    now[0] += reuse.wait_s * 0.01
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    reuse.age(name, reuse.wait_s)  # a test can be past the wait without sleeping it
    sqs.delete_queue(QueueUrl=sqs.create_queue(QueueName=name)["QueueUrl"])
    sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=f"other-{uid}")["QueueUrl"])
