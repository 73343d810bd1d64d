"""The stack's own AWS calls reach its endpoint's app without loopback HTTP, and answer exactly as over it."""

import contextlib
import contextvars
import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from infra.local import direct_calls

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers there over the network
_CONFIG = Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=2)
_caller_mark: contextvars.ContextVar[str] = contextvars.ContextVar("caller_mark", default="unset")


class _App:
    """A WSGI app answering one canned response, keeping what it was asked."""

    def __init__(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.answer = (status, headers, body)
        self.seen: list[dict[str, Any]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        self.seen.append(
            {
                "environ": dict(environ),
                "body": environ["wsgi.input"].read(length),
                "thread": threading.get_ident(),
                "mark": _caller_mark.get(),
            }
        )
        status, headers, body = self.answer
        start_response(status, headers)
        return [body if environ["REQUEST_METHOD"] != "PUT" else b""]  # S3 takes a body on a PUT for an error


def _client(service: str, url: str = NOWHERE) -> Any:
    return boto3.client(
        service,
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key="secret",
        config=_CONFIG,
    )


@contextlib.contextmanager
def _serving(app: Any) -> Iterator[Any]:
    """`app` answers this process's calls to NOWHERE for the block."""
    undo = direct_calls.install(NOWHERE, app)
    try:
        yield app
    finally:
        undo()


@pytest.fixture
def json_app():
    app = _App("200 OK", [("Content-Type", "application/x-amz-json-1.0")], b'{"QueueUrl": "http://q/1"}')
    with _serving(app):
        yield app


def test_a_call_to_the_endpoint_is_answered_by_its_app_on_the_calling_thread(json_app):
    token = _caller_mark.set("the caller's")
    try:
        got = _client("sqs").get_queue_url(QueueName="q1")
    finally:
        _caller_mark.reset(token)
    assert got["QueueUrl"] == "http://q/1"
    [seen] = json_app.seen
    env = seen["environ"]
    assert env["REQUEST_METHOD"] == "POST" and env["PATH_INFO"] == "/"
    assert env["HTTP_X_AMZ_TARGET"] == "AmazonSQS.GetQueueUrl"
    assert "Credential=AKIAEXAMPLE/" in env["HTTP_AUTHORIZATION"]  # signed as over the network
    assert json.loads(seen["body"]) == {"QueueName": "q1"}
    assert env["CONTENT_LENGTH"] == str(len(seen["body"]))
    assert seen["thread"] == threading.get_ident()
    # The endpoint's work is not the caller's: its context (a function's role, its faults) stays behind.
    assert seen["mark"] == "unset"


def test_error_answers_raise_as_they_would_from_the_wire():
    body = json.dumps({"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "no such queue"}).encode()
    headers = [
        ("Content-Type", "application/x-amz-json-1.0"),
        ("x-amzn-query-error", "AWS.SimpleQueueService.NonExistentQueue;Sender"),
    ]
    with _serving(_App("400 Bad Request", headers, body)), pytest.raises(botocore.exceptions.ClientError) as err:
        _client("sqs").get_queue_url(QueueName="missing")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert err.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"


def test_uploads_arrive_whole_and_downloads_stream():
    payload = b"x" * 300_000
    app = _App("200 OK", [("Content-Type", "binary/octet-stream"), ("ETag", '"e"')], payload)
    with _serving(app):
        s3 = _client("s3")
        s3.put_object(Bucket="b", Key="k", Body=io.BytesIO(payload))
        body = s3.get_object(Bucket="b", Key="k")["Body"]
        first = body.read(1000)
        rest = body.read()
    assert app.seen[0]["environ"]["REQUEST_METHOD"] == "PUT" and app.seen[0]["body"] == payload
    assert app.seen[0]["environ"]["PATH_INFO"] == "/b/k"
    assert first + rest == payload and len(first) == 1000


def test_calls_go_over_the_network_inside_over_network_and_after_undo(json_app):
    with direct_calls.over_network(), pytest.raises(botocore.exceptions.EndpointConnectionError):
        _client("sqs").get_queue_url(QueueName="q1")
    assert json_app.seen == []
    assert _client("sqs").get_queue_url(QueueName="q1")["QueueUrl"] == "http://q/1"


def test_other_endpoints_are_left_alone(json_app):
    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        _client("sqs", "http://127.0.0.1:7").get_queue_url(QueueName="q1")  # the echo port: not ours
    assert json_app.seen == []


def test_undo_puts_the_network_back():
    undo = direct_calls.install(NOWHERE, _App("200 OK", [], b"{}"))
    undo()
    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        _client("sqs").get_queue_url(QueueName="q1")


def _answers(make: Any, calls: Any) -> list[Any]:
    """Each call's parsed answer (or its error code), without the per-request metadata."""
    client = make()
    out: list[Any] = []
    for call in calls:
        try:
            got = call(client)
            got.pop("ResponseMetadata", None)
            out.append(got)
        except botocore.exceptions.ClientError as exc:
            out.append(("error", exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]))
    return out


def test_the_stack_answers_direct_calls_exactly_as_it_answers_over_loopback(stack, uid):
    """moto's server over real HTTP is the reference: the same requests, the same parsed answers."""
    region = stack.config.region

    def run(tag: str) -> dict[str, list[Any]]:
        s3_bucket, table, queue = f"direct-{tag}-{uid}", f"direct-{tag}-{uid}", f"direct-{tag}-{uid}"
        sqs_calls = [
            lambda c: {"ok": c.create_queue(QueueName=queue)["QueueUrl"].endswith(queue)},
            lambda c: (
                c.send_message(QueueUrl=c.get_queue_url(QueueName=queue)["QueueUrl"], MessageBody="héllo")
                and {"sent": True}
            ),
            lambda c: {
                "bodies": [
                    m["Body"]
                    for m in c.receive_message(QueueUrl=c.get_queue_url(QueueName=queue)["QueueUrl"]).get(
                        "Messages", []
                    )
                ]
            },
            lambda c: c.get_queue_url(QueueName=f"{queue}-missing"),
        ]
        ddb_calls = [
            lambda c: {
                "status": c.create_table(
                    TableName=table,
                    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                    BillingMode="PAY_PER_REQUEST",
                )["TableDescription"]["TableStatus"]
            },
            lambda c: c.put_item(TableName=table, Item={"pk": {"S": "a"}, "n": {"N": "1"}}),
            lambda c: c.put_item(
                TableName=table, Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)"
            ),
            lambda c: c.get_item(TableName=table, Key={"pk": {"S": "a"}}, ConsistentRead=True),
        ]
        s3_calls = [
            lambda c: c.create_bucket(Bucket=s3_bucket) and {"ok": True},
            lambda c: c.put_object(Bucket=s3_bucket, Key="k", Body=b"payload" * 1000) and {"ok": True},
            lambda c: {"body": c.get_object(Bucket=s3_bucket, Key="k")["Body"].read()},
            lambda c: c.head_object(Bucket=s3_bucket, Key="missing"),
        ]

        def client(service: str) -> Any:
            return lambda: boto3.client(service, endpoint_url=stack.endpoint, region_name=region)

        return {
            "sqs": _answers(client("sqs"), sqs_calls),
            "dynamodb": _answers(client("dynamodb"), ddb_calls),
            "s3": _answers(client("s3"), s3_calls),
        }

    with direct_calls.over_network():
        over_http = run("http")
    direct = run("direct")
    assert direct == over_http
    assert over_http["dynamodb"][2] == ("error", "ConditionalCheckFailedException", 400)
    assert over_http["s3"][3] == ("error", "404", 404)
    assert over_http["sqs"][2] == {"bodies": ["héllo"]}


def test_an_endpoint_that_raises_answers_500_as_the_http_server_does(capsys):
    def broken(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise RuntimeError("a stand-in's bug")

    with _serving(broken), pytest.raises(botocore.exceptions.ClientError) as err:
        _client("sqs").get_queue_url(QueueName="q1")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert "a stand-in's bug" in capsys.readouterr().err
