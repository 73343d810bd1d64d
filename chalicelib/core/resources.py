"""The AWS resources moonsend needs, defined once.

Deployment generates its CloudFormation from them (infra.cfn), and every stage is created from that
packaged template, so the code and the stack cannot drift. Every name carries the app and the stage
(`moonsend-<stage>-...`). Tenant queues are not listed: they are created on first use under
`tenant_queue_prefix`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Redelivery budget before a queued email is moved to the dead-letter queue.
MAX_RECEIVE_COUNT = 5
# Long enough for the drainer to pace, send and delete a batch at the slowest rate it accepts.
SEND_VISIBILITY_TIMEOUT_S = 300
# Dead letters are kept as long as SQS allows, so that an operator can look at them.
DLQ_RETENTION_S = 14 * 24 * 3600
# The payload bucket's three kinds of object, each with its own lifetime: queued emails too large for a
# queue message, scheduled batches waiting for their time, and copies of failed emails for retry-failed.
QUEUED_PREFIX, SCHEDULED_PREFIX, FAILED_PREFIX = "queued/", "scheduled/", "failed/"
# A paused campaign's parked email: no lifecycle expiry, since a pause has no time limit (its objects are
# deleted when the email goes back on its queue). Under `scheduled/`, a pause of over 45 days lost them.
PARKED_PREFIX = "parked/"
# Files a tenant downloads from the console (a campaign's recipients as CSV): a day, then gone.
EXPORTS_PREFIX = "exports/"
# Recipients a tenant uploads (its file, the recipients read from it, the rows refused): kept UPLOAD_KEEP_DAYS
# so that an upload can be sent again, then gone.
UPLOADS_PREFIX = "uploads/"
UPLOAD_KEEP_DAYS = 30
# How far ahead a campaign may be scheduled (its batches are kept in S3 until then).
MAX_SCHEDULE_AHEAD_DAYS = 31
# Lambda's logical ids in the packaged template (Chalice's CamelCase of each handler) and the handlers.
FUNCTION_IDS = {
    "PrecompileEmail": "precompile_email",
    "SendEmails": "send_emails",
    "SesEvents": "ses_events",
    "SesSendingStatus": "ses_sending_status",
    "SweepQueues": "sweep_queues",
    "ReleaseScheduled": "release_scheduled",
    "RetireIdleQueues": "retire_idle_queues",
    "ReconcileDeadLetters": "reconcile_dead_letters",
    "RecountCampaigns": "recount_campaigns",
    "RunDigest": "run_digest",
    "WebhookEvents": "webhook_events",
    "DeliverWebhooks": "deliver_webhooks",
    "WebhookJobs": "webhook_jobs",
    "UploadJobs": "upload_jobs",
    "APIHandler": "api_handler",
}
# The functions Lambda invokes asynchronously (SNS, schedules, each other): their events that still fail
# after Lambda's two retries go to the on-failure queue. The API's function answers HTTP synchronously;
# ses_events and deliver_webhooks are given their messages by Lambda's SQS pollers (what fails too often goes
# to the queue's DLQ), webhook_events the ledger's stream by Lambda's stream poller (it retries a batch).
POLLED_FUNCTION_IDS = ("SesEvents", "WebhookEvents", "DeliverWebhooks")
ASYNC_FUNCTION_IDS = tuple(k for k in FUNCTION_IDS if k != "APIHandler" and k not in POLLED_FUNCTION_IDS)
# SES's events are read off their queue in batches: a batch costs one invocation, one request reading the
# ledger for its Send events (billed by the item, as one read each was), and one counter write (and one
# timeline write) per campaign it touches, however many of its events (two per email: Send, then Delivery or
# Bounce) are that campaign's; the poller waits up to the window to fill it. Batches of 100 cost 0.2 counter
# writes an email where batches of 10 cost 0.7 (measured, issue 53). A batch's events are handled ten at a
# time (chalicelib.feedback.ses_events.LANES): one after another, a batch of 100 met STOP_WITH_MS with a
# third of its events not begun where one process's CPU is shared by every function (bench/throughput.py,
# the machine otherwise idle: they came back only after the visibility timeout, 214 s against 83).
EVENTS_BATCH_SIZE = 100
EVENTS_BATCH_WINDOW_S = 5
# At least six times ses_events' timeout (AWS's advice for an SQS event source), so that a batch still
# being handled is not given to a second invocation.
EVENTS_VISIBILITY_TIMEOUT_S = 180
# The ledger's stream is read a hundred changes at a time (up to a second gathering them): most changes
# make no event, and each tenant's endpoints are read once per batch.
WEBHOOK_EVENTS_BATCH_SIZE = 100
WEBHOOK_EVENTS_WINDOW_S = 1
# Ten deliveries per invocation, their requests made at the same time.
WEBHOOKS_BATCH_SIZE = 10
# Six times deliver_webhooks' timeout (60 s), as for the events queue.
WEBHOOKS_VISIBILITY_TIMEOUT_S = 360
# The most deliver_webhooks' SQS event source runs at once (its ScalingConfig): a flood of requests to dead
# receivers may take this many of the account's concurrent executions, never the ones sending needs.
WEBHOOKS_MAX_CONCURRENCY = 20
# Receives of a delivery before SQS dead-letters it: more than the retry waits' attempts (a delivery's
# last attempt deletes it), so only a message deliver_webhooks cannot handle at all ends there.
WEBHOOKS_MAX_RECEIVE_COUNT = 20


# The campaigns table's index of when each campaign's first message was accepted (GET /campaigns).
CAMPAIGNS_BY_CREATED = "by_created"
# The people table's index of the tenants an address belongs to (an agency's address, several).
PEOPLE_BY_ADDRESS = "by_address"
SESSIONS_BY_TENANT = "by_tenant"
# The tenants table's index of the tenants whose queue was used in an hour: the queues the sweeper looks at
# every minute (chalicelib.jobs.sweeper), where looking at every tenant's would cost each a request a minute.
TENANTS_BY_QUEUE_HOUR = "by_queue_hour"


@dataclass(frozen=True)
class TopicDef:
    logical_id: str
    name: str


@dataclass(frozen=True)
class IndexDef:
    """A global secondary index that projects only the keys: written once, when its keys are set, and never
    again for the counter updates of the item (a projection of more would rewrite it with each)."""

    name: str
    hash_key: str
    range_key: str
    range_type: str = "S"  # "S" or "N"

    def key_schema(self) -> list[dict[str, str]]:
        return [
            {"AttributeName": self.hash_key, "KeyType": "HASH"},
            {"AttributeName": self.range_key, "KeyType": "RANGE"},
        ]

    def definition(self) -> dict[str, Any]:
        """GlobalSecondaryIndexes' entry, as CreateTable and CloudFormation both take it."""
        return {"IndexName": self.name, "KeySchema": self.key_schema(), "Projection": {"ProjectionType": "KEYS_ONLY"}}


