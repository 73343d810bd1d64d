"""Settings read from the environment, the only thing that differs between stages.

Chalice puts each stage's `environment_variables` (`.chalice/config.json`) into each function's Lambda
environment; whatever else runs the functions gives them the same variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from chalicelib.core.resources import (
    SEND_VISIBILITY_TIMEOUT_S,
    WEBHOOKS_MAX_RECEIVE_COUNT,
    Resources,
    resources_for,
)
from chalicelib.core.webhook_contract import RETRY_WAITS_S

APP_NAME = "moonsend"
MIN_CLAIM_HOLD_S = 2 * SEND_VISIBILITY_TIMEOUT_S
DRAINER_MAX_RATE = 100


@dataclass(frozen=True)
class Settings:
    stage: str
    region: str
    account_id: str
    free_rate_per_second: float
    # The most a paid tenant may ask for; SES's own MaxSendRate caps it further.
    max_rate_per_second: float
    # Stop draining when the Lambda has less than this left, and hand on to a fresh invocation.
    deadline_margin_ms: int
    # How long one receive waits for messages; two empty polls in a row end a drain.
    long_poll_seconds: int
    # A queued email larger than this goes to S3, with a pointer on the queue.
    payload_threshold_bytes: int = 256 * 1024
    # Emails one free-plan tenant may queue per UTC day (0: no cap).
    free_daily_cap: int = 300
    # Send with SES's event publishing through the stage's configuration set (False: without).
    ses_events: bool = True
    # Give each tenant queue the design's not-empty CloudWatch alarm, publishing to SendEmails ($0.10 a queue
    # and month, however idle). Off by default (issue 53): the writer's direct start, the sweeper's minute
    # and a drain's stay for the email it put back (`put_back_stay_s`) start every drain the alarm would.
    queue_alarms: bool = False
    # A drain with nothing left to receive stays while email it put back for later (a throttled copy, a
    # back-off, a claim to wait out) comes due within this many seconds, and sends it then.
    put_back_stay_s: float = 60.0
    # Where the app's HTTP routes are (links in emails point there), and the key that signs those links:
    # given locally; on AWS the URL comes from the stack and the key from Secrets Manager.
    # None where the function makes no links (the API's own function only checks them).
    api_url: str | None = None
    link_secret: str | None = None
    # Where links in emails point instead of `api_url`, when set: a custom domain mapped to the stage's API
    # (API Gateway), so that links already sent outlive the stage's execute-api host.
    link_base_url: str | None = None
    # The reputation guard: pause a tenant whose permanent bounces or complaints pass these rates over
    # the window (once it has sent at least `reputation_min_sent` in it).
    bounce_limit: float = 0.05
    complaint_limit: float = 0.001
    reputation_window_days: int = 7
    reputation_min_sent: int = 200
    # Scheduled email is released onto its queue this long before it is due (SQS delays it until then);
    # a campaign scheduled less than twice this ahead goes straight onto the queue, delayed.
    schedule_lead_s: float = 90.0
    # A tenant queue (and its alarm) unused for this many days is removed; the next send recreates it.
    idle_queue_days: int = 14
    # How long a send's claim on a recipient holds (chalicelib.send.drainer): the time SES's Send event has to
    # arrive if the drainer died after SES accepted the email. At least twice the send queues' visibility
    # timeout (10 min); shorter, a redelivered copy could be sent before the event that would stop it.
    claim_hold_s: float = 1800.0
    # The most one drainer sends a second; a tenant whose rate is higher is drained by several at once
    # (chalicelib.core.drainer_shares). About 0.7 of what one drainer's CPU allows: measured, a send costs
    # 3.9 ms of CPU (bench/cpu_per_email.py), and send_emails at 1,024 MB has about 0.58 of a vCPU.
    drainer_max_rate: int = DRAINER_MAX_RATE
    # The waits before each retry of a webhook delivery (seconds, each at most SQS's 12 h of invisibility).
    # The local stage's are seconds, so that a disabled endpoint can be seen in a test.
    webhook_retry_s: tuple[int, ...] = RETRY_WAITS_S
    # The reputation policy each new SES tenant of the platform's account is given (chalicelib.stores.ses_tenants):
    # standard (SES pauses it on a high-impact finding), strict (on any finding) or none.
    ses_tenant_policy: str = "standard"
    # Whether webhooks may go to a receiver on this machine (`http`, loopback addresses): for a stack whose
    # functions run beside the tests and the demo. No deployed stage's template sets it.
    webhook_allow_loopback: bool = False
    # How long a tenant's recorded events stay readable with `GET /events` (chalicelib.stores.event_log).
    events_retention_days: int = 30
    # A campaign's counters are recounted from its ledger once its last change is this old (chalicelib.jobs.recount):
    # longer than a count may take to land (BufferedStats' STALE_S) and than any function's timeout. Only the
    # local stage's tests, which kill nothing late, shorten it.
    recount_settle_s: float = 900.0
    # The From address of the console's sign-in links and invitations, in the platform's SES account (a
    # verified identity: `moonsend deploy` checks it). None: the console signs in with API keys only.
    console_from: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        return cls(
            stage=e.get("MOONSEND_STAGE", "dev"),
            region=e.get("AWS_REGION") or e.get("AWS_DEFAULT_REGION") or "us-east-1",
            account_id=e.get("MOONSEND_ACCOUNT_ID", "123456789012"),
            free_rate_per_second=float(e.get("MOONSEND_FREE_RATE", "10")),
            max_rate_per_second=float(e.get("MOONSEND_MAX_RATE", "1000")),
            deadline_margin_ms=int(e.get("MOONSEND_DEADLINE_MARGIN_MS", "20000")),
            long_poll_seconds=int(e.get("MOONSEND_LONG_POLL_SECONDS", "1")),
            payload_threshold_bytes=int(e.get("MOONSEND_PAYLOAD_THRESHOLD_BYTES", str(256 * 1024))),
            free_daily_cap=int(e.get("MOONSEND_FREE_DAILY_CAP", "300")),
            ses_events=_flag(e, "MOONSEND_SES_EVENTS", True),
            queue_alarms=_flag(e, "MOONSEND_QUEUE_ALARMS", False),
            put_back_stay_s=float(e.get("MOONSEND_PUT_BACK_STAY_S", "60")),
            api_url=e.get("MOONSEND_API_URL") or None,
            link_secret=e.get("MOONSEND_LINK_SECRET") or None,
            link_base_url=e.get("MOONSEND_LINK_BASE_URL") or None,
            bounce_limit=float(e.get("MOONSEND_BOUNCE_LIMIT", "0.05")),
            complaint_limit=float(e.get("MOONSEND_COMPLAINT_LIMIT", "0.001")),
            reputation_window_days=int(e.get("MOONSEND_REPUTATION_WINDOW_DAYS", "7")),
            reputation_min_sent=int(e.get("MOONSEND_REPUTATION_MIN_SENT", "200")),
            schedule_lead_s=float(e.get("MOONSEND_SCHEDULE_LEAD_S", "90")),
            idle_queue_days=int(e.get("MOONSEND_IDLE_QUEUE_DAYS", "14")),
            claim_hold_s=max(MIN_CLAIM_HOLD_S, float(e.get("MOONSEND_CLAIM_HOLD_S", "1800"))),
            drainer_max_rate=max(1, int(e.get("MOONSEND_DRAINER_MAX_RATE", str(DRAINER_MAX_RATE)))),
            webhook_retry_s=_waits(e.get("MOONSEND_WEBHOOK_RETRY_S")),
            ses_tenant_policy=e.get("MOONSEND_SES_TENANT_POLICY", "standard"),
            webhook_allow_loopback=e.get("MOONSEND_WEBHOOK_ALLOW_LOOPBACK", "").lower() in ("1", "true", "yes"),
            events_retention_days=max(1, int(e.get("MOONSEND_EVENTS_RETENTION_DAYS", "30"))),
            recount_settle_s=max(0.0, float(e.get("MOONSEND_RECOUNT_SETTLE_S", "900"))),
            console_from=e.get("MOONSEND_CONSOLE_FROM") or None,
        )

    @cached_property
    def resources(self) -> Resources:
        return resources_for(APP_NAME, self.stage, self.account_id)

    def topic_arn(self, topic_name: str) -> str:
        return f"arn:aws:sns:{self.region}:{self.account_id}:{topic_name}"

    def queue_arn(self, queue_name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{queue_name}"

    def function_arn(self, handler: str) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{self.resources.function_name(handler)}"

    def role_arn(self, role_name: str) -> str:
        return f"arn:aws:iam::{self.account_id}:role/{role_name}"


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(e: Mapping[str, str], name: str, default: bool) -> bool:
    """A yes-or-no setting; a value that is neither is refused, not read as one (a typo would turn a
    stage's option off or on unseen)."""
    given = e.get(name, "").strip().lower()
    if not given:
        return default
    if given not in _TRUE + _FALSE:
        raise ValueError(f"{name}: true or false (got {given!r})")
    return given in _TRUE


def _waits(given: str | None) -> tuple[int, ...]:
    """`5,300,1800`: whole seconds from 0 to 43,200 (SQS's longest invisibility), at least one."""
    if not given:
        return RETRY_WAITS_S
    waits = tuple(int(w) for w in given.split(","))
    # Fewer waits than the queue's receives before dead-lettering: the last attempt must be ours to record.
    if not waits or len(waits) >= WEBHOOKS_MAX_RECEIVE_COUNT - 2 or any(not 0 <= w <= 43200 for w in waits):
        raise ValueError(
            f"MOONSEND_WEBHOOK_RETRY_S: at most {WEBHOOKS_MAX_RECEIVE_COUNT - 3} waits of 0 to 43200 s, "
            f"comma-separated (got {given!r})"
        )
    return waits
