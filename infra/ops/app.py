"""The operator's page: a small WSGI app served on loopback by `moonsend ops` (and `moonsend up`).

Nothing of it is on the stage's public API: it runs in the operator's own process, with the operator's own
credentials, and every read and action goes to AWS signed with them. Loopback is not a wall (every user and
every page of a browser on the machine reaches it), so:

- **A key in the link.** The process makes a random key when it starts and prints the link with it
  (`/sign-in?key=...`); the link sets an HttpOnly, SameSite=Strict cookie and leads to the page. Without the
  cookie every page answers 401 and says where the link is.
- **Its own host names only.** A request whose Host is not `127.0.0.1:<port>` or `localhost:<port>` is refused
  (421): a DNS name rebound to 127.0.0.1 by another site cannot read the page with the operator's cookie.
- **A CSRF token on every form**, an HMAC of the session with the process's key; a POST must carry it, and
  one whose Origin or Sec-Fetch-Site says it came from another site is refused before it is read.
- **The console's Content-Security-Policy** (scripts and styles from here only, nothing inline, no framing).
- **Two steps to act:** a link or a GET form leads to a page that says what the action will do; only its
  POST acts, and every action is recorded (infra.ops.actions), then the page shows its answer.
"""

from __future__ import annotations

import functools
import hmac
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from chalicelib.console import pages as console_pages
from chalicelib.core.contract import iso_ms
from chalicelib.stores.operator_log import OperatorAction
from chalicelib.stores.pauses import OWNER_NAMES
from infra.ops.actions import ACTIONS, Acted, OperatorActions
from infra.ops.overview import Overview
from infra.ops.view import confirmation, overview_context

HERE = Path(__file__).parent
COOKIE = "moonsend_ops"
MAX_FORM_BYTES = 16 * 1024
MAX_FORMS = 1000  # confirmation forms not yet sent, kept (the oldest forgotten first)
PAUSE_OWNERS = ("operator", "tenant")  # an operator pauses as itself or at the tenant's request
LOG_SHOWN = 25

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def _percent(rate: float) -> str:
    """0.0123 -> `1.23%`: two decimals, as complaint rates are read (SES reviews at 0.1%)."""
    return f"{rate * 100:.2f}%"


@functools.cache
def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(("html",), default=True),  # tenant text is always shown as text
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["asset"] = console_pages.asset_url
    env.filters["iso"] = lambda at: iso_ms(int(float(at) * 1000))
    env.filters["age"] = _age
    env.filters["figure"] = _figure
    env.filters["percent"] = _percent
    return env


def render(template: str, **context: Any) -> bytes:
    return _environment().get_template(template).render(**context).encode("utf-8")


