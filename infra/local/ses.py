"""Emulator: an SES stand-in with SES's real behaviour, in front of moto's SES.

moto's SES checks identities and stores messages but never throttles and never enforces quotas. This
stand-in sits in the local gateway in front of it:

- every distinct access key id is its own SES account (a paid tenant brings its own AWS account):
  its identities live in a moto account of their own, so one tenant's verified sender is not
  another's;
- each account has a MaxSendRate enforced over any one-second window (a send over it fails as SES
  fails it: v1 `Throttling: Maximum sending rate exceeded.`, v2 HTTP 429 `TooManyRequestsException`),
  a daily quota (`Daily message quota exceeded.`), and a latency added to every send;
- GetSendQuota (v1) and GetAccount (v2) answer with the quota it enforces;
- every accepted email is written to the outbox: `<outbox>/<userId>/<campaignId>/<n>.eml` (the full
  MIME) and one JSON line per send in `<outbox>/sends.jsonl`;
- event publishing: a configuration set's SNS event destination (CreateConfigurationSetEventDestination,
  which moto lacks) is kept per account, and a send made with that configuration set publishes SES's
  `Send` event record to the destination's topic, a little after the send, as SES does.

Defaults are those of a new production SES account: 14 sends per second, 50,000 per day.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes
from email.header import decode_header, make_header
from email.message import EmailMessage, Message
from email.parser import BytesHeaderParser
from email.policy import SMTP, compat32
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from infra.local.ses_tenants import SesTenants

DEFAULT_MAX_SEND_RATE = 14.0
EVENT_PUBLISHERS = 8
DEFAULT_MAX_24H_SEND = 50_000.0
DEFAULT_ACCOUNT_ID = "123456789012"
TENANT_HEADER = "X-Moonsend-Tenant"
CAMPAIGN_HEADER = "X-Moonsend-Campaign"
DAY_S = 24 * 3600


@dataclass
class SesAccount:
    access_key: str
    account_id: str
    max_send_rate: float = DEFAULT_MAX_SEND_RATE
    max_24h_send: float = DEFAULT_MAX_24H_SEND
    latency_ms: float | None = None  # None: the stand-in's default
    refused: int = 0  # sends refused for rate or quota
    _recent: deque[float] = field(default_factory=deque)  # accepted sends, last second(s)
    _day: deque[float] = field(default_factory=deque)  # accepted sends, last 24 hours

    def window(self) -> tuple[float, int]:
        """The sliding window and the sends allowed in it (0.5/s: one per two seconds)."""
        if self.max_send_rate >= 1:
            return 1.0, int(self.max_send_rate)
        return 1.0 / self.max_send_rate, 1

    def sent_last_24h(self, now: float) -> int:
        while self._day and self._day[0] <= now - DAY_S:
            self._day.popleft()
        return len(self._day)

    def describe(self) -> dict[str, Any]:
        now = time.time()
        return {
            "accessKeyId": self.access_key,
            "accountId": self.account_id,
            "maxSendRate": self.max_send_rate,
            "max24HourSend": self.max_24h_send,
            "sentLast24Hours": self.sent_last_24h(now),
            "latencyMs": self.latency_ms,
        }


@dataclass
class Feedback:
    """An account's sends over the last 24 hours, and which bounce or complain (SES's mailbox simulator's
    addresses): its reputation rates, as the stand-in's SES reports them."""

    sends: deque[tuple[float, bool, bool]] = field(default_factory=deque)  # (when, bounced, complained)
    bounced: int = 0  # of `sends`, kept as they come and go (a soak's day is 100,000s of them)
    complained: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, at: float, to: list[str]) -> None:
        for address in to:
            local, _, domain = address.lower().partition("@")
            simulated = domain == SIMULATOR_DOMAIN
            bounced, complained = simulated and local.startswith("bounce"), simulated and local.startswith("complaint")
            with self._lock:
                self.sends.append((at, bounced, complained))
                self.bounced += bounced
                self.complained += complained

    def rates(self, now: float) -> tuple[int, float, float] | None:
        with self._lock:
            while self.sends and self.sends[0][0] <= now - DAY_S:
                _at, bounced, complained = self.sends.popleft()
                self.bounced -= bounced
                self.complained -= complained
            n = len(self.sends)
            return (n, self.bounced / n, self.complained / n) if n else None


