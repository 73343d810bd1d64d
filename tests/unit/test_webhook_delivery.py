"""Webhook delivery without the stack: the ledger's stream records made into events, events into signed
requests of the endpoint's size, and what each receiver's answer does to a delivery and its endpoint.

Stream records are checked in the shape AWS documents for a Lambda's DynamoDB stream event, read by
Powertools' own data class (not by our code)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from boto3.dynamodb.types import TypeSerializer
from standardwebhooks.webhooks import Webhook

from chalicelib.core.config import Settings
from chalicelib.core.webhook_contract import EVENT_TYPES, RETRY_WAITS_S
from chalicelib.stores.webhooks import Endpoint
from chalicelib.webhooks.client import Answer
from chalicelib.webhooks.deliverer import (
    DELIVERED,
    DISABLED,
    DROPPED,
    HELD,
    QUIET_S,
    RETRY,
    RequestOutcome,
    WebhookDeliverer,
)
from chalicelib.webhooks.deliveries import MAX_PAYLOAD_BYTES, WebhookRequest, deliveries, sqs_safe
from chalicelib.webhooks.delivery_queue import Unqueued
from chalicelib.webhooks.events import WebhookEvent, ledger_events
from chalicelib.webhooks.fanout import WebhookFanout
from chalicelib.webhooks.signing import new_secret
from chalicelib.webhooks.url_policy import AddressPolicy, Target
from tests.fakes.event_log import FakeEventLog

_ser = TypeSerializer().serialize
STREAM = "arn:aws:dynamodb:us-east-1:123456789012:table/moonsend-local-ledger/stream/2026-11-24T00:00:00.000"


def _record(old: dict[str, Any] | None, new: dict[str, Any] | None, name: str | None = None, seq: int = 1) -> dict:
    """A record as Lambda gives it for a stream of NEW_AND_OLD_IMAGES (AWS's documented fields)."""
    item = new or old or {}
    change: dict[str, Any] = {
        "ApproximateCreationDateTime": 1793000000,
        "Keys": {"pk": _ser(item["pk"]), "rcpt": _ser(item["rcpt"])},
        "SequenceNumber": str(seq),
        "SizeBytes": 100,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if new is not None:
        change["NewImage"] = {k: _ser(v) for k, v in new.items()}
    if old is not None:
        change["OldImage"] = {k: _ser(v) for k, v in old.items()}
    return {
        "eventID": f"e{seq}",
        "eventName": name or ("INSERT" if old is None else "REMOVE" if new is None else "MODIFY"),
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": change,
        "eventSourceARN": STREAM,
    }


def _row(**fields: Any) -> dict[str, Any]:
    return {"pk": "acme#spring", "rcpt": "ann@example.org", "email": "Ann@example.org", **fields}


def test_records_in_awss_documented_shape_are_read_alike_by_powertools_and_by_us():
    queued = _row(state="queued", updated_at=1793000000000)
    sent = {**queued, "state": "sent", "message_id": "0100-abc", "updated_at": 1793000001000}
    event = DynamoDBStreamEvent({"Records": [_record(queued, sent)]})
    (record,) = event.records
    assert record.dynamodb is not None and record.dynamodb.new_image["state"] == "sent"  # Powertools' reading
    (ours,) = ledger_events(event.raw_event["Records"][0])
    assert ours.user_id == "acme" and ours.type == "sent"
    assert ours.data == {
        "id": ours.id,
        "type": "sent",
        "timestamp": "2026-10-26T07:33:21.000Z",
        "campaignId": "spring",
        "recipient": "Ann@example.org",
        "messageId": "0100-abc",
    }


def test_an_event_is_a_new_outcome_or_first_feedback_and_nothing_else():
    queued = _row(state="queued", updated_at=1)
    claimed = {**queued, "claim_token": "t", "claimed_until": 5}
    sent = {**claimed, "state": "sent", "message_id": "m", "updated_at": 2}
    bounced = {**sent, "bounced_at": 3, "feedback": "bounced: Permanent (General): 550 user unknown"}
    again = {**bounced, "feedback": "bounced: Permanent again", "updated_at": 4}
    assert ledger_events(_record(None, queued)) == []  # queued is not a tenant's event
    assert ledger_events(_record(queued, claimed)) == []  # a claim is not an outcome
    assert [e.type for e in ledger_events(_record(claimed, sent))] == ["sent"]
    (b,) = ledger_events(_record(sent, bounced))
    assert (b.type, b.data["detail"]) == ("bounced", "Permanent (General): 550 user unknown")
    assert ledger_events(_record(bounced, again)) == []  # feedback of a kind is told once
    assert ledger_events(_record(bounced, None)) == []  # DynamoDB's TTL deleting it
    rejected = _row(state="rejected", reason="recipient.email: not an address", updated_at=9)
    assert ledger_events(_record(None, rejected))[0].data["reason"] == "recipient.email: not an address"
    unattributed = {**rejected, "pk": "_unattributed#2026-11-24"}
    assert ledger_events(_record(None, unattributed)) == []  # no tenant to tell


def test_the_same_change_makes_the_same_event_id_and_another_time_another():
    queued, sent = _row(state="queued", updated_at=1), _row(state="sent", updated_at=2)
    first, again = ledger_events(_record(queued, sent)), ledger_events(_record(queued, sent, seq=7))
    assert first[0].id == again[0].id  # the stream gave the record twice: the receiver drops the second
    failed = _row(state="failed", updated_at=3, reason="SES: refused")
    retried_and_failed = _row(state="failed", updated_at=30, reason="SES: refused")
    assert ledger_events(_record(queued, failed))[0].id != ledger_events(_record(queued, retried_and_failed))[0].id


def _endpoint(**kw: Any) -> Endpoint:
    base = Endpoint("acme", "ep_1", "https://hooks.example.com/x", EVENT_TYPES, 1, new_secret(), 0.0)
    return replace(base, **kw)


def _events(n: int, kind: str = "sent", size: int = 0) -> list[WebhookEvent]:
    return [
        WebhookEvent("acme", kind, {"id": f"evt_{i}", "type": kind, "recipient": f"r{i}@x.org", "pad": "x" * size})
        for i in range(n)
    ]


def test_events_go_in_requests_of_the_endpoints_size_in_order_and_only_the_types_it_wants():
    endpoint = _endpoint(max_events=3, event_types=("bounced",))
    mixed = _events(2, "sent") + _events(7, "bounced")
    made = list(deliveries(endpoint, mixed, 1793000000000))
    bodies = [json.loads(d.payload) for d in made]
    assert [len(b["data"]["events"]) for b in bodies] == [3, 3, 1]
    assert [e["id"] for b in bodies for e in b["data"]["events"]] == [f"evt_{i}" for i in range(7)]
    assert all(b["type"] == "moonsend.events" and b["timestamp"] == "2026-10-26T07:33:20.000Z" for b in bodies)
    assert [d.webhook_id for d in made] == [d.webhook_id for d in deliveries(endpoint, mixed, 0)]  # the same ids
    assert len({d.webhook_id for d in made}) == 3
    assert WebhookRequest.from_message(made[0].to_message()) == made[0]
    # Large events close a request well before SQS's limit, whatever the endpoint allows.
    big = list(deliveries(_endpoint(max_events=100), _events(100, size=4000), 0))
    assert len(big) > 1 and all(len(d.to_message().encode()) < 2 * MAX_PAYLOAD_BYTES + 1024 for d in big)
    assert all(len(d.payload.encode()) <= MAX_PAYLOAD_BYTES + 4100 for d in big)


def test_a_message_that_is_not_a_delivery_is_named_as_such():
    for body in ("", "[]", "{}", '{"userId": 1, "endpointId": "e", "webhookId": "w", "payload": "p"}', "\x00"):
        with pytest.raises(ValueError, match="not a webhook delivery"):
            WebhookRequest.from_message(body)


class _Endpoints:
    def __init__(self, *endpoints: Endpoint) -> None:
        self.rows = {(e.user_id, e.id): e for e in endpoints}

    def get(self, user_id: str, endpoint_id: str) -> Endpoint | None:
        return self.rows.get((user_id, endpoint_id))

    def list(self, user_id: str) -> list[Endpoint]:
        return [e for (u, _), e in self.rows.items() if u == user_id]

    def disable(self, user_id: str, endpoint_id: str, reason: str, now: float) -> bool:
        e = self.rows[(user_id, endpoint_id)]
        if not e.enabled:
            return False
        self.rows[(user_id, endpoint_id)] = replace(e, disabled_reason=reason, disabled_at=now)
        return True

    def quieten(self, user_id: str, endpoint_id: str, until: float) -> None:
        self.rows[(user_id, endpoint_id)] = replace(self.rows[(user_id, endpoint_id)], quiet_until=until)

    def claim_probe(self, user_id: str, endpoint_id: str, now: float, until: float) -> bool:
        e = self.rows[(user_id, endpoint_id)]
        if e.quiet_until is not None and e.quiet_until > now:
            return False
        self.rows[(user_id, endpoint_id)] = replace(e, quiet_until=until)
        return True

    def answered(self, user_id: str, endpoint_id: str) -> None:
        self.rows[(user_id, endpoint_id)] = replace(self.rows[(user_id, endpoint_id)], quiet_until=None)


class _Held:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], str] = {}

    def hold(self, user_id: str, endpoint_id: str, webhook_id: str, body: str, now: float) -> None:
        self.rows[(endpoint_id, webhook_id)] = body


