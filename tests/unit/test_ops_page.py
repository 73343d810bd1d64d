"""The operator's page as a browser and a hostile page on another site reach it: its key, its host names, its
CSRF token, its policy, tenant text as text, and the two steps before every action (infra.ops.app)."""

from __future__ import annotations

import io
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest

from chalicelib.stores.operator_log import OperatorAction
from chalicelib.stores.pauses import Pause
from infra.ops.actions import Acted
from infra.ops.app import OpsApp, _age
from infra.ops.overview import Overview, QueueLine, TenantLine, WebhookLine

PORT = 8025
HOSTILE = '<img src=x onerror=alert(1)>"><script>alert(2)</script>'


class Actions:
    """What the page asks of the operator's actions, kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.log: list[OperatorAction] = []

    def _acted(self, action: str, target: str, detail: str | None = None) -> Acted:
        entry = OperatorAction(
            int(time.time() * 1000),
            "arn:aws:iam::1:user/op",
            action,
            target,
            detail,
            True,
            "done",
            "page",
            f"{time.time_ns() // 1_000_000:015d}#k{len(self.log)}",  # as the log names an entry: a `#` in it
        )
        self.log.insert(0, entry)
        return Acted(True, "done", entry)

    def pause(self, user: str, reason: str, owner: str = "operator") -> Acted:
        self.calls.append(("pause", user, reason, owner))
        return self._acted("pause", user, reason)

    def resume(self, user: str, owner: str | None = None) -> Acted:
        self.calls.append(("resume", user, owner))
        return self._acted("resume", user)

    def cancel(self, user: str, campaign: str) -> Acted:
        self.calls.append(("cancel", user, campaign))
        return self._acted("cancel", f"{user}/{campaign}")

    def replay(self, function: str | None = None) -> Acted:
        self.calls.append(("replay", function))
        return self._acted("replay", "every function")

    def assign_from(self, user: str, address: str) -> Acted:
        self.calls.append(("assign-from", user, address))
        return self._acted("assign-from", user, address)

    def newest(self, limit: int = 50) -> list[OperatorAction]:
        return self.log[:limit]

    def entry(self, key: str) -> OperatorAction | None:
        return next((e for e in self.log if e.key == key), None)

    def pauses_of(self, user: str) -> tuple[Pause, ...] | None:
        return (Pause("guard", "reputation guard: bounce rate 6%", 1),) if user == HOSTILE else None


def overview() -> Overview:
    now = time.time()
    tenant = TenantLine(
        HOSTILE,
        "paid",
        14.0,
        QueueLine("moonsend-local-t-x", 3, 0, 0, 42.0, 0),
        (Pause("guard", f"reputation guard: {HOSTILE}", 1_700_000_000_000),),
        None,
        600,
        {int(now) // 60 * 60 - 60: 600},
    )
    return Overview(
        at=now,
        stage="local",
        tenants=[tenant],
        tenants_not_shown=0,
        free_queue=QueueLine("moonsend-local-free", 0, 0, 0),
        free_rate=10.0,
        free_cap=300,
        dead_letters=[QueueLine("moonsend-local-dlq", 2, 0, 0, 90.0)],
        failed_invocations=QueueLine("moonsend-local-failed-invocations", 1, 0, 0, 5.0),
        webhooks=[WebhookLine(HOSTILE, "ep_1", "https://hooks.example/x", HOSTILE, now, 12, False)],
        sends_per_minute=[(int(now) // 60 * 60 - 60 * (60 - i), 600 if i == 59 else 0) for i in range(61)],
    )


@pytest.fixture
def page() -> tuple[OpsApp, Actions]:
    actions = Actions()
    return OpsApp(overview, actions, stage="local", who="arn:aws:iam::1:user/op", port=PORT, key="k" * 43), actions  # type: ignore[arg-type]


def ask(app: OpsApp, method: str, path: str, *, cookie: str = "", body: bytes = b"", **headers: str) -> Any:
    path, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "HTTP_HOST": headers.pop("host", f"127.0.0.1:{PORT}"),
        "HTTP_COOKIE": cookie,
        "CONTENT_TYPE": headers.pop("content_type", "application/x-www-form-urlencoded"),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        **{f"HTTP_{k.upper()}": v for k, v in headers.items()},
    }
    return app.answer(environ)


@dataclass(frozen=True)
class Signed:
    """What a browser keeps after the link: the cookie, and the session's path it is sent to."""

    cookie: str
    base: str


def signed_in(app: OpsApp) -> Signed:
    answer = ask(app, "GET", f"/sign-in?key={app.key}")
    assert answer.status == 303
    headers = dict(answer.headers)
    cookie, base = headers["Set-Cookie"], headers["Location"].rstrip("/")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert f"Path={base}/" in cookie and base.startswith("/s/") and len(base) > 30  # no other server gets it
    return Signed(cookie.split(";", 1)[0], base)