class Refused(Exception):
    """A send the stand-in refuses the way SES would (throttling, quota)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "rate", "quota" or "transient" (a 500, as SES answers now and then)
        self.message = message


def safe_component(value: str) -> str:
    """An id made safe as one path name; ids that had to change get a hash so they stay apart."""
    cleaned = re.sub(r"[^A-Za-z0-9_.@+=-]", "_", value)[:100]
    if cleaned != value or cleaned in ("", ".", "..") or cleaned.startswith("."):
        digest = hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        cleaned = f"{cleaned.lstrip('.') or 'id'}~{digest}"
    return cleaned


class SesStandIn:
    def __init__(
        self,
        outbox: Path,
        *,
        latency_ms: float = 50.0,
        platform_access_key: str | None = None,
        default_max_send_rate: float = DEFAULT_MAX_SEND_RATE,
        default_max_24h_send: float = DEFAULT_MAX_24H_SEND,
        clock: Any = time.time,
        sleep: Any = time.sleep,
        region: str = "us-east-1",
    ) -> None:
        self.outbox = outbox
        self.region = region
        self.tenants = SesTenants(region)  # SES tenants (infra.local.ses_tenants), by account
        self.latency_ms = latency_ms
        self.platform_access_key = platform_access_key
        self.default_max_send_rate = default_max_send_rate
        self.default_max_24h_send = default_max_24h_send
        self._accounts: dict[str, SesAccount] = {}
        self._linked: dict[str, str] = {}  # access key -> the account of another key it was added to
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._counters: dict[tuple[str, str], int] = {}
        self._reputation: dict[str, Feedback] = {}  # account -> its sends and the simulator's feedback, a day
        self._clock = clock
        self._sleep = sleep
        self.outbox.mkdir(parents=True, exist_ok=True)
        # (account id, configuration set) -> {destination name: (event types, SNS topic ARN)}
        self._destinations: dict[tuple[str, str], dict[str, tuple[frozenset[str], str]]] = {}
        self.publish: Any = None  # (topic_arn, message) -> None; set by the stack
        self._events: Any = None  # a one-thread executor, so events never delay a send's answer
        self._unpublished = 0  # emails whose events are handed to the executor and not all published yet
        self._unpublished_lock = threading.Lock()
        # How long after a send its events are published. SES publishes within seconds, never in the send's own
        # millisecond: the cost bench sets a second, so that the drainer's own record comes first, as on AWS.
        self.event_delay_s = 0.0
        # Fault injection (the soak test): a refusal to answer a send with instead, by access key.
        self.fault: Callable[[str], Refused | None] | None = None

    # --- accounts --------------------------------------------------------------------------------
    def account_id_for(self, access_key: str) -> str:
        if not access_key or access_key == self.platform_access_key:
            return DEFAULT_ACCOUNT_ID
        if access_key in self._linked:
            return self._linked[access_key]
        digits = int(hashlib.sha256(access_key.encode()).hexdigest(), 16) % 10**12
        account = f"{digits:012d}"
        return "100000000000" if account == DEFAULT_ACCOUNT_ID else account

    def account(self, access_key: str) -> SesAccount:
        with self._lock:
            acct = self._accounts.get(access_key)
            if acct is None:
                acct = SesAccount(
                    access_key,
                    self.account_id_for(access_key),
                    self.default_max_send_rate,
                    self.default_max_24h_send,
                )
                self._accounts[access_key] = acct
            return acct

    def saved_state(self) -> dict[str, Any]:
        """What a restart keeps (infra.local.state): accounts with their limits and sends, keys, destinations."""
        with self._lock:
            return {
                "accounts": dict(self._accounts),
                "linked": dict(self._linked),
                "destinations": dict(self._destinations),
                "tenants": self.tenants,
            }

    def load_state(self, saved: dict[str, Any]) -> None:
        with self._lock:
            self._accounts.update(saved["accounts"])
            self._linked.update(saved["linked"])
            for key, destinations in saved["destinations"].items():
                self._destinations.setdefault(key, {}).update(destinations)
            if "tenants" in saved:
                self.tenants = saved["tenants"]

    def flush_events(self) -> None:
        """Publish every SES event still waiting (a stop for a save: none is lost)."""
        events, self._events = self._events, None
        if events is not None:
            events.shutdown(wait=True)

    def add_key(self, access_key: str, *, to_account_of: str) -> None:
        """A second access key of an existing account (a rotation): same account id, limits and counts."""
        shared = self.account(to_account_of)
        with self._lock:
            self._linked[access_key] = shared.account_id
            self._accounts[access_key] = shared

    def configure(
        self,
        access_key: str,
        *,
        max_send_rate: float | None = None,
        max_24h_send: float | None = None,
        latency_ms: float | None = None,
    ) -> SesAccount:
        acct = self.account(access_key)
        with self._lock:
            if max_send_rate is not None:
                if not max_send_rate > 0:
                    raise ValueError("maxSendRate must be positive")
                acct.max_send_rate = float(max_send_rate)
            if max_24h_send is not None:
                acct.max_24h_send = float(max_24h_send)
            if latency_ms is not None:
                acct.latency_ms = float(latency_ms)
        return acct

    # --- the send path ---------------------------------------------------------------------------
    def admit(self, access_key: str) -> float:
        """Count one send against the account, or refuse it; returns the accepted time."""
        acct = self.account(access_key)
        refusal = self.fault(access_key) if self.fault is not None else None
        with self._lock:
            if refusal is not None:
                acct.refused += 1
                raise refusal
            now = self._clock()
            if acct.sent_last_24h(now) >= acct.max_24h_send:
                acct.refused += 1
                raise Refused("quota", "Daily message quota exceeded.")
            span, allowed = acct.window()
            while acct._recent and acct._recent[0] <= now - span:
                acct._recent.popleft()
            if len(acct._recent) >= allowed:
                acct.refused += 1
                raise Refused("rate", "Maximum sending rate exceeded.")
            acct._recent.append(now)
            acct._day.append(now)
            return now

    def release(self, access_key: str, admitted_at: float) -> None:
        """Give back a send that SES went on to reject (it never counted)."""
        acct = self.account(access_key)
        with self._lock:
            for q in (acct._recent, acct._day):
                with contextlib.suppress(ValueError):
                    q.remove(admitted_at)

    def latency_for(self, access_key: str) -> float:
        acct = self.account(access_key)
        return (acct.latency_ms if acct.latency_ms is not None else self.latency_ms) / 1000.0

    # --- event publishing --------------------------------------------------------------------------
    def add_event_destination(self, access_key: str, configuration_set: str, body: bytes) -> None:
        """CreateConfigurationSetEventDestination (SES v2), for the caller's account."""
        d = json.loads(body or b"{}")
        dest = d.get("EventDestination", {})
        topic = (dest.get("SnsDestination") or {}).get("TopicArn")
        if not topic or not dest.get("Enabled", False):
            return
        types = frozenset(str(t).upper() for t in dest.get("MatchingEventTypes", []))
        key = (self.account_id_for(access_key), configuration_set)
        with self._lock:
            self._destinations.setdefault(key, {})[str(d.get("EventDestinationName", "default"))] = (types, topic)

    def event_destinations(self, access_key: str, configuration_set: str) -> dict[str, Any]:
        """GetConfigurationSetEventDestinations (SES v2): the caller's account's destinations of this set, in
        SES's response shape (only enabled SNS destinations are kept, so every one listed is enabled)."""
        with self._lock:
            kept = dict(self._destinations.get((self.account_id_for(access_key), configuration_set), {}))
        return {
            "EventDestinations": [
                {
                    "Name": name,
                    "Enabled": True,
                    "MatchingEventTypes": sorted(types),
                    "SnsDestination": {"TopicArn": topic},
                }
                for name, (types, topic) in sorted(kept.items())
            ]
        }

    def publish_send_event(
        self, access_key: str, configuration_set: str | None, raw_mime: bytes, to: list[str], message_id: str
    ) -> None:
        """Publish SES's events of an accepted email to the matching destinations of its configuration set.

        `Send` first; then what the receiving side says, as the SES mailbox simulator does:
        `bounce@simulator.amazonses.com` bounces (permanent), `complaint@...` is delivered and complains,
        anything else is delivered (into the outbox)."""
        if not configuration_set or self.publish is None:
            return
        account = self.account_id_for(access_key)
        with self._lock:
            destinations = list(self._destinations.get((account, configuration_set), {}).values())
        if not destinations:
            return
        base = send_event(account, configuration_set, raw_mime, to, message_id)
        if self._events is None:
            from concurrent.futures import ThreadPoolExecutor

            # Several publishers: SES publishes events within about a second of a send, and one thread
            # fell behind on this busy stack (the soak measured Send events handled ten minutes late,
            # past the claims that wait for them). One email's events stay in order, on one thread.
            self._events = ThreadPoolExecutor(EVENT_PUBLISHERS, thread_name_prefix="ses-events")
        todo = [
            (topic, json.dumps(record))
            for record in (base, *outcome_events(base))
            for types, topic in destinations
            if str(record["eventType"]).upper() in types
        ]
        if todo:
            with self._unpublished_lock:
                self._unpublished += 1
            self._events.submit(self._publish_all, todo, time.monotonic() + self.event_delay_s)

    @property
    def events_pending(self) -> int:
        """Emails whose events are not all published yet (the stack's idle checks count them as work left)."""
        return self._unpublished

    def _publish_all(self, todo: list[tuple[str, str]], due: float) -> None:
        assert self.publish is not None
        try:
            # Emails' events are submitted in the order of their due times: a publisher waiting for one holds
            # up none that is due sooner.
            wait_s = due - time.monotonic()
            if wait_s > 0:
                self._sleep(wait_s)
            for topic, message in todo:
                try:
                    self.publish(topic, message)
                except Exception as exc:  # the stack stopping, or SNS refusing: said, and the next event goes on
                    where = topic.rsplit(":", 1)[-1]
                    print(f"[ses] event not published to {where}: {exc}", file=sys.stderr, flush=True)
        finally:
            with self._unpublished_lock:
                self._unpublished -= 1

    def record(
        self, admitted_at: float, raw_mime: bytes, to: list[str], message_id: str, account: str = DEFAULT_ACCOUNT_ID
    ) -> Path:
        """Write an accepted email to the outbox and one line to sends.jsonl."""
        msg = read_headers(raw_mime)
        user = str(msg.get(TENANT_HEADER) or "unknown")
        campaign = str(msg.get(CAMPAIGN_HEADER) or "unknown")
        folder = self.outbox / safe_component(user) / safe_component(campaign)
        with self._file_lock:
            key = (user, campaign)
            if key not in self._counters:
                folder.mkdir(parents=True, exist_ok=True)
                self._counters[key] = sum(1 for _ in folder.glob("*.eml"))
            self._counters[key] += 1
            path = folder / f"{self._counters[key]}.eml"
            path.write_bytes(raw_mime)
            line = {
                "ts": int(admitted_at * 1000),
                "userId": user,
                "campaignId": campaign,
                "to": to[0] if len(to) == 1 else to,
                "messageId": message_id,
                "account": account,  # the SES account that sent it (the platform's for the free plan)
            }
            with (self.outbox / "sends.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        self._reputation.setdefault(account, Feedback()).add(admitted_at, to)
        return path

    def reputation_accounts(self) -> list[str]:
        """The accounts that sent through the stand-in."""
        return list(self._reputation)

    def reputation(self, account: str, now: float | None = None) -> tuple[int, float, float] | None:
        """The account's sends over the last 24 hours and its bounce and complaint rates over them, as SES
        reports them in CloudWatch (infra.local.ses_metrics); None before it sent anything."""
        feedback = self._reputation.get(account)
        return feedback.rates(self._clock() if now is None else now) if feedback else None


def read_headers(raw_mime: bytes) -> Message:
    """The header block only, values as written (the stand-in reads a few headers of every email it
    accepts; parsing whole messages with the modern email policy was a tenth of the local stack's CPU)."""
    return BytesHeaderParser(policy=compat32).parsebytes(raw_mime)


def _raw(value: Any) -> str:
    """A header's value as SES lists it in `mail.headers`: unfolded, encoded words left as they are."""
    return " ".join(str(value).split()) if value is not None else ""


def _decoded(value: Any) -> str:
    """A header's value as SES gives it in `commonHeaders`: unfolded, encoded words decoded."""
    return str(make_header(decode_header(_raw(value)))) if value else ""


def send_event(account: str, configuration_set: str, raw_mime: bytes, to: list[str], message_id: str) -> dict[str, Any]:
    """SES's event publishing record for a `Send` event (eventType, mail, send), as SES publishes it."""
    msg = read_headers(raw_mime)
    source = _decoded(msg.get("From"))
    address = source.rsplit("<", 1)[-1].rstrip(">").strip()
    now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"
    return {
        "eventType": "Send",
        "mail": {
            "timestamp": now,
            "source": address,
            "sourceArn": f"arn:aws:ses:us-east-1:{account}:identity/{address}",
            "sendingAccountId": account,
            "messageId": message_id,
            "destination": list(to),
            "headersTruncated": False,
            "headers": [{"name": k, "value": _raw(v)} for k, v in msg.items()],
            "commonHeaders": {
                "from": [source],
                "to": [_decoded(a) for a in (msg.get_all("To") or [])],
                "messageId": _raw(msg.get("Message-ID")),
                "subject": _decoded(msg.get("Subject")),
            },
            "tags": {"ses:configuration-set": [configuration_set], "ses:caller-identity": ["moonsend"]},
        },
        "send": {},
    }


SIMULATOR_DOMAIN = "simulator.amazonses.com"


def outcome_events(send: dict[str, Any]) -> list[dict[str, Any]]:
    """The Delivery, Bounce or Complaint records that follow a Send record (one recipient each)."""
    mail = send["mail"]
    out: list[dict[str, Any]] = []
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    for rcpt in mail["destination"]:
        local, _, domain = rcpt.lower().partition("@")
        one = {**mail, "destination": [rcpt]}
        if domain == SIMULATOR_DOMAIN and local.startswith("bounce"):
            bounced = {
                "emailAddress": rcpt,
                "action": "failed",
                "status": "5.1.1",
                "diagnosticCode": "smtp; 550 5.1.1 user unknown",
            }
            bounce = {
                "bounceType": "Permanent",
                "bounceSubType": "General",
                "bouncedRecipients": [bounced],
                "timestamp": now,
                "feedbackId": f"{uuid.uuid4().hex}-000000",
                "reportingMTA": "dsn; moonsend-local",
            }
            out.append({"eventType": "Bounce", "bounce": bounce, "mail": one})
            continue
        delivery = {
            "timestamp": now,
            "processingTimeMillis": 50,
            "recipients": [rcpt],
            "smtpResponse": "250 2.6.0 Message received",
            "reportingMTA": "moonsend-local",
        }
        out.append({"eventType": "Delivery", "delivery": delivery, "mail": one})
        if domain == SIMULATOR_DOMAIN and local.startswith("complaint"):
            complaint = {
                "complainedRecipients": [{"emailAddress": rcpt}],
                "timestamp": now,
                "feedbackId": f"{uuid.uuid4().hex}-000000",
                "userAgent": "moonsend-local",
                "complaintFeedbackType": "abuse",
                "arrivalDate": now,
            }
            out.append({"eventType": "Complaint", "complaint": complaint, "mail": one})
    return out


# --- the wire: SES v1 (query/XML) and v2 (REST/JSON) requests -------------------------------------


@dataclass(frozen=True)
class SendRequest:
    version: int
    raw_mime: bytes
    to: list[str]
    configuration_set: str | None = None
    tenant: str | None = None  # SES v2's TenantName

    def identity_arns(self, region: str, account: str) -> list[str]:
        """The identities SES would send this from: the From address's, and its domain's."""
        m = message_from_bytes(self.raw_mime, policy=SMTP)
        address = str(m.get("From", "")).rsplit("<", 1)[-1].rstrip(">").strip().lower()
        head = f"arn:aws:ses:{region}:{account}:identity"
        return [f"{head}/{address}", f"{head}/{address.rpartition('@')[2]}"]

    def configuration_set_arn(self, region: str, account: str) -> str | None:
        if not self.configuration_set:
            return None
        return f"arn:aws:ses:{region}:{account}:configuration-set/{self.configuration_set}"

    @property
    def bounces(self) -> bool:
        """To SES's mailbox simulator's bounce address (the stand-in's tenants count it against their policy)."""
        return any(a.lower().partition("@")[2] == SIMULATOR_DOMAIN and a.lower().startswith("bounce") for a in self.to)


def _v1_params(body: bytes) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8"), keep_blank_values=True).items()}


def _simple_mime(
    source: str,
    to: list[str],
    subject: str,
    html: str | None,
    text: str | None,
    headers: list[dict[str, str]] | None = None,
) -> bytes:
    msg = EmailMessage(policy=SMTP)
    msg["From"] = source
    msg["To"] = ", ".join(to)
    msg["Subject"] = subject
    for h in headers or []:
        msg[h["Name"]] = h["Value"]
    if text is not None:
        msg.set_content(text)
        if html is not None:
            msg.add_alternative(html, subtype="html")
    elif html is not None:
        msg.set_content(html, subtype="html")
    return msg.as_bytes()


def parse_send(path: str, body: bytes) -> SendRequest | None:
    """The email of a send request, or None when the request is not a send."""
    if path.rstrip("/") == "/v2/email/outbound-emails":
        d = json.loads(body or b"{}")
        dest = d.get("Destination", {})
        to = list(dest.get("ToAddresses", [])) + list(dest.get("CcAddresses", [])) + list(dest.get("BccAddresses", []))
        content = d.get("Content", {})
        if "Raw" in content:
            raw = base64.b64decode(content["Raw"]["Data"])
            if not to:
                m = message_from_bytes(raw, policy=SMTP)
                to = [str(a) for a in (m.get_all("To") or [])]
            return SendRequest(2, raw, to, d.get("ConfigurationSetName"), d.get("TenantName"))
        simple = content.get("Simple", {})
        b = simple.get("Body", {})
        return SendRequest(
            2,
            _simple_mime(
                d.get("FromEmailAddress", ""),
                to,
                simple.get("Subject", {}).get("Data", ""),
                b.get("Html", {}).get("Data"),
                b.get("Text", {}).get("Data"),
                simple.get("Headers"),
            ),
            to,
            d.get("ConfigurationSetName"),
            d.get("TenantName"),
        )
    if path in ("", "/"):
        p = _v1_params(body)
        action = p.get("Action")
        if action == "SendRawEmail":
            raw = base64.b64decode(p.get("RawMessage.Data", ""))
            to = [v for k, v in sorted(p.items()) if k.startswith("Destinations.member.")]
            if not to:
                m = message_from_bytes(raw, policy=SMTP)
                to = [str(a) for a in (m.get_all("To") or [])]
            return SendRequest(1, raw, to, p.get("ConfigurationSetName"))
        if action == "SendEmail":
            to = [v for k, v in sorted(p.items()) if k.startswith("Destination.ToAddresses.member.")]
            return SendRequest(
                1,
                _simple_mime(
                    p.get("Source", ""),
                    to,
                    p.get("Message.Subject.Data", ""),
                    p.get("Message.Body.Html.Data"),
                    p.get("Message.Body.Text.Data"),
                ),
                to,
            )
    return None


def is_quota_request(path: str, body: bytes) -> int:
    """1 for v1 GetSendQuota, 2 for v2 GetAccount, 0 otherwise."""
    if path.rstrip("/") == "/v2/email/account":
        return 2
    if path in ("", "/") and _v1_params(body).get("Action") == "GetSendQuota":
        return 1
    return 0


def refusal_response(version: int, refusal: Refused) -> tuple[int, dict[str, str], bytes]:
    request_id = str(uuid.uuid4())
    transient = refusal.kind == "transient"
    if version == 1:
        code = "InternalFailure" if transient else "Throttling"
        xml = (
            '<ErrorResponse xmlns="http://ses.amazonaws.com/doc/2010-12-01/"><Error>'
            f"<Type>{'Receiver' if transient else 'Sender'}</Type><Code>{code}</Code>"
            f"<Message>{refusal.message}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return 500 if transient else 400, {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}, xml.encode()
    code, status = {
        "rate": ("TooManyRequestsException", 429),
        "transient": ("InternalFailure", 500),
    }.get(refusal.kind, ("LimitExceededException", 400))
    body = json.dumps({"message": refusal.message}).encode()
    return (
        status,
        {
            "Content-Type": "application/json",
            "x-amzn-ErrorType": code,
            "x-amzn-RequestId": request_id,
        },
        body,
    )


def quota_response(version: int, acct: SesAccount) -> tuple[int, dict[str, str], bytes]:
    sent = acct.sent_last_24h(time.time())
    request_id = str(uuid.uuid4())
    if version == 1:
        xml = (
            '<GetSendQuotaResponse xmlns="http://ses.amazonaws.com/doc/2010-12-01/">'
            f"<GetSendQuotaResult><SentLast24Hours>{float(sent)}</SentLast24Hours>"
            f"<Max24HourSend>{acct.max_24h_send}</Max24HourSend>"
            f"<MaxSendRate>{acct.max_send_rate}</MaxSendRate></GetSendQuotaResult>"
            f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
            "</GetSendQuotaResponse>"
        )
        return 200, {"Content-Type": "text/xml"}, xml.encode()
    body = {
        "DedicatedIpAutoWarmupEnabled": False,
        "EnforcementStatus": "HEALTHY",
        "ProductionAccessEnabled": True,
        "SendingEnabled": True,
        "SendQuota": {
            "Max24HourSend": acct.max_24h_send,
            "MaxSendRate": acct.max_send_rate,
            "SentLast24Hours": float(sent),
        },
    }
    return (
        200,
        {"Content-Type": "application/json", "x-amzn-RequestId": request_id},
        json.dumps(body).encode(),
    )


def message_id_of(version: int, body: bytes) -> str:
    if version == 2:
        try:
            return str(json.loads(body)["MessageId"])
        except (ValueError, KeyError):
            return ""
    m = re.search(rb"<MessageId>([^<]+)</MessageId>", body)
    return m.group(1).decode() if m else ""