class _Queue:
    def __init__(
        self, refuse: Callable[[WebhookRequest], Unqueued | None] = lambda d: None, *, down: bool = False
    ) -> None:
        self.put_deliveries: list[WebhookRequest] = []
        self.put_bodies: list[tuple[str, str]] = []  # messages of another kind: events to keep later
        self.hidden: list[tuple[str, int]] = []
        self._refuse = refuse
        self._down = down

    def put_messages(self, messages: list[tuple[str, str]]) -> None:
        if self._down:
            raise ConnectionError("SQS did not answer")
        self.put_bodies.extend(messages)

    def put(self, made: list[WebhookRequest]) -> list[Unqueued]:
        refused = [(i, self._refuse(d)) for i, d in enumerate(made)]
        self.put_deliveries.extend(d for d, (_i, r) in zip(made, refused, strict=True) if r is None)
        return [Unqueued(i, r.code, r.permanent) for i, r in refused if r is not None]

    def retry_later(self, receipt: str, wait_s: int) -> None:
        self.hidden.append((receipt, wait_s))


def _deliverer(endpoint: Endpoint, answers: list[Answer], retry_s=RETRY_WAITS_S, clock=None):
    sent: list[tuple[dict[str, str], str]] = []

    def post(target: Target, headers: dict[str, str], body: str) -> Answer:
        sent.append((headers, body))
        return answers.pop(0) if len(answers) > 1 else answers[0]

    endpoints, parked, queue = _Endpoints(endpoint), _Held(), _Queue()
    d = WebhookDeliverer(
        endpoints,  # type: ignore[arg-type]
        parked,  # type: ignore[arg-type]
        queue,  # type: ignore[arg-type]
        retry_s,
        AddressPolicy(allow_loopback=False, resolver=lambda host, port: ["93.184.216.34"]),
        post=post,
        **({"clock": clock} if clock is not None else {}),
    )
    return d, sent, endpoints, parked, queue