class OpsApp:
    """The page, its confirmations and its actions; `read` gives the overview, `actions` act and log."""

    def __init__(
        self,
        read: Callable[[], Overview],
        actions: OperatorActions,
        *,
        stage: str,
        who: str,
        port: int,
        key: str | None = None,
    ) -> None:
        self._read = read
        self._actions = actions
        self.stage = stage
        self.who = who
        self.port = port
        self.key = key or secrets.token_urlsafe(32)
        self._sessions: set[str] = set()
        self._forms: OrderedDict[str, str] = OrderedDict()  # a confirmation form's one-time token -> its session
        self._lock = threading.Lock()

    @property
    def sign_in_path(self) -> str:
        return f"/sign-in?key={self.key}"

    # --- WSGI -----------------------------------------------------------------------------------------------
    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        answer = self.answer(environ)
        headers = list({**console_pages.PAGE_HEADERS, **dict(answer.headers)}.items())
        headers.append(("Content-Length", str(len(answer.body))))
        start_response(f"{answer.status} {HTTPStatus(answer.status).phrase}", headers)
        return [answer.body]

    def answer(self, environ: Environ) -> Answer:
        try:
            return self._answer(environ)
        except Exception as exc:  # an AWS error, a throttled read: said on a page of ours, not wsgiref's bare 500
            return self._message(500, "Not read", f"The page could not be made: {type(exc).__name__}: {exc}")

    def _answer(self, environ: Environ) -> Answer:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        if not self._our_host(environ.get("HTTP_HOST", "")):
            return self._message(421, "Not this host", "This page answers at 127.0.0.1 and localhost only.")
        if path.startswith("/console/static/") and method == "GET":
            return self._static(path.rsplit("/", 1)[-1])
        if path == "/sign-in" and method == "GET":
            return self._sign_in(_query(environ).get("key", ""))
        session, rest = self._session(environ, path)
        if session is None:
            return self._message(
                401, "Sign in with the link", "Open the link `moonsend ops` printed when it started: it holds the key."
            )
        if method == "GET" and rest == "/":
            return self._overview(session, _query(environ).get("done"))
        if method == "GET" and rest == "/confirm":
            return self._confirm(session, _query(environ))
        if method == "POST" and rest == "/act":
            return self._act(session, environ)
        return self._message(404, "Not found", "Nothing here.")

    # --- sign-in and the checks of every request ------------------------------------------------------------
    def _our_host(self, host: str) -> bool:
        return host in {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}

    def _origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _sign_in(self, given: str) -> Answer:
        if not hmac.compare_digest(given.encode(), self.key.encode()):
            return self._message(401, "Sign in with the link", "That key is not this process's.")
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions.add(sid)
        # A browser sends a cookie of 127.0.0.1 to every port of it: the cookie's path, the session's own
        # (which no other server on the machine knows), keeps it to this page.
        cookie = f"{COOKIE}={sid}; Path={base_of(sid)}/; HttpOnly; SameSite=Strict"
        return Answer(303, b"", (("Location", f"{base_of(sid)}/"), ("Set-Cookie", cookie)))

    def _session(self, environ: Environ, path: str) -> tuple[str | None, str]:
        """The session whose path the request is under and whose cookie it carries, and the path after it."""
        if not path.startswith("/s/"):
            return None, path
        sid, _, rest = path[3:].partition("/")
        with self._lock:
            known = sid in self._sessions
        if not known:
            return None, path
        for part in environ.get("HTTP_COOKIE", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and hmac.compare_digest(value.encode(), sid.encode()):
                return sid, "/" + rest
        return None, path

    def _form_token(self, session: str) -> str:
        """A token for one confirmation form: good for one POST of this session (a second click acts on nothing)."""
        token = secrets.token_hex(32)
        with self._lock:
            self._forms[token] = session
            while len(self._forms) > MAX_FORMS:
                self._forms.popitem(last=False)
        return token

    def _spend(self, token: str, session: str) -> bool:
        with self._lock:
            owner = self._forms.pop(token, None)
        return owner is not None and hmac.compare_digest(owner.encode(), session.encode())

    def _cross_site(self, environ: Environ) -> bool:
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and origin not in (self._origin(), f"http://localhost:{self.port}"):
            return True
        return environ.get("HTTP_SEC_FETCH_SITE", "same-origin") not in ("same-origin", "none")

    # --- pages ----------------------------------------------------------------------------------------------
    def _page(self, status: int, template: str, session: str, **context: Any) -> Answer:
        body = render(
            template,
            stage=self.stage,
            who=self.who,
            base=base_of(session),
            actions=ACTIONS,
            owner_names=OWNER_NAMES,
            **context,
        )
        return Answer(status, body)

    def _message(self, status: int, title: str, message: str) -> Answer:
        body = render("ops_message.html", stage="", who="", base="", title=title, message=message)
        return Answer(status, body)

    def _static(self, name: str) -> Answer:
        found = console_pages.static_file(name)
        if found is None:
            return self._message(404, "Not found", "No such file.")
        data, kind = found
        return Answer(200, data, (("Content-Type", kind), ("Cache-Control", "public, max-age=31536000, immutable")))

    def _overview(self, session: str, done_key: str | None) -> Answer:
        o = self._read()
        log, log_problem = self._log(done_key)
        done = next((e for e in log if e.key == done_key), None) if done_key else None
        context = overview_context(o)
        return self._page(
            200, "ops.html", session, title="The stage", done=done, log=log, log_problem=log_problem, **context
        )

    def _log(self, done_key: str | None) -> tuple[list[OperatorAction], str | None]:
        """The operator log's newest entries, and the one just made (it may be older than those, or not yet
        listed by an eventually consistent query); a problem reading it said, not raised: the rest of the page
        is worth more than the log."""
        try:
            log = self._actions.newest(LOG_SHOWN)
            if done_key and not any(e.key == done_key for e in log):
                entry = self._actions.entry(done_key)
                log = [entry, *log] if entry is not None else log
        except Exception as exc:
            return [], f"The operator log could not be read: {type(exc).__name__}: {exc}"
        return log, None

    def _confirm(self, session: str, q: dict[str, str]) -> Answer:
        shown = confirmation(q, self._actions)
        if shown is None:
            return self._message(400, "Nothing to confirm", "That is no action this page takes.")
        return self._page(
            200, "ops_confirm.html", session, title=shown["question"], csrf=self._form_token(session), **shown
        )

    def _act(self, session: str, environ: Environ) -> Answer:
        if self._cross_site(environ):
            return self._message(403, "Refused", "A form of another site cannot act here.")
        form = _form(environ)
        if form is None:
            return self._message(400, "Refused", "The form is too large, or not a form.")
        if not self._spend(form.get("csrf", ""), session):
            return self._message(
                403, "Not done", "This form was sent already, or is not this page's: go back to the page and look."
            )
        acted = self._do(form)
        if acted is None:
            return self._message(400, "Nothing done", "That is no action this page takes, or a field is wrong.")
        where = f"{base_of(session)}/?done={quote(acted.entry.key)}" if acted.entry else f"{base_of(session)}/"
        return Answer(303, b"", (("Location", where),))

    def _do(self, form: dict[str, str]) -> Acted | None:
        action, tenant = form.get("action", ""), form.get("tenant", "")
        owner = form.get("owner", "")
        a = self._actions
        if action == "pause" and tenant and owner in PAUSE_OWNERS:
            return a.pause(tenant, form.get("reason", ""), owner)
        if action == "resume" and tenant and (owner == "all" or owner in OWNER_NAMES):
            return a.resume(tenant, None if owner == "all" else owner)
        if action == "cancel" and tenant and form.get("campaign"):
            return a.cancel(tenant, form["campaign"])
        if action == "replay":
            return a.replay(None)
        if action == "assign-from" and tenant and form.get("address"):
            return a.assign_from(tenant, form["address"])
        return None


def base_of(session: str) -> str:
    """Where a session's pages are: under its own path."""
    return f"/s/{session}"


def _query(environ: Environ) -> dict[str, str]:
    try:
        return {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", ""), max_num_fields=20).items()}
    except ValueError:  # more fields than any page of ours sends
        return {}


def _form(environ: Environ) -> dict[str, str] | None:
    kind = environ.get("CONTENT_TYPE", "").split(";")[0].strip()
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if kind != "application/x-www-form-urlencoded" or length > MAX_FORM_BYTES:
        return None
    raw = environ["wsgi.input"].read(length).decode("utf-8", "replace")
    try:
        return {k: v[0] for k, v in parse_qs(raw, max_num_fields=20).items()}
    except ValueError:
        return None
