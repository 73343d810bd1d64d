"""The local endpoint keeps HTTP connections open between requests, and never mixes two requests up."""

import http.client
import json
import threading
from urllib.parse import urlsplit

import boto3
from werkzeug.serving import make_server

from infra.local import direct_calls, keepalive


def _connect(stack) -> http.client.HTTPConnection:
    u = urlsplit(stack.endpoint)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=10)


def _counting_accepts(stack):
    server, seen = stack._server, []
    real = server.process_request

    def counting(request, client_address):
        seen.append(client_address)
        return real(request, client_address)

    server.process_request = counting
    return seen, lambda: setattr(server, "process_request", real)


def test_a_client_makes_many_calls_over_one_connection(stack, uid):
    sqs = boto3.client("sqs", endpoint_url=stack.endpoint, region_name=stack.config.region)
    seen, restore = _counting_accepts(stack)
    try:
        with direct_calls.over_network():  # as another process calls it
            url = sqs.create_queue(QueueName=f"keepalive-{uid}")["QueueUrl"]
            for i in range(30):
                sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
            got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    finally:
        restore()
    assert got["Attributes"]["ApproximateNumberOfMessages"] == "30"
    assert len(seen) == 1  # werkzeug alone answers each with Connection: close: 32 connections
    assert stack._server.request_queue_size == keepalive.LISTEN_BACKLOG  # bursts of new ones queue, not fail


def test_a_body_the_app_left_unread_does_not_become_the_next_request():
    # An app that answers without reading the body (the gateway reads every body; this is the rest).
    def app(environ, start_response):
        answer = environ["PATH_INFO"].encode()
        start_response("200 OK", [("Content-Length", str(len(answer)))])
        return [answer]

    keepalive.install()
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=keepalive.KeepAliveHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
        answers = []
        for path, body in (("/first", b"GET /stray HTTP/1.1\r\n\r\n" * 200), ("/second", None), ("/third", b"x")):
            conn.request("POST" if body else "GET", path, body=body)
            r = conn.getresponse()
            answers.append((r.read().decode(), r.getheader("Connection")))
        conn.close()
    finally:
        server.shutdown()
    assert answers == [("/first", None), ("/second", None), ("/third", None)]


def test_a_chunked_request_closes_its_connection(stack):
    conn = _connect(stack)
    conn.request(
        "POST", "/", body=iter([b"a" * 10, b"b" * 10]), headers={"Transfer-Encoding": "chunked"}, encode_chunked=True
    )
    answer = conn.getresponse()
    answer.read()
    assert answer.getheader("Connection", "").lower() == "close"
    conn.close()


def test_json_protocol_calls_on_a_kept_connection_answer_each_its_own(stack, uid):
    ddb = boto3.client("dynamodb", endpoint_url=stack.endpoint, region_name=stack.config.region)
    seen, restore = _counting_accepts(stack)
    try:
        with direct_calls.over_network():
            names = set(ddb.list_tables()["TableNames"])
            for _ in range(5):
                assert set(ddb.list_tables()["TableNames"]) == names
    finally:
        restore()
    assert len(seen) == 1
    assert json.dumps(sorted(names))