def _message(endpoint: Endpoint) -> str:
    (made,) = deliveries(endpoint, _events(1), 0)
    return made.to_message()


def test_a_2xx_ends_a_delivery_signed_so_the_specifications_library_verifies_it():
    endpoint = _endpoint()
    d, sent, *_ = _deliverer(endpoint, [Answer(204, None, 3)])
    assert d.attempt(_message(endpoint), 1).what == DELIVERED
    ((headers, body),) = sent
    assert Webhook(endpoint.secret).verify(body, headers)["data"]["events"][0]["id"] == "evt_0"


def test_a_failure_waits_on_the_schedule_and_the_last_attempt_disables_and_parks():
    endpoint = _endpoint()
    message = _message(endpoint)
    d, sent, endpoints, parked, _ = _deliverer(endpoint, [Answer(500, None, 3)])
    waits = [d.attempt(message, n).retry_in_s for n in range(1, len(RETRY_WAITS_S) + 1)]
    assert waits == list(RETRY_WAITS_S) and sum(waits) >= 24 * 3600  # at least a day of retries
    assert d.attempt(message, len(RETRY_WAITS_S) + 1).what == DISABLED
    reason = endpoints.get("acme", "ep_1").disabled_reason
    assert reason == "8 attempts of a delivery failed; the last: HTTP 500"
    assert list(parked.rows.values()) == [message]
    # What comes for it after is parked without a request.
    assert d.attempt(_message(endpoint), 1).what == HELD and len(sent) == 8


