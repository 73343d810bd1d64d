"""What the operator's page shows: the whole stage at one moment, read with the operator's own credentials.

Read as data first (`Reader.read`), rendered after (infra.ops.app, infra.ops.view): every figure comes from
where AWS and the pipeline keep it, nothing is counted by the page itself. A part that cannot be read (the
ages, when CloudWatch refuses) is said in `Overview.problems` and the rest is shown.

- Queues (SQS): every queue of the stage, its visible, in-flight and delayed messages (GetQueueAttributes),
  and the age of its oldest message from CloudWatch (`ApproximateAgeOfOldestMessage`, which SQS publishes
  each minute: SQS itself does not say it), for the queues that hold any.
- Drains: the leases held now (chalicelib.stores.lease; one per drainer, slot 0 being `<queue>` and slot k
  `<queue>#k`).
- Tenants (the tenants table): plan, rate, pauses with their owners; a free tenant's use of its daily cap
  (the usage table); a tenant's sends per minute over the last hour from the timelines of its campaigns that
  sent in it (the tenant's newest `CAMPAIGNS_LOOKED_AT`: an older campaign resumed after a long pause is
  not counted), for the tenants active now: their queue used today or yesterday or holding email (a backlog
  across midnight), a free tenant's cap used today (or yesterday, while the free queue holds email).
- Dead letters: the stage's dead-letter queues; failed invocations: Lambda's on-failure queue.
- Webhooks: every disabled endpoint with its reason and its held requests (counted up to `BACKLOG_BOUND`, in
  one page, at most once a `BACKLOG_KEPT_S`: a count reads the requests).
- Reputation, as SES sees it beside moonsend's counts: the platform account's sending status and enforcement
  (SES GetAccount) and SES's own `Reputation.BounceRate` and `Reputation.ComplaintRate` (CloudWatch, AWS/SES:
  the latest SES published in the last day), beside the free tenants' sends, bounces and complaints that
  moonsend counted over the reputation guard's window (chalicelib.stores.reputation); per tenant, moonsend's
  counts, and for a free tenant SES's status of its SES tenant (GetReputationEntity, at most once a minute).
  A paid tenant's SES account is its own: moonsend's keys there may not read its CloudWatch, so only
  moonsend's counts are shown for it. Counts are read again at most once a `COUNTS_KEPT_S` per tenant.

What one look costs: a scan each of the tenants, leases and webhook tables; one ListQueues page per 1,000
queues and one GetQueueAttributes per queue; one GetMetricData per 500 queues that hold messages; one GetItem
per free tenant; per active tenant one Query and one BatchGetItem, and one Query per campaign of its that
sent in the hour; per tenant one Query of its counts a minute, and per free tenant one GetReputationEntity a
minute; one GetAccount and one GetMetricData. Reads run `READERS` at a time. The page shows `MAX_TENANTS`
tenants, those that need a look first.
"""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.core.aws import NO_SUCH_QUEUE
from chalicelib.core.config import Settings
from chalicelib.core.drainer_shares import SLOT_SEPARATOR
from chalicelib.core.queue_listing import queue_urls
from chalicelib.core.routing import tenant_queue_name
from chalicelib.jobs.queue_age import QueueAge
from chalicelib.stores.pauses import Pause
from chalicelib.stores.ports.sending import Limits, TenantStatus, Window
from chalicelib.stores.queue_activity import utc_day
from chalicelib.stores.timeline import minute_key

READERS = 8
MAX_TENANTS = 500
CAMPAIGNS_LOOKED_AT = 10
BACKLOG_BOUND = 1_000
HOUR_S = 3600
# A queue is behind its rate when email waited this long and the last whole minute went at under this share of it.
SLOW_AFTER_S = 120.0
SLOW_SHARE = 0.5
BACKLOG_KEPT_S = 60.0  # a disabled endpoint's held requests are counted again after this long
COUNTS_KEPT_S = 60.0  # a tenant's reputation counts are read again after this long
SES_RATES_LOOKED_BACK_S = 86_400  # SES publishes its reputation rates now and then: its latest of the day
NEAR_LIMIT = 0.5  # a tenant's rate at this share of the guard's limit needs a look (as the stage's alarms)


