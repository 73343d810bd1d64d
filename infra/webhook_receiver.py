"""A webhook receiver on loopback, as the Standard Webhooks specification asks a receiver to be.

Used by the demo, the webhooks bench and the tests: it answers each request with the status it is given
(the last one for every request after), and, with the endpoint's secret, verifies every request it
accepts (2xx) with the specification's own library and keeps each `webhook-id`'s events once, counting a
repeat instead of keeping it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook


class WebhookReceiver:
    def __init__(
        self,
        statuses: Iterable[int] = (200,),
        secret: str | None = None,
        before_answer: Callable[[dict[str, str]], None] | None = None,
    ) -> None:
        self.statuses = list(statuses)
        self.secret = secret
        self.before_answer = before_answer  # called with each request's headers before it is answered
        self.requests: list[tuple[dict[str, str], str]] = []
        self.accepted: dict[str, list[dict[str, Any]]] = {}  # webhook-id -> its events, once
        self.arrived: dict[str, float] = {}  # event id -> when it first arrived (epoch seconds)
        self.repeats: list[str] = []  # webhook-ids accepted again
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="webhook-receiver").start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                headers = {k.lower(): v for k, v in self.headers.items()}
                if receiver.before_answer:
                    receiver.before_answer(headers)
                status = receiver._take(headers, body)
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def _take(self, headers: dict[str, str], body: str) -> int:
        with self.lock:
            self.requests.append((headers, body))
            status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
            if self.secret and 200 <= status < 300:
                payload = Webhook(self.secret).verify(body, headers)  # raises for a request not ours
                wid = headers["webhook-id"]
                if wid in self.accepted:
                    self.repeats.append(wid)
                    return status
                events = payload["data"]["events"] if payload.get("type") == "moonsend.events" else []
                self.accepted[wid] = events
                now = time.time()
                for e in events:
                    self.arrived.setdefault(str(e["id"]), now)
            return status

    def events(self, campaign: str | None = None) -> list[tuple[str, str]]:
        """(type, recipient) of every event accepted, of one campaign or all, sorted."""
        with self.lock:
            return sorted(
                (e["type"], e["recipient"])
                for events in self.accepted.values()
                for e in events
                if campaign is None or e["campaignId"] == campaign
            )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