@dataclass(frozen=True)
class TableDef:
    logical_id: str
    name: str
    hash_key: str
    range_key: str | None = None
    ttl_attribute: str | None = None
    # A stream of every change, with the item before and after (NEW_AND_OLD_IMAGES).
    stream: bool = False
    indexes: tuple[IndexDef, ...] = ()

    def key_schema(self) -> list[dict[str, str]]:
        """KeySchema as CreateTable and CloudFormation both take it (string keys)."""
        keys = [{"AttributeName": self.hash_key, "KeyType": "HASH"}]
        if self.range_key:
            keys.append({"AttributeName": self.range_key, "KeyType": "RANGE"})
        return keys

    def attribute_definitions(self) -> list[dict[str, str]]:
        types = {k["AttributeName"]: "S" for k in self.key_schema()}
        for index in self.indexes:
            types.setdefault(index.hash_key, "S")
            types.setdefault(index.range_key, index.range_type)
        return [{"AttributeName": name, "AttributeType": kind} for name, kind in types.items()]

    def index_definitions(self) -> list[dict[str, Any]]:
        return [i.definition() for i in self.indexes]


@dataclass(frozen=True)
class QueueDef:
    logical_id: str
    name: str
    visibility_timeout: int = SEND_VISIBILITY_TIMEOUT_S
    retention_seconds: int = 4 * 24 * 3600
    dead_letter: str | None = None  # name of the queue that receives what fails too often
    max_receive_count: int = MAX_RECEIVE_COUNT


