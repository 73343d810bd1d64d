"""A fast stand-in for the AWS endpoints the sender calls, run in its own process (bench/cpu_per_email.py).

It answers with AWS's shapes and nothing more: DynamoDB (UpdateItem, GetItem, PutItem, DeleteItem,
BatchGetItem), SQS's JSON protocol (GetQueueUrl, ListQueueTags, ReceiveMessage with correct MD5s,
DeleteMessageBatch, ChangeMessageVisibility) and SES v2 (GetAccount, SendEmail). The queue holds `count`
copies of a queued email (the one `/reset/COUNT/K` picks of the templates given), the `{i}` in its body
replaced by the message's number. It keeps no state but
that counter, so that whatever CPU the bench measures in its own process is the client's: botocore,
pynamodb and our code, not a simulation of AWS.

    python bench/stub_aws.py PORT COUNT BODY_TEMPLATE [BODY_TEMPLATE ...]
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

_counter = itertools.count()
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects
    # The headers and the body leave in two writes: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers (40 ms a request), which made the bench's drain crawl.
    disable_nagle_algorithm = True
    count = 0
    template = ""
    templates: ClassVar[list[str]] = []
    calls: ClassVar[dict[str, int]] = {}  # operation -> requests since the last reset

    def log_message(self, *_args: Any) -> None:  # quiet
        return None

    def _answer(self, status: int, body: dict[str, Any], content_type: str = "application/x-amz-json-1.0") -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", "stub")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/reset/"):  # the bench's own call: a full queue again, of this many [of this one]
            count, _, k = self.path.removeprefix("/reset/").partition("/")
            with _lock:
                Handler.count, Handler.total = 0, int(count)
                Handler.template = Handler.templates[int(k or 0)]
                Handler.calls = {}
            self._answer(200, {}, "application/json")
        elif self.path == "/calls":  # the bench's own call: requests by operation since the reset
            with _lock:
                self._answer(200, dict(Handler.calls), "application/json")
        elif self.path.startswith("/v2/email/account"):
            self._count("ses:GetAccount")
            quota = {"Max24HourSend": 1e9, "MaxSendRate": 1e6, "SentLast24Hours": 0.0}
            self._answer(200, {"SendQuota": quota, "SendingEnabled": True}, "application/json")
        else:
            self._answer(404, {"message": "not stubbed"}, "application/json")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.startswith("/v2/email/outbound-emails"):
            self._count("ses:SendEmail")
            self._answer(200, {"MessageId": f"stub-{next(_counter)}"}, "application/json")
            return
        target = self.headers.get("X-Amz-Target", "")
        op = target.rsplit(".", 1)[-1]
        req = json.loads(raw or b"{}")
        self._count(("dynamodb:" if "DynamoDB" in target else "sqs:") + op)
        self._answer(200, self._json_op(op, req))

    def _count(self, op: str) -> None:
        with _lock:
            Handler.calls[op] = Handler.calls.get(op, 0) + 1

    def _json_op(self, op: str, req: dict[str, Any]) -> dict[str, Any]:
        if op == "UpdateItem":
            return {"Attributes": {}}
        if op == "BatchGetItem":
            return {"Responses": {t: [] for t in req.get("RequestItems", {})}, "UnprocessedKeys": {}}
        if op in ("GetItem", "PutItem", "DeleteItem", "ChangeMessageVisibility"):
            return {}
        if op == "GetQueueUrl":
            return {"QueueUrl": f"http://{self.headers['Host']}/123456789012/{req['QueueName']}"}
        if op == "ListQueueTags":
            return {"Tags": {"moonsend:tenant": "bench"}}
        if op == "DeleteMessageBatch":
            return {"Successful": [{"Id": e["Id"]} for e in req.get("Entries", [])], "Failed": []}
        if op == "ReceiveMessage":
            return {"Messages": self._receive(int(req.get("MaxNumberOfMessages", 1)))}
        return {}

    def _receive(self, n: int) -> list[dict[str, Any]]:
        with _lock:
            start = Handler.count
            taken = min(n, max(0, Handler.total - start))
            Handler.count += taken
        out = []
        for i in range(start, start + taken):
            body = Handler.template.replace("{i}", str(i))
            out.append(
                {
                    "MessageId": f"m{i}",
                    "ReceiptHandle": f"rh{i}",
                    "MD5OfBody": hashlib.md5(body.encode()).hexdigest(),
                    "Body": body,
                    "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1800000000000"},
                }
            )
        return out

    total = 0


def main() -> None:
    port, total, templates = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    Handler.total, Handler.template, Handler.templates = total, templates[0], templates
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
