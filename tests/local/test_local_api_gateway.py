"""The local API Gateway (infra/local/api_gateway.py) routes and answers as the template's REST API says:
a small Chalice app, its Swagger made by Chalice's own generator, API Gateway's answers added as the
package adds them (infra/api_gateway.py), served on loopback and asked over HTTP."""

import gzip
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from chalice import Chalice
from chalice.config import Config
from chalice.deploy.swagger import CFNSwaggerGenerator

from infra import api_gateway as template_answers
from infra.local import api_gateway


@dataclass
class Served:
    port: int
    slow_runs: list[str]

    def ask(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()


def small_app(slow_runs: list[str]) -> Chalice:
    app = Chalice(app_name="gateway-test")

    @app.route("/things", methods=["GET", "POST"])
    def things():
        return {"things": []}

    @app.route("/things/{thing_id}", methods=["DELETE"])
    def drop(thing_id):
        return {"dropped": thing_id}

    @app.route("/big", methods=["GET"])
    def big():
        return {"rows": ["x" * 100] * 50}  # about 5 KB of JSON

    @app.route("/slow", methods=["POST"])
    def slow():
        time.sleep(0.5)
        slow_runs.append("ran to its end")
        return {"ok": True}

    return app


def rest_api_of(app: Chalice, with_answers: bool = True) -> api_gateway.RestApi:
    swagger = CFNSwaggerGenerator().generate_swagger(app)
    template = {"Resources": {"RestAPI": {"Properties": {"DefinitionBody": swagger}}}}
    if with_answers:
        template_answers.add_own_answers(template)
    return api_gateway.RestApi.of(template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"])


def serve(rest_api_for, integration_timeout_s: float = 29.0) -> Iterator[Served]:
    slow_runs: list[str] = []
    app = small_app(slow_runs)
    rest_api = replace(rest_api_for(app), integration_timeout_s=integration_timeout_s)
    config = Config.create(chalice_stage="dev", app_name="gateway-test", project_dir=".")
    server = api_gateway.serve(app, config, "127.0.0.1", 0, rest_api)
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(server.server.server_port, slow_runs)
    finally:
        server.shutdown()
        server.server.server_close()


@pytest.fixture
def served() -> Iterator[Served]:
    yield from serve(rest_api_of, integration_timeout_s=0.2)


def test_a_path_the_template_does_not_have_gets_its_gateway_response_a_404_problem_with_the_request_id(served):
    status, headers, body = served.ask("GET", "/nothing/here")
    problem = json.loads(body)
    assert (status, headers["content-type"], headers["cache-control"]) == (404, "application/problem+json", "no-store")
    assert (problem["status"], problem["title"]) == (404, "Not Found")
    assert problem["requestId"] == headers["x-amzn-requestid"]


@pytest.mark.parametrize("method", ["TRACE", "OPTIONS", "HEAD", "PUT", "PATCH", "PROPFIND"])
def test_a_method_a_path_does_not_take_reaches_the_app_which_answers_405_with_allow(served, method):
    status, headers, _body = served.ask(method, "/things")
    assert (status, headers["allow"]) == (405, "GET, POST")  # never http.server's 501 page, nor a CORS answer


def test_a_route_of_the_template_is_the_apps_with_its_path_parameter_decoded(served):
    status, _headers, body = served.ask("DELETE", "/things/ann%2Bnews%40example.org")
    assert (status, json.loads(body)) == (200, {"dropped": "ann+news@example.org"})


def test_a_body_over_api_gateways_10_mb_is_read_and_refused_with_413_which_the_sender_gets(served):
    big = b"x" * (template_answers.MAX_BODY_BYTES + 1)
    status, _headers, body = served.ask("POST", "/things", body=big, headers={"Content-Type": "application/json"})
    assert (status, json.loads(body)["status"]) == (413, 413)  # not a broken pipe while still sending


def test_a_body_over_lambdas_6_mb_never_reaches_the_function_and_is_the_gateways_5xx(served):
    body = b'"' + b"x" * api_gateway.LAMBDA_PAYLOAD_BYTES + b'"'
    status, headers, answer = served.ask("POST", "/things", body=body, headers={"Content-Type": "application/json"})
    assert (status, headers["content-type"], json.loads(answer)["status"]) == (500, "application/problem+json", 500)


@pytest.mark.parametrize("framing", [b"Content-Length: abc\r\n\r\n", b"Transfer-Encoding: chunked\r\n\r\nzz\r\n"])
def test_a_request_that_cannot_be_framed_is_a_400_problem_and_the_connection_closed(served, framing):
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(b"POST /things HTTP/1.1\r\nHost: x\r\n" + framing)
        answer = sock.makefile("rb").read()  # to the end: the gateway closes the connection
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"Connection: close" in head
    assert json.loads(body)["status"] == 400


def test_a_chunked_body_is_read_and_handed_to_the_function_whole(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    conn.request("POST", "/things", body=iter([b'{"a": ', b"1}"]), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert (r.status, json.loads(r.read())) == (200, {"things": []})
    conn.close()


def test_a_head_is_answered_without_a_body_so_the_connection_serves_the_next_request(served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    for method, path in (("HEAD", "/nothing"), ("HEAD", "/things"), ("GET", "/things")):
        conn.request(method, path)
        r = conn.getresponse()
        got = (r.status, r.read())
        assert got[0] == {"/nothing": 404, "/things": 405 if method == "HEAD" else 200}[path]
        assert (got[1] == b"") == (method == "HEAD") and int(r.getheader("Content-Length")) > 0
    conn.close()


def test_a_function_slower_than_the_integration_timeout_is_504_and_still_runs_to_its_end(served):
    status, headers, body = served.ask("POST", "/slow", body=b"{}", headers={"Content-Type": "application/json"})
    assert (status, headers["content-type"], json.loads(body)["status"]) == (504, "application/problem+json", 504)
    assert served.slow_runs == ["ran to its end"]


def test_without_gateway_responses_in_the_template_an_unknown_path_is_api_gateways_own_403():
    for served in serve(lambda app: rest_api_of(app, with_answers=False)):
        status, headers, body = served.ask("GET", "/nothing/here")
        assert (status, json.loads(body), headers["content-type"]) == (
            403,
            {"message": "Missing Authentication Token"},
            "application/json",
        )


def test_a_gateway_response_the_emulator_cannot_render_is_refused_not_served_wrong():
    odd = {"responseTemplates": {"application/json": '{"at": "$context.identity.sourceIp"}'}}
    rest_api = api_gateway.RestApi({}, {"MISSING_AUTHENTICATION_TOKEN": odd})
    with pytest.raises(api_gateway.GatewayTemplateError, match="sourceIp"):
        rest_api.answer("MISSING_AUTHENTICATION_TOKEN", "id-1")
    mapped = {"responseParameters": {"gatewayresponse.header.X-Seen": "method.request.header.X-Seen"}}
    with pytest.raises(api_gateway.GatewayTemplateError, match="literal"):
        api_gateway.RestApi({}, {"MISSING_AUTHENTICATION_TOKEN": mapped}).answer("MISSING_AUTHENTICATION_TOKEN", "id")


def test_the_rest_api_crosses_to_a_worker_process_as_it_is():
    rest_api = replace(rest_api_of(small_app([])), minimum_compression=1024)
    assert api_gateway.RestApi.from_json(rest_api.to_json()) == rest_api


def test_a_body_at_least_the_minimum_compression_size_is_gzipped_for_a_client_that_accepts_it():
    """API Gateway's MinimumCompressionSize: a client that sends Accept-Encoding: gzip gets a big body
    gzipped; a small one, one that does not ask, and one that refuses gzip (q=0) get it as it is."""
    for served in serve(lambda app: replace(rest_api_of(app), minimum_compression=1024)):
        status, headers, body = served.ask("GET", "/big", headers={"Accept-Encoding": "gzip, deflate"})
        assert (status, headers["content-encoding"]) == (200, "gzip")
        assert int(headers["content-length"]) == len(body) < 1024
        assert json.loads(gzip.decompress(body)) == {"rows": ["x" * 100] * 50}
        refused = ("gzip;q=0, identity", "br", "gzip;q=0.00", "gzip;q=0.0;x=1", "gzip;q=0, *", "*")
        for asked in ({}, *({"Accept-Encoding": given} for given in refused)):
            status, headers, body = served.ask("GET", "/big", headers=asked)
            assert status == 200 and "content-encoding" not in headers and len(json.loads(body)["rows"]) == 50
        status, headers, body = served.ask("GET", "/things", headers={"Accept-Encoding": "gzip"})
        assert "content-encoding" not in headers and json.loads(body) == {"things": []}  # under 1,024 bytes
    for served in serve(rest_api_of):  # no MinimumCompressionSize: never
        _status, headers, _body = served.ask("GET", "/big", headers={"Accept-Encoding": "gzip"})
        assert "content-encoding" not in headers