@dataclass(frozen=True)
class BucketDef:
    logical_id: str
    name: str
    # (key prefix, days): objects under each prefix are deleted by the bucket's lifecycle after so long.
    expiry_rules: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Resources:
    """Names of everything moonsend uses for one app and stage."""

    app_name: str
    stage: str
    precompile_topic: TopicDef
    send_topic: TopicDef
    # SES publishes its sending events (Send, Reject, and later Delivery, Bounce, Complaint) here,
    # through the configuration set below.
    events_topic: TopicDef
    # The stage's alarms notify operators here (infra.monitoring); its e-mail subscription is a deploy parameter.
    alerts_topic: TopicDef
    tenants_table: TableDef
    campaigns_table: TableDef
    ledger_table: TableDef
    leases_table: TableDef
    usage_table: TableDef
    suppressions_table: TableDef
    schedule_table: TableDef
    # Digests: definitions, items per recipient, retractions, flushed markers (chalicelib.stores.digests).
    digests_table: TableDef
    # Tenants' webhook endpoints and their signing secrets (chalicelib.stores.webhooks).
    webhooks_table: TableDef
    # Webhook requests held for replay, apart from the endpoints' secrets: the functions that park
    # may write here and not there.
    parked_deliveries_table: TableDef
    # A campaign's sends and feedback per minute, for its chart (chalicelib.stores.timeline).
    timeline_table: TableDef
    # Every event a tenant's webhooks carry, kept for a while for `GET /events` (chalicelib.stores.event_log).
    event_log_table: TableDef
    # The campaigns whose ledger changed since their counters were recounted from it (chalicelib.stores.recounts).
    recounts_table: TableDef
    # Signed-in console sessions, by the digest of their cookie's secret (chalicelib.stores.sessions).
    sessions_table: TableDef
    # Wrong sign-in keys counted per client address and window, shared by every container (chalicelib.stores.attempts).
    attempts_table: TableDef
    # A tenant's people who sign in to the console, and their roles (chalicelib.stores.people).
    people_table: TableDef
    # Emailed sign-in links, by the digest of their token: single use, short-lived (chalicelib.stores.sign_in_links).
    sign_in_links_table: TableDef
    # A tenant's API keys, by the digest of each (chalicelib.stores.api_keys).
    api_keys_table: TableDef
    # Uploaded recipients, campaigns sent from them and the requests that sent them (chalicelib.stores.uploads).
    uploads_table: TableDef
    # What operators did to the stage, and who (chalicelib.stores.operator_log): the operator's page shows it.
    operator_log_table: TableDef
    dead_letter_queue: QueueDef
    free_queue: QueueDef
    # Lambda's on-failure destination: async events that failed every attempt, kept for `moonsend replay`.
    failed_invocations_queue: QueueDef
    # The events topic's one subscriber: ses_events reads it in batches (chalicelib.feedback.ses_events);
    # an event that fails MAX_RECEIVE_COUNT times goes to its own dead-letter queue.
    events_queue: QueueDef
    events_dead_letter_queue: QueueDef
    # Webhook deliveries waiting for their attempt (chalicelib.webhooks.delivery_queue), and those
    # deliver_webhooks could not handle at all.
    webhooks_queue: QueueDef
    webhooks_dead_letter_queue: QueueDef
    payload_bucket: BucketDef
    extra_topics: tuple[TopicDef, ...] = field(default=())

    @property
    def prefix(self) -> str:
        return f"{self.app_name}-{self.stage}"

    @property
    def tenant_queue_prefix(self) -> str:
        """Every tenant queue's name starts with this; IAM policies scope tenant queues by it."""
        return f"{self.prefix}-t-"

    @property
    def topics(self) -> tuple[TopicDef, ...]:
        return (self.precompile_topic, self.send_topic, self.events_topic, self.alerts_topic, *self.extra_topics)

    @property
    def tables(self) -> tuple[TableDef, ...]:
        return (
            self.tenants_table,
            self.campaigns_table,
            self.ledger_table,
            self.leases_table,
            self.usage_table,
            self.suppressions_table,
            self.schedule_table,
            self.digests_table,
            self.webhooks_table,
            self.parked_deliveries_table,
            self.timeline_table,
            self.event_log_table,
            self.recounts_table,
            self.sessions_table,
            self.attempts_table,
            self.people_table,
            self.sign_in_links_table,
            self.api_keys_table,
            self.uploads_table,
            self.operator_log_table,
        )

    @property
    def queues(self) -> tuple[QueueDef, ...]:
        """In creation order: a queue's dead-letter queue comes before it."""
        return (
            self.dead_letter_queue,
            self.free_queue,
            self.failed_invocations_queue,
            self.events_dead_letter_queue,
            self.events_queue,
            self.webhooks_dead_letter_queue,
            self.webhooks_queue,
        )

    @property
    def link_secret_name(self) -> str:
        """The Secrets Manager secret whose value signs the stage's links."""
        return f"{self.prefix}/link-signing-key"

    @property
    def tenant_secrets_alias(self) -> str:
        """The KMS key (by its alias) that encrypts each tenant's SES secret in the tenants table."""
        return f"alias/{self.prefix}-tenant-secrets"

    @property
    def configuration_set(self) -> str:
        """The SES configuration set every email is sent with; its event destination is `events_topic`."""
        return f"{self.prefix}-events"

    @property
    def digest_schedule_prefix(self) -> str:
        """Every digest's EventBridge Scheduler schedule is named with this (in the `default` group)."""
        return f"{self.prefix}-d-"

    @property
    def digest_scheduler_role(self) -> str:
        """The role EventBridge Scheduler takes to invoke run_digest (named, so that it can be passed)."""
        return f"{self.prefix}-digest-scheduler"

    @property
    def ledger_stream_placeholder(self) -> str:
        """The ledger's stream ARN as app.py names it for Chalice; the packaged template replaces it with
        the table's `StreamArn` (infra.cfn), which only exists once the table does."""
        return f"arn:aws:dynamodb:*:*:table/{self.ledger_table.name}/stream/*"

    def function_name(self, handler: str) -> str:
        """A handler's Lambda name (`moonsend-dev-send_emails`), set in the template as `FunctionName`.

        Explicit, so that the functions that invoke send_emails and every IAM grant name the deployed
        function (left to CloudFormation, the name would be `moonsend-dev-SendEmails-<random>`)."""
        return f"{self.prefix}-{handler}"