@dataclass(frozen=True)
class QueueLine:
    name: str
    visible: int
    in_flight: int
    delayed: int
    oldest_s: float | None = None  # the age of its oldest message, CloudWatch's last minute (None: not known)
    drains: int = 0  # leases held on it now

    @property
    def held(self) -> int:
        return self.visible + self.in_flight + self.delayed

    @property
    def undrained(self) -> bool:
        """Email waits on it and no drain holds it (the free plan's queue: every free tenant waits)."""
        return bool(self.visible) and not self.drains


@dataclass(frozen=True)
class TenantLine:
    user_id: str
    plan: str  # free, paid, or "" (no message registered its settings yet)
    rate: float | None  # its ratePerSecond (a free tenant's: the free queue's, shared)
    queue: QueueLine | None  # its own queue (None for a free tenant, or before its first message)
    pauses: tuple[Pause, ...]
    used_today: int | None = None  # a free tenant's emails against the daily cap today
    sent_last_minute: int | None = None  # the last whole minute's sends (None: not active today)
    minutes: dict[int, int] = field(default_factory=dict)  # minute (epoch s) -> sends, the last hour
    counted: Window | None = None  # moonsend's sends, bounces and complaints over the guard's window
    ses: TenantStatus | None = None  # SES's status of a free tenant's SES tenant (None: none, or not read)

    @property
    def achieved_rate(self) -> float | None:
        return None if self.sent_last_minute is None else self.sent_last_minute / 60.0

    def _slow(self) -> bool:
        """Email waited all through the last whole minute, and that minute went at under half the rate: a drain
        stuck, SES throttling. (How long the oldest waited says nothing alone: a big campaign waits long.)"""
        waited = self.queue is not None and (self.queue.oldest_s or 0.0) >= SLOW_AFTER_S
        return bool(waited and self.rate and (self.achieved_rate or 0.0) < SLOW_SHARE * self.rate)

    def needs_a_look(self, free_cap: int, limits: Limits | None = None) -> list[str]:
        """Why an operator should look at it now (empty: nothing)."""
        why: list[str] = []
        if self.pauses:
            why.append("paused")
        by_ses = any(p.owner == "ses" for p in self.pauses)
        if self.ses is not None and self.ses.paused and not by_ses:
            why.append("SES paused its SES tenant")
        if self.ses is not None and not self.ses.paused and by_ses:  # SES's Enabled event lost, or not yet followed
            why.append("SES sends for it again; SES's pause still stands")
        if limits is not None and self.near_limits(limits):
            why.append("bounces or complaints near the guard's limit")
        q = self.queue
        if q is not None and q.visible and not q.drains:
            why.append("email waiting, no drain")
        elif q is not None and q.visible and self._slow():
            why.append("behind its rate")
        if self.used_today is not None and self.used_today >= free_cap:
            why.append("daily cap reached")
        return why

    def near_limits(self, limits: Limits) -> bool:
        """Its bounce or complaint rate at half the guard's limit or more, over enough email to be a rate."""
        w = self.counted
        if w is None or w.sent < limits.min_sent:
            return False
        return (
            w.bounce_rate >= NEAR_LIMIT * limits.bounce_rate or w.complaint_rate >= NEAR_LIMIT * limits.complaint_rate
        )


@dataclass(frozen=True)
class WebhookLine:
    user_id: str
    endpoint_id: str
    url: str
    reason: str
    disabled_at: float | None
    backlog: int
    more: bool  # more are held than counted


@dataclass(frozen=True)
class AccountLine:
    """The platform's SES account as SES sees it, beside moonsend's counts of the free tenants' email."""

    sending_enabled: bool | None  # SES's word (None: not read)
    enforcement: str | None  # HEALTHY, PROBATION or SHUTDOWN
    ses_bounce_rate: float | None  # SES's latest Reputation.BounceRate of the day (None: none published)
    ses_complaint_rate: float | None
    counted: Window  # moonsend's: every free tenant's, over the guard's window