def test_410_disables_at_once_and_a_removed_endpoint_or_a_foreign_message_is_dropped():
    endpoint = _endpoint()
    d, _, endpoints, parked, _ = _deliverer(endpoint, [Answer(410, None, 1)])
    assert d.attempt(_message(endpoint), 1).what == DISABLED
    assert endpoints.get("acme", "ep_1").disabled_reason == "the endpoint answered 410 Gone" and parked.rows
    assert d.attempt(_message(_endpoint(id="ep_gone")), 1).what == DROPPED
    assert d.attempt("not json", 1).what == DROPPED


def test_no_answer_and_an_address_now_private_are_retried_like_any_failure():
    endpoint = _endpoint()
    d, *_ = _deliverer(endpoint, [Answer(None, "TimeoutError", 10000)])
    assert d.attempt(_message(endpoint), 1) == RequestOutcome(RETRY, RETRY_WAITS_S[0])
    rebound = WebhookDeliverer(
        _Endpoints(endpoint),  # type: ignore[arg-type]
        _Held(),  # type: ignore[arg-type]
        _Queue(),  # type: ignore[arg-type]
        (5,),
        AddressPolicy(allow_loopback=False, resolver=lambda host, port: ["10.0.0.7"]),
        post=lambda *a: pytest.fail("no request to a private address"),
    )
    assert rebound.attempt(_message(endpoint), 1).what == RETRY


def test_an_endpoint_that_leaves_a_request_unanswered_gets_no_request_until_its_quiet_is_over():
    # A receiver that hangs holds 15 s of deliver_webhooks (20 at once, every tenant's) per request; its
    # next requests wait the quiet out without a connection, each a failed attempt tried again after it.
    endpoint, now = _endpoint(), [1_000.0]
    d, sent, endpoints, *_ = _deliverer(endpoint, [Answer(None, "TimeoutError", 15_000)], clock=lambda: now[0])
    assert d.attempt(_message(endpoint), 1) == RequestOutcome(RETRY, RETRY_WAITS_S[0])
    assert endpoints.get("acme", "ep_1").quiet_until == 1_000.0 + QUIET_S
    now[0] += 10
    waiting = d.attempt(_message(endpoint), 1)
    assert waiting.what == RETRY and waiting.retry_in_s is not None and waiting.retry_in_s >= QUIET_S - 10
    assert len(sent) == 1  # no connection made for it
    # Its last attempt disables it as any failure does (the quiet does not make a delivery immortal).
    assert d.attempt(_message(endpoint), len(RETRY_WAITS_S) + 1).what == DISABLED and len(sent) == 1