def csrf_of(body: bytes) -> str:
    found = re.search(rb'name="csrf" value="([0-9a-f]+)"', body)
    assert found, body
    return found[1].decode()


def test_without_the_links_key_nothing_of_the_stage_is_shown(page):
    app, _ = page
    for path in ("/", "/confirm?action=replay", "/s/guessed/"):
        answer = ask(app, "GET", path)
        assert answer.status == 401 and b"moonsend-local" not in answer.body and b"arn:" not in answer.body
    assert ask(app, "GET", "/sign-in?key=wrong").status == 401
    me = signed_in(app)
    assert ask(app, "GET", me.base + "/").status == 401  # the session's path without its cookie
    assert ask(app, "GET", "/s/guessed/", cookie="moonsend_ops=guessed").status == 401
    other = signed_in(app)
    assert ask(app, "GET", other.base + "/", cookie=me.cookie).status == 401  # one session's cookie, another's path
    assert ask(app, "POST", me.base + "/act", body=b"action=replay").status == 401


def test_another_host_name_is_refused_even_with_the_cookie(page):
    app, _ = page
    me = signed_in(app)
    # A site whose name was rebound to 127.0.0.1 reaches the port with its own Host.
    assert ask(app, "GET", me.base + "/", cookie=me.cookie, host=f"rebound.example:{PORT}").status == 421
    assert ask(app, "GET", me.base + "/", cookie=me.cookie, host="localhost:8025").status == 200


def test_the_page_shows_tenant_text_as_text_under_the_consoles_policy(page):
    app, _ = page
    me = signed_in(app)
    answer = ask(app, "GET", me.base + "/", cookie=me.cookie)
    assert answer.status == 200
    body = answer.body.decode()
    assert HOSTILE not in body and "&lt;script&gt;alert(2)&lt;/script&gt;" in body
    assert "<script>alert" not in body and "onerror=alert(1)>" not in body
    for shown in ("moonsend-local-dlq", "the reputation guard", "42 s", "1 min 30 s", "Replay…", "10"):
        assert shown in body, shown
    assert f'data-refresh="{me.base}/"' in body  # the overview follows the stage
    assert "<form" not in body.split('id="overview"', 1)[1].split('id="more-h"', 1)[0]  # links only in it
    assert 'href="/confirm' not in body and f'href="{me.base}/confirm?' in body  # every link in the session


def test_every_answer_carries_the_consoles_headers():
    from chalicelib.console.pages import CSP

    app = OpsApp(overview, Actions(), stage="local", who="op", port=PORT)  # type: ignore[arg-type]
    started: list[Any] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_HOST": f"127.0.0.1:{PORT}"}
    body = app(environ, lambda *a: started.append(a))
    status, headers = started[0]
    assert status.startswith("401") and b"".join(body)
    h = dict(headers)
    assert h["Content-Security-Policy"] == CSP and "frame-ancestors 'none'" in CSP
    assert h["X-Content-Type-Options"] == "nosniff" and h["Cache-Control"] == "no-store"


def test_a_stage_that_cannot_be_read_is_said_on_a_page_of_its_own_and_a_log_that_cannot_on_the_page():
    def broken() -> Overview:
        raise RuntimeError("AccessDenied: cloudwatch:GetMetricData")

    actions = Actions()
    app = OpsApp(broken, actions, stage="local", who="op", port=PORT)  # type: ignore[arg-type]
    me = signed_in(app)
    answer = ask(app, "GET", me.base + "/", cookie=me.cookie)
    assert answer.status == 500 and b"AccessDenied: cloudwatch:GetMetricData" in answer.body
    actions.newest = lambda limit=50: (_ for _ in ()).throw(RuntimeError("ResourceNotFoundException"))  # type: ignore[method-assign]
    app = OpsApp(overview, actions, stage="local", who="op", port=PORT)  # type: ignore[arg-type]
    me = signed_in(app)
    answer = ask(app, "GET", me.base + "/", cookie=me.cookie)
    assert answer.status == 200 and b"The operator log could not be read" in answer.body