@dataclass(frozen=True)
class Overview:
    at: float
    stage: str
    tenants: list[TenantLine]
    tenants_not_shown: int
    free_queue: QueueLine | None
    free_rate: float
    free_cap: int
    dead_letters: list[QueueLine]
    failed_invocations: QueueLine | None
    webhooks: list[WebhookLine]
    # (minute, epoch s; sends) of the stage, oldest first: the last hour's whole minutes, then the one under way
    sends_per_minute: list[tuple[int, int]]
    other_queues: list[QueueLine] = field(default_factory=list)  # events, webhook deliveries
    totals: dict[str, int] = field(default_factory=dict)  # over every tenant, shown or not: paused, holding, drains
    problems: list[str] = field(default_factory=list)  # what could not be read (the rest is shown)
    account: AccountLine | None = None
    limits: Limits = field(default_factory=Limits)  # the reputation guard's


class Reader:
    """The overview's reads, over the app's own stores (a container built from the operator's environment)."""

    def __init__(self, settings: Settings, container: Any, sqs: Any, cloudwatch: Any, ses: Any) -> None:
        self.settings = settings
        self.c = container
        self.sqs = sqs
        self.cloudwatch = cloudwatch
        self.ses = ses  # the platform account's SES v2 client
        self._backlogs: dict[tuple[str, str], tuple[float, int, bool]] = {}  # endpoint -> (when, count, more)
        self._counts: dict[str, tuple[float, Window]] = {}  # tenant -> (when read, its counts)
        self._statuses: dict[str, tuple[float, TenantStatus | None]] = {}  # free tenant -> (when read, SES's)

    def read(self, now: float | None = None) -> Overview:
        now = time.time() if now is None else now
        with ThreadPoolExecutor(READERS) as pool:
            return self._read(pool, now)

    def _read(self, pool: ThreadPoolExecutor, now: float) -> Overview:
        r = self.settings.resources
        problems: list[str] = []
        standings = pool.submit(lambda: list(self.c.tenants.every()))
        leases = pool.submit(lambda: self.c.leases.live(int(now * 1000)))
        webhooks = pool.submit(self._webhooks, now)
        account = pool.submit(self._account, now, problems)
        queues = {q.name: q for q in self._queues(pool)}
        drains: dict[str, int] = defaultdict(int)
        for lease in leases.result():
            drains[lease.queue.split(SLOT_SEPARATOR, 1)[0]] += 1
        ages = self._oldest([q.name for q in queues.values() if q.held], problems)
        queues = {
            n: QueueLine(n, q.visible, q.in_flight, q.delayed, ages.get(n), drains.get(n, 0)) for n, q in queues.items()
        }
        free_queue = queues.get(r.free_queue.name)
        days = (utc_day(now), utc_day(now - 86_400))
        lines = list(pool.map(lambda s: self._tenant(s, queues, free_queue, days, now, problems), standings.result()))
        limits = self.c.reputation.limits
        lines.sort(key=lambda t: (not t.needs_a_look(self.settings.free_daily_cap, limits), t.user_id))
        stage_minutes: dict[int, int] = defaultdict(int)
        for line in lines:
            for minute, n in line.minutes.items():
                stage_minutes[minute] += n
        first = (int(now) // 60) * 60 - HOUR_S  # an hour of whole minutes, and the minute under way
        own = [t.queue for t in lines if t.queue is not None] + ([free_queue] if free_queue else [])
        return Overview(
            at=now,
            stage=r.stage,
            tenants=lines[:MAX_TENANTS],
            tenants_not_shown=max(0, len(lines) - MAX_TENANTS),
            free_queue=free_queue,
            free_rate=self.settings.free_rate_per_second,
            free_cap=self.settings.free_daily_cap,
            dead_letters=[
                queues[q.name]
                for q in (r.dead_letter_queue, r.events_dead_letter_queue, r.webhooks_dead_letter_queue)
                if q.name in queues
            ],
            failed_invocations=queues.get(r.failed_invocations_queue.name),
            webhooks=webhooks.result(),
            sends_per_minute=[(m, stage_minutes.get(m, 0)) for m in range(first, first + HOUR_S + 60, 60)],
            other_queues=[queues[q.name] for q in (r.events_queue, r.webhooks_queue) if q.name in queues],
            totals={
                "tenants": len(lines),
                "paused": sum(1 for t in lines if t.pauses),
                "holding": sum(1 for q in own if q.held),
                "drains": sum(q.drains for q in own),
            },
            problems=problems,
            account=self._with_counts(account.result(), [t for t in lines if t.plan == "free"]),
            limits=limits,
        )

    # --- the platform account, as SES sees it --------------------------------------------------------------
    def _account(self, now: float, problems: list[str]) -> AccountLine:
        enabled = enforcement = None
        try:
            got = self.ses.get_account()
            enabled, enforcement = bool(got.get("SendingEnabled")), got.get("EnforcementStatus")
        except (ClientError, BotoCoreError) as exc:
            problems.append(f"the platform account's SES status is not known: SES answered {exc}")
        rates: dict[str, float] = {}
        try:
            rates = self._ses_rates(now)
        except (ClientError, BotoCoreError) as exc:
            problems.append(f"SES's reputation rates are not known: CloudWatch answered {exc}")
        return AccountLine(enabled, enforcement, rates.get("bounce"), rates.get("complaint"), Window(0, 0, 0, 0))

    def _ses_rates(self, now: float) -> dict[str, float]:
        """SES's latest Reputation.BounceRate and Reputation.ComplaintRate of the last day (AWS/SES)."""
        queries = [
            {
                "Id": key,
                "MetricStat": {
                    "Metric": {"Namespace": "AWS/SES", "MetricName": name},
                    "Period": 60,
                    "Stat": "Average",
                },
            }
            for key, name in (("bounce", "Reputation.BounceRate"), ("complaint", "Reputation.ComplaintRate"))
        ]
        got = self.cloudwatch.get_metric_data(
            MetricDataQueries=queries,
            StartTime=datetime.fromtimestamp(now - SES_RATES_LOOKED_BACK_S, UTC),
            EndTime=datetime.fromtimestamp(now + 60, UTC),
            ScanBy="TimestampDescending",
        )
        return {r["Id"]: float(r["Values"][0]) for r in got["MetricDataResults"] if r.get("Values")}

    def _with_counts(self, account: AccountLine, free: list[TenantLine]) -> AccountLine:
        windows = [t.counted for t in free if t.counted is not None]
        total = Window(
            self.c.reputation.limits.window_days,
            sum(w.sent for w in windows),
            sum(w.bounced for w in windows),
            sum(w.complained for w in windows),
        )
        return replace(account, counted=total)

    # --- queues -------------------------------------------------------------------------------------------
    def _queues(self, pool: ThreadPoolExecutor) -> list[QueueLine]:
        urls = list(queue_urls(self.sqs, self.settings.resources.prefix))
        return [q for q in pool.map(self._queue, urls) if q is not None]

    def _queue(self, url: str) -> QueueLine | None:
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        try:
            a = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in NO_SUCH_QUEUE:  # retired since it was listed
                return None
            raise
        return QueueLine(url.rsplit("/", 1)[-1], *(int(a.get(n, 0)) for n in names))

    def _oldest(self, names: list[str], problems: list[str]) -> dict[str, float]:
        """Each queue's oldest message's age (chalicelib.jobs.queue_age, as the sweeper reads it). Not known
        when CloudWatch cannot be read: said in `problems`, and the rest of the page stands."""
        try:
            return QueueAge(self.cloudwatch, self.settings.resources.stage).ages(names)
        except (ClientError, BotoCoreError) as exc:
            problems.append(f"the age of the oldest email is not known: CloudWatch answered {exc}")
            return {}

    # --- tenants ------------------------------------------------------------------------------------------
    def _tenant(
        self,
        standing: Any,
        queues: dict[str, QueueLine],
        free_queue: QueueLine | None,
        days: tuple[str, str],
        now: float,
        problems: list[str],
    ) -> TenantLine:
        tenant = standing.tenant
        plan = tenant.plan if tenant is not None else ""
        own = queues.get(tenant_queue_name(self.settings.resources, standing.user_id)) if plan != "free" else None
        used = self.c.daily_cap.used(standing.user_id, now) if plan == "free" else None
        if plan == "free":
            # A free tenant sends from the shared queue: active while it used its cap today, or used it yesterday
            # and that queue still holds email (a backlog across midnight).
            busy = free_queue is not None and (free_queue.held or free_queue.drains)
            active = bool(used) or bool(busy and self.c.daily_cap.used(standing.user_id, now - 86_400))
        else:
            active = standing.queue_used_day in days or bool(own and (own.held or own.drains))
        minutes = self._minutes(standing.user_id, now) if active else {}
        last = (int(now) // 60) * 60 - 60
        if tenant is None:
            rate = None
        else:
            rate = self.settings.free_rate_per_second if plan == "free" else tenant.sender.rate_per_second
        return TenantLine(
            standing.user_id,
            plan,
            rate,
            own,
            standing.pauses,
            used,
            minutes.get(last, 0) if active else None,
            minutes,
            self._counted(standing.user_id, now),
            self._ses_status(tenant, problems) if plan == "free" else None,
        )

    def _counted(self, user_id: str, now: float) -> Window:
        at, counts = self._counts.get(user_id, (float("-inf"), None))
        if counts is None or now - at >= COUNTS_KEPT_S:
            counts = self.c.reputation.window(user_id, now)
            self._counts[user_id] = (now, counts)
        return counts

    def _ses_status(self, tenant: Any, problems: list[str]) -> TenantStatus | None:
        """SES's status of a free tenant's SES tenant, read at most once a COUNTS_KEPT_S whatever it answered
        (none yet, an error): the page shares SES's request rate with the sends and the SES events' readers."""
        now = time.monotonic()
        at, status = self._statuses.get(tenant.user_id, (float("-inf"), None))
        if now - at < COUNTS_KEPT_S:
            return status
        region = tenant.sender.region or self.settings.region
        try:
            status = self.c.ses_tenants.status(tenant.user_id, region, max_age_s=0)
        except (ClientError, BotoCoreError) as exc:
            status = None
            line = f"SES's status of some free tenants' SES tenants is not known: SES answered {exc}"
            if not any(p.startswith(line[:60]) for p in problems):
                problems.append(line)
        self._statuses[tenant.user_id] = (now, status)
        return status

    def _minutes(self, user_id: str, now: float) -> dict[int, int]:
        """The tenant's sends per minute over the last hour, from its campaigns that sent in it."""
        since_ms = (now - HOUR_S) * 1000
        campaigns, _ = self.c.stats.newest(user_id, limit=CAMPAIGNS_LOOKED_AT)
        out: dict[int, int] = defaultdict(int)
        for campaign in campaigns:
            if not campaign.last_sent_ms or campaign.last_sent_ms < since_ms:
                continue
            rows, _more = self.c.timeline.minutes(user_id, campaign.campaign_id, after=minute_key(now - HOUR_S - 60))
            for row in rows:
                out[row.start_s] += row.counts.get("sent", 0)
        return dict(out)

    # --- webhooks -----------------------------------------------------------------------------------------
    def _webhooks(self, now: float) -> list[WebhookLine]:
        """Every disabled endpoint; its held requests counted at most once a BACKLOG_KEPT_S (a count reads them)."""
        endpoints = self.c.webhook_endpoints.disabled()

        def line(e: Any) -> WebhookLine:
            at, n, more = self._backlogs.get((e.user_id, e.id), (0.0, 0, False))
            if now - at >= BACKLOG_KEPT_S:
                n, more = self.c.held_requests.count_upto(e.user_id, e.id, BACKLOG_BOUND, max_pages=1)
                self._backlogs[(e.user_id, e.id)] = (now, n, more)
            return WebhookLine(e.user_id, e.id, e.url, e.disabled_reason or "", e.disabled_at, n, more)

        return sorted((line(e) for e in endpoints), key=lambda w: (w.user_id, w.endpoint_id))