def test_after_the_quiet_one_request_goes_first_and_an_answer_of_any_status_ends_the_quiet():
    endpoint, now = _endpoint(quiet_until=1_000.0), [1_000.0]
    d, sent, endpoints, *_ = _deliverer(endpoint, [Answer(503, None, 40)], clock=lambda: now[0])
    assert d.attempt(_message(endpoint), 2).what == RETRY and len(sent) == 1  # the first go: it answered
    assert endpoints.get("acme", "ep_1").quiet_until is None
    assert d.attempt(_message(endpoint), 2).what == RETRY and len(sent) == 2  # requests go as they come


def test_of_two_deliveries_at_the_quiets_end_only_the_one_that_claimed_it_makes_a_request():
    endpoint, now = _endpoint(quiet_until=1_000.0), [1_001.0]
    d, sent, endpoints, *_ = _deliverer(endpoint, [Answer(None, "TimeoutError", 15_000)], clock=lambda: now[0])
    endpoints.get = lambda user_id, endpoint_id: endpoint  # both read the row before either wrote it
    assert d.attempt(_message(endpoint), 3).what == RETRY and len(sent) == 1  # the first go, unanswered
    assert endpoints.rows[("acme", "ep_1")].quiet_until == 1_001.0 + QUIET_S  # the quiet renewed
    second = d.attempt(_message(endpoint), 3)
    assert second.what == RETRY and second.retry_in_s is not None and second.retry_in_s >= QUIET_S
    assert len(sent) == 1  # the claim was taken: no second connection


def test_a_quick_failure_does_not_quieten_an_endpoint():
    endpoint = _endpoint()
    for answer in (Answer(503, None, 40), Answer(None, "ConnectionRefusedError", 2)):
        d, sent, endpoints, *_ = _deliverer(endpoint, [answer])
        d.attempt(_message(endpoint), 1)
        d.attempt(_message(endpoint), 1)
        assert len(sent) == 2 and endpoints.get("acme", "ep_1").quiet_until is None


def test_a_batch_is_attempted_at_once_and_names_only_the_deliveries_to_come_back():
    endpoint = _endpoint()
    release = threading.Event()
    seen: list[str] = []

    def post(target: Target, headers: dict[str, str], body: str) -> Answer:
        seen.append(headers["webhook-id"])
        if len(seen) == 1:
            assert release.wait(5), "the other deliveries waited behind a slow receiver"
            return Answer(503, None, 5000)
        if len(seen) == 3:
            release.set()
        return Answer(200, None, 1)

    queue = _Queue()
    d = WebhookDeliverer(
        _Endpoints(endpoint),  # type: ignore[arg-type]
        _Held(),  # type: ignore[arg-type]
        queue,  # type: ignore[arg-type]
        (7,),
        AddressPolicy(allow_loopback=False, resolver=lambda host, port: ["93.184.216.34"]),
        post=post,
    )
    made = list(deliveries(endpoint, _events(3), 0))
    records = [
        {"messageId": f"m{i}", "receiptHandle": f"r{i}", "body": m.to_message(), "attributes": {}}
        for i, m in enumerate(made)
    ]
    answer = d.batch(records)
    (failed,) = answer["batchItemFailures"]
    assert queue.hidden == [(f"r{failed['itemIdentifier'][1:]}", 7)]


def test_the_fanout_skips_a_record_it_cannot_read_and_parks_for_a_disabled_endpoint():
    on, off = _endpoint(id="ep_on"), _endpoint(id="ep_off", disabled_reason="410", disabled_at=1.0)
    endpoints, parked, queue = _Endpoints(on, off), _Held(), _Queue()
    fanout = WebhookFanout(endpoints, queue, parked, FakeEventLog(), clock=lambda: 1793000000.0)  # type: ignore[arg-type]
    foreign = _record(None, {"pk": "x", "rcpt": "y"})
    foreign["dynamodb"]["NewImage"] = {"pk": {"Q": "not a DynamoDB type"}}
    sent = _row(state="sent", updated_at=5)
    result = fanout.handle([foreign, {"eventName": "MODIFY"}, _record(_row(state="queued"), sent)])
    assert (result.events, result.queued, result.held, result.skipped) == (1, 1, 1, 2)
    assert [d.endpoint_id for d in queue.put_deliveries] == ["ep_on"]
    assert [k[0] for k in parked.rows] == ["ep_off"]