@pytest.mark.parametrize(
    ("query", "fields", "call"),
    [
        (
            {"action": "pause", "tenant": "acme"},
            {"reason": "abuse report 42", "owner": "operator"},
            ("pause", "acme", "abuse report 42", "operator"),
        ),
        ({"action": "resume", "tenant": HOSTILE}, {"owner": "guard"}, ("resume", HOSTILE, "guard")),
        ({"action": "resume", "tenant": "acme"}, {"owner": "all"}, ("resume", "acme", None)),
        ({"action": "cancel", "tenant": "acme", "campaign": "spring"}, {}, ("cancel", "acme", "spring")),
        ({"action": "replay"}, {}, ("replay", None)),
        (
            {"action": "assign-from", "tenant": "acme", "address": "news@acme.example"},
            {},
            ("assign-from", "acme", "news@acme.example"),
        ),
    ],
)
def test_each_action_is_confirmed_then_taken_once_and_its_answer_shown(page, query, fields, call):
    app, actions = page
    me = signed_in(app)
    confirm = ask(app, "GET", me.base + "/confirm?" + urlencode(query), cookie=me.cookie)
    assert confirm.status == 200 and actions.calls == []  # the confirmation changes nothing
    form = urlencode({**query, **fields, "csrf": csrf_of(confirm.body)}).encode()
    origin = f"http://127.0.0.1:{PORT}"
    acted = ask(app, "POST", me.base + "/act", cookie=me.cookie, body=form, origin=origin)
    assert acted.status == 303 and actions.calls == [call]
    location = dict(acted.headers)["Location"]
    assert location.startswith(me.base + "/?done=")
    shown = ask(app, "GET", location, cookie=me.cookie).body.decode()
    assert 'role="status"' in shown and "Done" in shown
    again = ask(app, "POST", me.base + "/act", cookie=me.cookie, body=form, origin=origin)
    assert again.status == 403 and actions.calls == [call]  # a second click acts on nothing


def test_a_form_from_another_site_or_without_the_token_acts_on_nothing(page):
    app, actions = page
    me = signed_in(app)

    def token() -> str:
        return csrf_of(ask(app, "GET", me.base + "/confirm?action=replay", cookie=me.cookie).body)

    def post(body: bytes, **headers: str) -> int:
        return ask(app, "POST", me.base + "/act", cookie=me.cookie, body=body, **headers).status

    form = urlencode({"action": "replay", "csrf": token()}).encode()
    assert post(form, origin="https://evil.example") == 403
    assert post(form, sec_fetch_site="cross-site") == 403
    assert post(urlencode({"action": "replay"}).encode()) == 403
    other = signed_in(app)
    theirs = csrf_of(ask(app, "GET", other.base + "/confirm?action=replay", cookie=other.cookie).body)
    assert post(urlencode({"action": "replay", "csrf": theirs}).encode()) == 403  # another session's form
    big = urlencode({"action": "replay", "csrf": token(), "x": "a" * 20_000}).encode()
    assert post(big) == 400
    assert post(b'{"action": "replay"}', content_type="application/json") == 400
    assert actions.calls == []


def test_a_confirmation_of_no_action_or_a_wrong_field_is_refused(page):
    app, actions = page
    me = signed_in(app)
    for query in ("action=drop-table", "action=pause", "action=cancel&tenant=acme", "action=assign-from&tenant=a"):
        assert ask(app, "GET", f"{me.base}/confirm?{query}", cookie=me.cookie).status == 400, query
    many = "&".join(f"f{i}=x" for i in range(50))
    assert ask(app, "GET", f"{me.base}/confirm?{many}", cookie=me.cookie).status == 400
    for fields in (
        {"action": "cancel", "tenant": "acme"},
        {"action": "resume", "tenant": "acme", "owner": "everyone"},  # never read as "every owner's"
        {"action": "pause", "tenant": "acme", "owner": "guard"},  # the guard pauses by itself
    ):
        token = csrf_of(ask(app, "GET", me.base + "/confirm?action=replay", cookie=me.cookie).body)
        form = urlencode({**fields, "csrf": token}).encode()
        assert ask(app, "POST", me.base + "/act", cookie=me.cookie, body=form).status == 400, fields
    assert actions.calls == []


def test_an_age_reads_in_the_largest_units_that_matter():
    ages = [_age(s) for s in (None, 4.2, 125, 3 * 3600 + 600, 2 * 86400 + 7200)]
    assert ages == ["-", "4 s", "2 min 5 s", "3 h 10 min", "2 d 2 h"]


def test_a_queue_is_flagged_when_email_waits_with_no_drain_or_goes_slower_than_half_its_rate():
    def line(queue: QueueLine, sent_last_minute: int | None) -> TenantLine:
        return TenantLine("t", "paid", 10.0, queue, (), None, sent_last_minute)

    assert line(QueueLine("q", 50, 0, 0, 20.0, 0), 0).needs_a_look(300) == ["email waiting, no drain"]
    # A big campaign at its rate: the oldest waited long, and the last minute went at 9.5 a second.
    assert line(QueueLine("q", 5000, 10, 0, 400.0, 1), 570).needs_a_look(300) == []
    # A drain that holds the queue and sends nothing (dead holding its lease), or SES throttling it to 2/s.
    assert line(QueueLine("q", 5, 0, 0, 130.0, 1), 0).needs_a_look(300) == ["behind its rate"]
    assert line(QueueLine("q", 900, 10, 0, 300.0, 1), 120).needs_a_look(300) == ["behind its rate"]
    # Not yet two minutes of waiting: the drain may have just begun.
    assert line(QueueLine("q", 5, 0, 0, 60.0, 1), 0).needs_a_look(300) == []
    capped = TenantLine("t", "free", 10.0, None, (), used_today=300)
    assert capped.needs_a_look(300) == ["daily cap reached"]