def resources_for(app_name: str, stage: str, account_id: str = "123456789012") -> Resources:
    """All of moonsend's resource definitions for one stage (of one AWS account: bucket names are global)."""
    p = f"{app_name}-{stage}"
    dlq = QueueDef("DeadLetterQueue", f"{p}-dlq", retention_seconds=DLQ_RETENTION_S)
    events_dlq = QueueDef("SesEventsDeadLetterQueue", f"{p}-ses-events-dlq", retention_seconds=DLQ_RETENTION_S)
    webhooks_dlq = QueueDef("WebhooksDeadLetterQueue", f"{p}-webhook-deliveries-dlq", retention_seconds=DLQ_RETENTION_S)
    return Resources(
        app_name=app_name,
        stage=stage,
        precompile_topic=TopicDef("PrecompileEmailTopic", f"{p}-PrecompileEmail"),
        send_topic=TopicDef("SendEmailsTopic", f"{p}-SendEmails"),
        events_topic=TopicDef("SesEventsTopic", f"{p}-SesEvents"),
        alerts_topic=TopicDef("OperatorAlertsTopic", f"{p}-operator-alerts"),
        tenants_table=TableDef(
            "TenantsTable",
            f"{p}-tenants",
            hash_key="user_id",
            indexes=(IndexDef(TENANTS_BY_QUEUE_HOUR, "queue_used_hour", "user_id"),),
        ),
        # One item per campaign: its counters and summary; newest first by the index of when it was created.
        campaigns_table=TableDef(
            "CampaignsTable",
            f"{p}-campaigns",
            hash_key="user_id",
            range_key="campaign_id",
            indexes=(IndexDef(CAMPAIGNS_BY_CREATED, "user_id", "created_ms", "N"),),
        ),
        # One item per recipient of a campaign: its state, reason, SES message id and send claim.
        ledger_table=TableDef(
            "LedgerTable", f"{p}-ledger", hash_key="pk", range_key="rcpt", ttl_attribute="expires_at", stream=True
        ),
        # One item per queue being drained: who drains it, until when.
        leases_table=TableDef("LeasesTable", f"{p}-leases", hash_key="queue", ttl_attribute="expires_at"),
        # One item per free-plan tenant and UTC day: emails queued against the daily cap.
        usage_table=TableDef(
            "UsageTable", f"{p}-usage", hash_key="user_id", range_key="day", ttl_attribute="expires_at"
        ),
        # One item per suppressed address: per tenant (`tenant#<userId>`) or for all (`platform`).
        suppressions_table=TableDef("SuppressionsTable", f"{p}-suppressions", hash_key="scope", range_key="rcpt"),
        # Scheduled email waiting for its time: one item per stored batch, keyed by the UTC minute it is due
        # (chalicelib.stores.schedule), plus the releaser's cursor.
        schedule_table=TableDef("ScheduleTable", f"{p}-schedule", hash_key="bucket", range_key="item"),
        digests_table=TableDef(
            "DigestsTable", f"{p}-digests", hash_key="pk", range_key="sk", ttl_attribute="expires_at"
        ),
        webhooks_table=TableDef("WebhooksTable", f"{p}-webhooks", hash_key="user_id", range_key="endpoint_id"),
        parked_deliveries_table=TableDef(
            "ParkedDeliveriesTable",
            f"{p}-parked-deliveries",
            hash_key="pk",
            range_key="webhook_id",
            ttl_attribute="expires_at",
        ),
        timeline_table=TableDef("TimelineTable", f"{p}-timeline", hash_key="pk", range_key="minute"),
        # Not `-events`: that is the SES configuration set's name.
        event_log_table=TableDef(
            "EventLogTable", f"{p}-event-log", hash_key="pk", range_key="sk", ttl_attribute="expires_at"
        ),
        recounts_table=TableDef("RecountsTable", f"{p}-recounts", hash_key="pk", ttl_attribute="expires_at"),
        sessions_table=TableDef(
            "SessionsTable",
            f"{p}-sessions",
            hash_key="sid",
            ttl_attribute="expires_at",
            indexes=(IndexDef(SESSIONS_BY_TENANT, "tenant_id", "created_at", range_type="N"),),
        ),
        attempts_table=TableDef("AttemptsTable", f"{p}-attempts", hash_key="pk", ttl_attribute="expires_at"),
        people_table=TableDef(
            "PeopleTable",
            f"{p}-people",
            hash_key="user_id",
            range_key="address",
            indexes=(IndexDef(PEOPLE_BY_ADDRESS, "address", "user_id"),),
        ),
        sign_in_links_table=TableDef(
            "SignInLinksTable", f"{p}-sign-in-links", hash_key="token", ttl_attribute="expires_at"
        ),
        api_keys_table=TableDef("ApiKeysTable", f"{p}-api-keys", hash_key="user_id", range_key="digest"),
        uploads_table=TableDef(
            "UploadsTable", f"{p}-uploads", hash_key="user_id", range_key="sk", ttl_attribute="expires_at"
        ),
        operator_log_table=TableDef(
            "OperatorLogTable", f"{p}-operator-log", hash_key="log", range_key="at", ttl_attribute="expires_at"
        ),
        dead_letter_queue=dlq,
        free_queue=QueueDef("FreePlanQueue", f"{p}-free", dead_letter=dlq.name),
        failed_invocations_queue=QueueDef(
            "FailedInvocationsQueue", f"{p}-failed-invocations", retention_seconds=DLQ_RETENTION_S
        ),
        events_queue=QueueDef(
            "SesEventsQueue",
            f"{p}-ses-events",
            visibility_timeout=EVENTS_VISIBILITY_TIMEOUT_S,
            dead_letter=events_dlq.name,
        ),
        events_dead_letter_queue=events_dlq,
        webhooks_queue=QueueDef(
            "WebhooksQueue",
            f"{p}-webhook-deliveries",
            visibility_timeout=WEBHOOKS_VISIBILITY_TIMEOUT_S,
            # SQS's longest: the retry waits (27 h 35 min), and ten-hour waits after it if the endpoint's table
            # fails, all come before SQS would drop a message.
            retention_seconds=DLQ_RETENTION_S,
            dead_letter=webhooks_dlq.name,
            max_receive_count=WEBHOOKS_MAX_RECEIVE_COUNT,
        ),
        webhooks_dead_letter_queue=webhooks_dlq,
        payload_bucket=BucketDef(
            "PayloadBucket",
            f"{p}-payloads-{account_id}",
            expiry_rules=(
                (QUEUED_PREFIX, 7),
                (SCHEDULED_PREFIX, MAX_SCHEDULE_AHEAD_DAYS + 14),
                (FAILED_PREFIX, 30),
                (EXPORTS_PREFIX, 1),
                (UPLOADS_PREFIX, UPLOAD_KEEP_DAYS),
            ),
        ),
    )