def test_the_retry_schedule_is_configurable_within_sqss_limits():
    assert Settings.from_env({}).webhook_retry_s == RETRY_WAITS_S
    assert Settings.from_env({"MOONSEND_WEBHOOK_RETRY_S": "1,2"}).webhook_retry_s == (1, 2)
    for bad in ("43201", "-1", "a", ",".join(["1"] * 18)):
        with pytest.raises(ValueError):
            Settings.from_env({"MOONSEND_WEBHOOK_RETRY_S": bad})


def test_deliveries_go_ten_to_a_request_each_under_its_tenant_as_the_fair_queues_group():
    """botocore's Stubber checks each request against SQS's model (MessageGroupId on a standard queue makes
    it a fair queue)."""
    import boto3
    from botocore.stub import ANY, Stubber

    from chalicelib.core.errors import DeliveryNotQueued
    from chalicelib.webhooks.delivery_queue import DeliveryQueue

    sqs = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/moonsend-dev-webhook-deliveries"
    made = list(deliveries(_endpoint(), _events(12), 0))

    def ok(n: int) -> dict[str, Any]:
        return {
            "Successful": [{"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "x"} for i in range(n)],
            "Failed": [],
        }

    with Stubber(sqs) as stub:
        stub.add_response("get_queue_url", {"QueueUrl": url}, {"QueueName": "moonsend-dev-webhook-deliveries"})
        for n in (10, 2):
            entries = [{"Id": str(i), "MessageBody": ANY, "MessageGroupId": "acme"} for i in range(n)]
            stub.add_response("send_message_batch", ok(n), {"QueueUrl": url, "Entries": entries})
        stub.add_response(
            "send_message_batch",
            {"Successful": [], "Failed": [{"Id": "0", "SenderFault": False, "Code": "InternalError"}]},
            {"QueueUrl": url, "Entries": ANY},
        )
        queue = DeliveryQueue(sqs, "moonsend-dev-webhook-deliveries")
        assert queue.put(made) == []
        with pytest.raises(DeliveryNotQueued, match="InternalError"):
            queue.put_messages([(d.user_id, d.to_message()) for d in made[:1]])
        stub.assert_no_pending_responses()


def test_large_non_latin_deliveries_go_unescaped_in_requests_sqs_takes():
    from chalicelib.webhooks.delivery_queue import MAX_REQUEST_BYTES, SQS_BATCH, _requests

    reason = "ошибка доставки " * 70  # about 2 KB of Cyrillic per event
    events = [
        WebhookEvent("acme", "failed", {"id": f"evt_{i}", "type": "failed", "reason": reason}) for i in range(300)
    ]
    made = list(deliveries(_endpoint(max_events=100), events, 0))
    messages = [(d.user_id, d.to_message()) for d in made]
    assert "ошибка" in messages[0][1]  # not \\uXXXX: that tripled a message
    assert all(len(body.encode()) < 2 * MAX_PAYLOAD_BYTES + 1024 for _u, body in messages)
    requests = _requests(messages)
    assert [m for r in requests for m in r] == messages
    assert all(len(r) <= SQS_BATCH and sum(len(b.encode()) for _u, b in r) <= MAX_REQUEST_BYTES for r in requests)


class _BrokenEndpoints(_Endpoints):
    def get(self, user_id: str, endpoint_id: str) -> Endpoint | None:
        raise ConnectionError("DynamoDB unreachable")


def test_a_delivery_that_keeps_raising_past_the_schedule_is_parked_not_left_to_expire():
    endpoint, parked, queue = _endpoint(), _Held(), _Queue()
    d = WebhookDeliverer(
        _BrokenEndpoints(endpoint),  # type: ignore[arg-type]
        parked,  # type: ignore[arg-type]
        queue,  # type: ignore[arg-type]
        (5, 10),
        AddressPolicy(allow_loopback=False, resolver=lambda host, port: ["93.184.216.34"]),
        post=lambda *a: pytest.fail("no request without its endpoint"),
    )
    message = _message(endpoint)

    def record(attempt: int) -> dict[str, Any]:
        return {
            "messageId": "m",
            "receiptHandle": "r",
            "body": message,
            "attributes": {"ApproximateReceiveCount": str(attempt)},
        }

    assert d.batch([record(2)]) == {"batchItemFailures": [{"itemIdentifier": "m"}]} and queue.hidden == [("r", 10)]
    assert d.batch([record(3)]) == {"batchItemFailures": []} and list(parked.rows.values()) == [message]


def test_requests_are_packed_by_bytes_within_sqs_1_mib_where_ten_messages_would_be_over():
    from chalicelib.webhooks.delivery_queue import MAX_REQUEST_BYTES, SQS_BATCH, _requests

    quoted = '"' * 3000  # each `"` is two bytes in the payload, and four in its queue message
    events = [
        WebhookEvent("acme", "failed", {"id": f"evt_{i}", "type": "failed", "reason": quoted}) for i in range(400)
    ]
    messages = [(d.user_id, d.to_message()) for d in deliveries(_endpoint(max_events=100), events, 0)]
    assert len(messages) > SQS_BATCH and all(len(b.encode()) > MAX_REQUEST_BYTES / SQS_BATCH for _u, b in messages)
    requests = _requests(messages)
    assert [m for r in requests for m in r] == messages
    assert MAX_REQUEST_BYTES == 1_048_576 and all(
        sum(len(b.encode()) for _u, b in r) <= MAX_REQUEST_BYTES for r in requests
    )
    assert max(len(r) for r in requests) < SQS_BATCH  # bytes, not the count, closed each request


def test_code_points_sqs_refuses_are_escaped_so_the_json_reads_the_same_and_sqs_takes_it():
    from infra.local.sqs_limits import refused_character

    reason = "body, line 1, column 6: x.\uffff is undefined \ufffe \ud800 and the rest: ошибка 😀 \x7f"
    (made,) = deliveries(
        _endpoint(), [WebhookEvent("acme", "rejected", {"id": "evt_1", "type": "rejected", "reason": reason})], 0
    )
    assert "\\uffff" in made.payload and "\\ufffe" in made.payload and "\\ud800" in made.payload
    assert "ошибка 😀" in made.payload  # everything else stays UTF-8
    assert json.loads(made.payload)["data"]["events"][0]["reason"] == reason
    message = made.to_message()
    assert refused_character(message) is None and refused_character(made.payload) is None
    assert WebhookRequest.from_message(message) == made
    # A message parked before (raw U+FFFF in it) is made safe on its way back to the queue.
    raw = json.dumps({"userId": "acme", "endpointId": "e", "webhookId": "w", "payload": "\uffff"}, ensure_ascii=False)
    assert refused_character(sqs_safe(raw)) is None and json.loads(sqs_safe(raw)) == json.loads(raw)
    assert sqs_safe('{"a":"plain"}') == '{"a":"plain"}'


def _fanout(
    endpoints: list[Endpoint],
    queue: _Queue | None = None,
    parked: _Held | None = None,
    event_log: FakeEventLog | None = None,
) -> WebhookFanout:
    return WebhookFanout(
        _Endpoints(*endpoints),  # type: ignore[arg-type]
        queue or _Queue(),  # type: ignore[arg-type]
        parked or _Held(),  # type: ignore[arg-type]
        event_log or FakeEventLog(),
        clock=lambda: 1793000000.0,
    )


def _sent(user: str, n: int) -> dict[str, Any]:
    row = {**_row(state="sent", updated_at=n), "pk": f"{user}#spring", "rcpt": f"r{n}@x.org"}
    return _record({**row, "state": "queued"}, row, seq=n)


def test_a_delivery_sqs_refuses_for_what_it_is_is_parked_and_the_stream_goes_on():
    bad, good = _endpoint(id="ep_bad", max_events=1), _endpoint(user_id="globex", id="ep_good", max_events=1)
    queue = _Queue(lambda d: Unqueued(0, "InvalidMessageContents", True) if d.endpoint_id == "ep_bad" else None)
    parked = _Held()
    fanout = _fanout([bad, good], queue, parked)
    answer = fanout.batch([_sent("acme", 1), _sent("globex", 2)])
    assert answer == {"batchItemFailures": []}  # sent again, it would be refused again: kept for replay
    assert [d.endpoint_id for d in queue.put_deliveries] == ["ep_good"]
    assert [k[0] for k in parked.rows] == ["ep_bad"]


def test_what_a_retry_may_fix_fails_only_its_own_records_and_is_parked_in_case_lambda_gives_up():
    a, b = _endpoint(id="ep_a", max_events=1), _endpoint(user_id="globex", id="ep_b", max_events=1)
    queue = _Queue(lambda d: Unqueued(0, "ConnectTimeoutError", False) if d.user_id == "acme" else None)
    parked = _Held()
    result = _fanout([a, b], queue, parked).handle([_sent("globex", 1), _sent("acme", 2), _sent("globex", 3)])
    assert result.failed == ("2",) and result.queued == 2 and result.held == 1
    assert [k[0] for k in parked.rows] == ["ep_a"]


class _FlakyEndpoints(_Endpoints):
    def list(self, user_id: str) -> list[Endpoint]:
        if user_id == "acme":
            raise ConnectionError("DynamoDB unreachable")
        return super().list(user_id)


class _BrokenHeld(_Held):
    def hold(self, user_id: str, endpoint_id: str, webhook_id: str, body: str, now: float) -> None:
        raise ConnectionError("DynamoDB unreachable")


def test_a_tenant_whose_endpoints_cannot_be_read_fails_its_records_alone():
    a, b = _endpoint(id="ep_a"), _endpoint(user_id="globex", id="ep_b")
    queue = _Queue()
    fanout = WebhookFanout(_FlakyEndpoints(a, b), queue, _Held(), FakeEventLog(), clock=lambda: 0.0)  # type: ignore[arg-type]
    assert fanout.batch([_sent("acme", 7), _sent("globex", 8)]) == {"batchItemFailures": [{"itemIdentifier": "7"}]}
    assert [d.user_id for d in queue.put_deliveries] == ["globex"]
    # Nor parked, nor queued: the record is given again.
    off = _endpoint(id="ep_off", disabled_reason="410", disabled_at=1.0)
    refused = _Queue(lambda d: Unqueued(0, "InvalidMessageContents", True))
    for q, endpoint in ((_Queue(), off), (refused, _endpoint())):
        stuck = WebhookFanout(_Endpoints(endpoint), q, _BrokenHeld(), FakeEventLog(), clock=lambda: 0.0)  # type: ignore[arg-type]
        assert stuck.handle([_sent("acme", 9)]).failed == ("9",)


def test_every_event_is_kept_in_the_event_log_also_for_a_tenant_with_no_endpoint():
    log = FakeEventLog()
    answer = _fanout([_endpoint(id="ep_a", max_events=1)], event_log=log).batch([_sent("acme", 1), _sent("globex", 2)])
    assert answer == {"batchItemFailures": []}
    kept = sorted((user, event.type, event.data["campaignId"]) for (user, _k), event in log.kept.items())
    assert kept == [("acme", "sent", "spring"), ("globex", "sent", "spring")]
    # Kept again from a redelivered record: the same key, no second event.
    _fanout([], event_log=log).batch([_sent("acme", 1)])
    assert len(log.kept) == 2
