"""Least-privilege IAM policies, one per Lambda function, generated from the resource definitions.

Each function gets only the actions its code calls, on the resources of its own stage: tables, topics,
queues and the bucket by name, tenant queues and their alarms by the stage's name prefix. Region and
account are left as `*` inside the ARNs, so one policy file serves any account; the names, which carry
app and stage, are what scopes them. Two actions have no resource-level permissions in AWS and get
`"Resource": "*"`: `sqs:ListQueues` (the sweeper lists by the stage prefix), `ses:GetAccount` and
`dynamodb:ListStreams` (Lambda's stream poller calls it as webhook_events' role).

Chalice reads the files from `.chalice/` (`iam_policy_file` per function and stage); `moonsend
package` rewrites them, and a test fails if a committed file differs from what this module generates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chalicelib.core.resources import (
    CAMPAIGNS_BY_CREATED,
    EXPORTS_PREFIX,
    FAILED_PREFIX,
    FUNCTION_IDS,
    PARKED_PREFIX,
    PEOPLE_BY_ADDRESS,
    POLLED_FUNCTION_IDS,
    QUEUED_PREFIX,
    SCHEDULED_PREFIX,
    SESSIONS_BY_TENANT,
    TENANTS_BY_QUEUE_HOUR,
    UPLOADS_PREFIX,
    Resources,
    resources_for,
)
from chalicelib.stores.tenant_secrets import CONTEXT_KEY as SECRET_CONTEXT_KEY

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = (
    "precompile_email",
    "send_emails",
    "ses_events",
    "ses_sending_status",
    "sweep_queues",
    "release_scheduled",
    "retire_idle_queues",
    "reconcile_dead_letters",
    "recount_campaigns",
    "run_digest",
    "webhook_events",
    "deliver_webhooks",
    "webhook_jobs",
    "upload_jobs",
    "api_handler",
)


def _logs(r: Resources, fn: str) -> dict[str, Any]:
    """Streams and events in the function's own log group, which the stack creates with the stage's retention.
    No logs:CreateLogGroup: a role that may create its group would make it again, with no retention, whenever
    it runs while the stack's group is missing (a failed create, a destroy), and that group would then block
    the stack's own create of the same name."""
    group = f"arn:aws:logs:*:*:log-group:/aws/lambda/{r.function_name(fn)}"
    return {
        "Sid": "OwnLogGroup",
        "Effect": "Allow",
        "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
        "Resource": [group, f"{group}:*"],
    }


# pynamodb reads each table's key schema once per container (DescribeTable).
_READ = ["dynamodb:GetItem", "dynamodb:DescribeTable"]
_WRITE = ["dynamodb:UpdateItem", "dynamodb:PutItem"]


def _table(r: Resources, name: str) -> str:
    return f"arn:aws:dynamodb:*:*:table/{name}"


def _queue(name: str) -> str:
    return f"arn:aws:sqs:*:*:{name}"


def _stmt(sid: str, actions: list[str], resources: list[str] | str) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": sorted(set(actions)), "Resource": resources}


def _tenant_secrets(r: Resources, actions: list[str]) -> dict[str, Any]:
    """The stage's key of the tenants' SES secrets (chalicelib.stores.tenant_secrets), by its alias: its id
    is the data stack's, unknown here. Only with a tenant named in the encryption context, which binds each
    ciphertext to its tenant's row, and with no other context key: `Null ... false` alone lets a call add
    any (ForAllValues on the context's keys: each must be the tenant's; with Null, there is one)."""
    return {
        **_stmt("TenantSecrets", actions, "arn:aws:kms:*:*:key/*"),
        "Condition": {
            "ForAnyValue:StringEquals": {"kms:ResourceAliases": r.tenant_secrets_alias},
            "Null": {f"kms:EncryptionContext:{SECRET_CONTEXT_KEY}": "false"},
            "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": [SECRET_CONTEXT_KEY]},
        },
    }


def _identities(address: str) -> list[str]:
    domain = address.rpartition("@")[2]
    return [f"arn:aws:ses:*:*:identity/{address}", f"arn:aws:ses:*:*:identity/{domain}"]


def console_from_of(stage: str) -> str | None:
    """The stage's MOONSEND_CONSOLE_FROM (`.chalice/config.json`), as a bare address."""
    from email.utils import parseaddr

    from infra.operator_env import stage_variables

    given = stage_variables(stage).get("MOONSEND_CONSOLE_FROM")
    return parseaddr(given)[1] or None if given else None


def policies(r: Resources, console_from: str | None = None) -> dict[str, dict[str, Any]]:
    """{function name: IAM policy document} for one stage (`console_from`: its console's From address)."""
    tenant_queues = _queue(f"{r.tenant_queue_prefix}*")
    stage_queues = [tenant_queues, _queue(r.free_queue.name)]
    bucket = f"arn:aws:s3:::{r.prefix}-payloads-*"  # the bucket's name ends in the account id
    queued_objects, scheduled_objects, failed_objects, parked_objects, exported_objects = (
        f"{bucket}/{prefix}*"
        for prefix in (QUEUED_PREFIX, SCHEDULED_PREFIX, FAILED_PREFIX, PARKED_PREFIX, EXPORTS_PREFIX)
    )
    send_fn = f"arn:aws:lambda:*:*:function:{r.function_name('send_emails')}"
    tables = {t.logical_id: _table(r, t.name) for t in r.tables}
    schedule = tables["ScheduleTable"]
    ses_tenants = f"arn:aws:ses:*:*:tenant/{r.prefix}-*"
    # SES's status of a free-plan tenant, read by the reputation guard and before a resume.
    ses_tenant_status = _stmt("SesTenantStatus", ["ses:GetTenant", "ses:GetReputationEntity"], [ses_tenants])
    create_queues = _stmt(
        "Queues",
        ["sqs:CreateQueue", "sqs:GetQueueUrl", "sqs:TagQueue", "sqs:SendMessage", "sqs:GetQueueAttributes"],
        stage_queues,
    )
    queue_alarms = _stmt(
        "QueueAlarms", ["cloudwatch:PutMetricAlarm"], [f"arn:aws:cloudwatch:*:*:alarm:{r.tenant_queue_prefix}*"]
    )

    suppressions = tables["SuppressionsTable"]
    # Sends and feedback added to a campaign's minutes with its counters (chalicelib.stores.timeline).
    timeline_adds = _stmt("Timeline", ["dynamodb:UpdateItem", "dynamodb:DescribeTable"], [tables["TimelineTable"]])
    # Looked up in batches; a platform bounce met for the first time written to the tenant's own list too.
    suppression_checks = _stmt(
        "Suppressions", ["dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:DescribeTable"], [suppressions]
    )
    precompile = [
        _stmt("Registry", _READ + _WRITE, [tables["TenantsTable"]]),
        # A message's keys compared with the registered ones (decrypted), new ones encrypted for the row.
        _tenant_secrets(r, ["kms:Encrypt", "kms:Decrypt"]),
        suppression_checks,
        _stmt("Ledger", _READ + _WRITE + ["dynamodb:BatchGetItem"], [tables["LedgerTable"]]),
        _stmt("Counters", _READ + _WRITE, [tables["CampaignsTable"], tables["UsageTable"]]),
        create_queues,
        queue_alarms,
        _stmt("Payloads", ["s3:PutObject"], [queued_objects, scheduled_objects]),
        _stmt("Schedule", ["dynamodb:PutItem", "dynamodb:DescribeTable"], [schedule]),
        # A queue given email with no drainer gets one at once (chalicelib.queueing.drain_starter).
        _stmt("DrainerOnDuty", _READ, [tables["LeasesTable"]]),
        _stmt("StartDrain", ["lambda:InvokeFunction"], [send_fn]),
        # Digest events: the definition merged (read, updated), items and retractions written in batches (an
        # item's stored time read first: it keeps its earliest).
        _stmt(
            "Digests",
            ["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem", "dynamodb:BatchGetItem"],
            [tables["DigestsTable"]],
        ),
        # A definition's schedule put (chalicelib.digest.schedules), naming the role Scheduler invokes with.
        _stmt(
            "DigestSchedules",
            ["scheduler:CreateSchedule", "scheduler:UpdateSchedule"],
            [f"arn:aws:scheduler:*:*:schedule/default/{r.digest_schedule_prefix}*"],
        ),
        _stmt("PassSchedulerRole", ["iam:PassRole"], [f"arn:aws:iam::*:role/{r.digest_scheduler_role}"]),
        # A free-plan From address nobody has yet is claimed only if it has an identity of its own
        # (chalicelib.stores.platform_identities).
        _stmt("PlatformIdentities", ["ses:GetEmailIdentity"], ["arn:aws:ses:*:*:identity/*"]),
    ]
    send = [
        _stmt("Registry", [*_READ, "dynamodb:UpdateItem"], [tables["TenantsTable"]]),
        _tenant_secrets(r, ["kms:Decrypt"]),  # the tenant's secret, to sign its SES calls with
        suppression_checks,
        _stmt("Ledger", _READ + _WRITE, [tables["LedgerTable"]]),
        _stmt("Counters", _READ + _WRITE, [tables["CampaignsTable"], tables["UsageTable"]]),
        timeline_adds,
        # Taken, renewed and given up with conditional updates (a given-up item stays a day: the sweeper reads it).
        _stmt("Lease", [*_READ, "dynamodb:UpdateItem"], [tables["LeasesTable"]]),
        _stmt(
            "Drain",
            [
                "sqs:GetQueueUrl",
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:ChangeMessageVisibility",
                "sqs:SendMessage",
                "sqs:GetQueueAttributes",
                "sqs:ListQueueTags",
            ],
            stage_queues,
        ),
        _stmt(
            "Send",
            ["ses:SendEmail", "ses:SendRawEmail"],
            ["arn:aws:ses:*:*:identity/*", f"arn:aws:ses:*:*:configuration-set/{r.configuration_set}", ses_tenants],
        ),
        # Each free-plan tenant an SES tenant of the platform's account (chalicelib.stores.ses_tenants): created,
        # given its policy, the identity and configuration set it sends with associated, its status read.
        _stmt(
            "SesTenants",
            [
                "ses:CreateTenant",
                "ses:GetTenant",
                "ses:ListTenantResources",
                "ses:CreateTenantResourceAssociation",
                "ses:UpdateReputationEntityPolicy",
                "ses:GetReputationEntity",
            ],
            [ses_tenants],
        ),
        _stmt(
            "SesTenantResources",
            ["ses:CreateTenantResourceAssociation", "ses:GetEmailIdentity"],
            ["arn:aws:ses:*:*:identity/*", f"arn:aws:ses:*:*:configuration-set/{r.configuration_set}"],
        ),
        _stmt("SesTenantPolicies", ["ses:UpdateReputationEntityPolicy"], ["arn:aws:ses:*:aws:reputation-policy/*"]),
        _stmt("SendQuota", ["ses:GetAccount"], "*"),
        # Read and deleted when sent; written when parked email over the queue's size goes straight back.
        _stmt("Payloads", ["s3:GetObject", "s3:DeleteObject", "s3:PutObject"], [queued_objects]),
        # Paused email is parked in the schedule store (and taken out again when the pause was lifted while
        # it was being parked: chalicelib.send.parking); failed email is kept for retry-failed.
        # (Parked before release 25 under scheduled/: taken out from there too.)
        _stmt("Parked", ["s3:PutObject", "s3:DeleteObject"], [parked_objects, scheduled_objects]),
        _stmt("FailedCopies", ["s3:PutObject"], [failed_objects]),
        _stmt("HoldPaused", ["dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:DescribeTable"], [schedule]),
        _stmt("HandOn", ["lambda:InvokeFunction"], [send_fn]),
    ]
    events = [
        _stmt("Registry", [*_READ, "dynamodb:UpdateItem"], [tables["TenantsTable"]]),
        _stmt("ReputationWindow", [*_READ, "dynamodb:UpdateItem", "dynamodb:Query"], [tables["UsageTable"]]),
        _stmt("Suppressions", ["dynamodb:PutItem", "dynamodb:DescribeTable"], [suppressions]),
        # A batch's Send events read the ledger in one BatchGetItem (chalicelib.feedback.ses_events.read_ahead).
        _stmt("Ledger", [*_READ, *_WRITE, "dynamodb:BatchGetItem"], [tables["LedgerTable"]]),
        _stmt("Counters", _READ + _WRITE, [tables["CampaignsTable"]]),
        timeline_adds,
        ses_tenant_status,
        # Lambda's poller reads the events queue as the function's role (what AWS documents it needs).
        _stmt(
            "EventsQueue",
            ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
            [_queue(r.events_queue.name)],
        ),
    ]
    # SES's sending status events followed (chalicelib.feedback.sending_status): SES's status read, the tenant
    # paused as SES or SES's pause lifted; its parked email put back and a drain started (the release's grants).
    sending_status = [
        _stmt("Registry", [*_READ, "dynamodb:UpdateItem", "dynamodb:Scan"], [tables["TenantsTable"]]),
        ses_tenant_status,
        _stmt("DrainerOnDuty", _READ, [tables["LeasesTable"]]),
    ]
    link_key = _stmt(
        "LinkSigningKey",
        ["secretsmanager:GetSecretValue"],
        [f"arn:aws:secretsmanager:*:*:secret:{r.link_secret_name}-*"],
    )
    precompile.append(link_key)
    send.append(link_key)
    # Moving scheduled and parked email onto queues: the releaser, and resume/cancel/retry over HTTP.
    release = [
        _stmt("ScheduleStore", [*_READ, "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem"], [schedule]),
        _stmt(
            "ScheduledEmail", ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"], [scheduled_objects, parked_objects]
        ),
        _stmt("Payloads", ["s3:PutObject"], [queued_objects]),
        create_queues,
        queue_alarms,
        _stmt("Ledger", _READ + _WRITE, [tables["LedgerTable"]]),
        _stmt("StartDrain", ["lambda:InvokeFunction"], [send_fn]),
    ]
    sending_status.extend(release)
    api = [
        link_key,
        *release,
        # Unsubscribes; the tenant's list read, added to (25 conditional updates a transaction, which IAM
        # authorizes as each item's UpdateItem), its own (manual) entries lifted and the address checked again.
        _stmt(
            "Suppressions",
            [
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:Query",
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:DeleteItem",
                "dynamodb:DescribeTable",
            ],
            [suppressions],
        ),
        _stmt("LedgerPages", ["dynamodb:Query"], [tables["LedgerTable"]]),
        # A campaign's counters; the tenant's campaigns listed newest first (the index, then the items).
        _stmt(
            "Counters",
            [*_READ, "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchGetItem"],
            [tables["CampaignsTable"], f"{tables['CampaignsTable']}/index/{CAMPAIGNS_BY_CREATED}"],
        ),
        # Opens and clicks added to the campaign's minutes; its minutes read for its timeline.
        _stmt(
            "Timeline", ["dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:DescribeTable"], [tables["TimelineTable"]]
        ),
        _stmt("Tenants", [*_READ, "dynamodb:UpdateItem"], [tables["TenantsTable"]]),
        _stmt("DailyCapUse", _READ, [tables["UsageTable"]]),  # a free tenant's use of today's cap (GET /tenant)
        _stmt("EventLog", ["dynamodb:Query", "dynamodb:DescribeTable"], [tables["EventLogTable"]]),  # GET /events
        _stmt("FailedEmail", ["s3:GetObject"], [failed_objects]),
        # A campaign's recipients exported as CSV, and read back through the presigned link that the role
        # signs (chalicelib.stores.exports).
        _stmt("Exports", ["s3:PutObject", "s3:GetObject"], [exported_objects]),
        # Uploads: a presigned POST and a presigned download are made with this role's keys, which must
        # allow what they do; inline recipients kept as an upload's; an upload's first rows read (preview).
        _stmt("Uploads", ["s3:PutObject", "s3:GetObject"], [f"{bucket}/{UPLOADS_PREFIX}*"]),
        _stmt(
            "UploadRows",
            [*_READ, "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"],
            [tables["UploadsTable"]],
        ),
        _stmt("DrainerOnDuty", _READ, [tables["LeasesTable"]]),  # retry-failed starts a drain if none
        ses_tenant_status,
        # The console's sessions: started, read, kept alive and ended; a tenant's listed by the index and read
        # in batches for its admins (chalicelib.stores.sessions).
        _stmt(
            "Sessions",
            [
                *_READ,
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
                "dynamodb:Query",
                "dynamodb:BatchGetItem",
            ],
            [tables["SessionsTable"], f"{tables['SessionsTable']}/index/{SESSIONS_BY_TENANT}"],
        ),
        # A tenant's API keys: a request's key read by its digest; listed, made and revoked in the console
        # (chalicelib.stores.api_keys).
        _stmt(
            "ApiKeys",
            [*_READ, "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem"],
            [tables["ApiKeysTable"]],
        ),
        # Wrong sign-in keys counted per client address (chalicelib.stores.attempts): read, and added to.
        _stmt("SignInAttempts", [*_READ, "dynamodb:UpdateItem"], [tables["AttemptsTable"]]),
        # A tenant's people: read at each request of their sessions, listed, invited, changed and removed;
        # the tenants of an address by the index (chalicelib.stores.people).
        _stmt(
            "People",
            [*_READ, "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:DeleteItem"],
            [tables["PeopleTable"], f"{tables['PeopleTable']}/index/{PEOPLE_BY_ADDRESS}"],
        ),
        # Emailed sign-in links: made, read and used once (chalicelib.stores.sign_in_links).
        _stmt("SignInLinks", [*_READ, "dynamodb:PutItem", "dynamodb:UpdateItem"], [tables["SignInLinksTable"]]),
        # The console's own email (sign-in links, invitations) from the stage's MOONSEND_CONSOLE_FROM only,
        # with no configuration set (chalicelib.console.mail): the identity SES checks is the address's own, or
        # its domain's when the address has none.
        *(
            [_stmt("ConsoleMail", ["ses:SendEmail", "ses:SendRawEmail"], _identities(console_from))]
            if console_from
            else []
        ),
    ]
    releaser = [
        *release,
        _stmt("Counters", [*_READ, "dynamodb:UpdateItem"], [tables["CampaignsTable"]]),
        # Marking the tenant's queue used (chalicelib.jobs.idle_queues) before putting email on it.
        _stmt("QueueActivity", [*_READ, "dynamodb:UpdateItem"], [tables["TenantsTable"]]),
    ]
    retire = [
        _stmt("QueueActivity", [*_READ, "dynamodb:UpdateItem", "dynamodb:Scan"], [tables["TenantsTable"]]),
        _stmt("IdleQueues", ["sqs:GetQueueUrl", "sqs:GetQueueAttributes", "sqs:DeleteQueue"], [tenant_queues]),
        _stmt("IdleAlarms", ["cloudwatch:DeleteAlarms"], [f"arn:aws:cloudwatch:*:*:alarm:{r.tenant_queue_prefix}*"]),
        _stmt("Lease", _READ, [tables["LeasesTable"]]),
    ]
    # Dead letters are read and hidden between looks, never deleted or sent (operators redrive them).
    reconcile = [
        _stmt(
            "DeadLetters",
            ["sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility"],
            [_queue(r.dead_letter_queue.name)],
        ),
        _stmt("Ledger", _READ + _WRITE, [tables["LedgerTable"]]),
        _stmt("Counters", _READ + _WRITE, [tables["CampaignsTable"]]),
        _stmt("Payloads", ["s3:GetObject"], [queued_objects]),
        _stmt("FailedEmail", ["s3:PutObject"], [failed_objects]),
    ]
    sweep = [
        _stmt("ListStageQueues", ["sqs:ListQueues"], "*"),
        _stmt("QueueDepth", ["sqs:GetQueueAttributes", "sqs:GetQueueUrl"], stage_queues),
        # Each queue's lease; the queues a drain held lately (a scan: chalicelib.jobs.queues_in_use).
        _stmt("Lease", [*_READ, "dynamodb:Scan"], [tables["LeasesTable"]]),
        # The tenants whose queue was used this hour or the last: the queues looked at every minute; a queue
        # found holding email marked in use for the hour (chalicelib.jobs.queues_in_use).
        _stmt("QueuesInUse", ["dynamodb:Query"], [f"{tables['TenantsTable']}/index/{TENANTS_BY_QUEUE_HOUR}"]),
        _stmt("QueueKeptInUse", ["dynamodb:UpdateItem"], [tables["TenantsTable"]]),
        _stmt("StartDrain", ["lambda:InvokeFunction"], [send_fn]),
        # The oldest queued email's age (chalicelib.jobs.queue_age): neither action takes a resource.
        _stmt("QueueAges", ["cloudwatch:GetMetricData", "cloudwatch:PutMetricData"], "*"),
    ]
    digest_fn = f"arn:aws:lambda:*:*:function:{r.function_name('run_digest')}"
    digest_rows = [*_READ, "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem"]
    # A digest's run: its rows read, held, marked and pruned; its email through precompile's steps.
    run_digest = [
        # Not the tenants' secrets: a digest mails with its tenant's registered keys, never compared.
        *(
            st
            for st in precompile
            if st["Sid"] not in ("Digests", "DigestSchedules", "PassSchedulerRole", "TenantSecrets")
        ),
        _stmt("Digests", digest_rows, [tables["DigestsTable"]]),
        _stmt("GoOn", ["lambda:InvokeFunction"], [digest_fn]),  # a run out of time continues itself
    ]
    webhooks_table, webhooks_queue = tables["WebhooksTable"], _queue(r.webhooks_queue.name)
    held_table = tables["ParkedDeliveriesTable"]
    jobs_fn = f"arn:aws:lambda:*:*:function:{r.function_name('webhook_jobs')}"
    upload_jobs_fn = f"arn:aws:lambda:*:*:function:{r.function_name('upload_jobs')}"
    put_deliveries = _stmt("PutDeliveries", ["sqs:GetQueueUrl", "sqs:SendMessage"], [webhooks_queue])
    api.extend(
        [
            # A status reads a digest's rows; a run asked for is claimed on its definition (its rate limit).
            _stmt("DigestStatus", [*_READ, "dynamodb:Query", "dynamodb:UpdateItem"], [tables["DigestsTable"]]),
            # Registered, listed, removed; enabled again with its held requests put back (replay).
            _stmt(
                "WebhookEndpoints",
                [*_READ, "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"],
                [webhooks_table],
            ),
            # A disabled endpoint's held requests counted (up to a bound); a replay or a removal started as
            # a job (a row of that table, which the listing reads) and run by webhook_jobs, in the background.
            _stmt(
                "ParkedDeliveries",
                ["dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DescribeTable"],
                [held_table],
            ),
            _stmt("RunDigest", ["lambda:InvokeFunction"], [digest_fn]),
            _stmt("StartWebhookJobs", ["lambda:InvokeFunction"], [jobs_fn]),
            _stmt("StartUploadJobs", ["lambda:InvokeFunction"], [upload_jobs_fn]),
        ]
    )
    # The ledger's stream, read by Lambda's poller as the function's role (what AWS documents it needs).
    webhook_events = [
        _stmt(
            "LedgerStream",
            ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"],
            [f"{tables['LedgerTable']}/stream/*"],
        ),
        _stmt("ListStreams", ["dynamodb:ListStreams"], "*"),
        # Each tenant's endpoints read (never written: their secrets are there); deliveries for a disabled
        # one held in a table of their own.
        _stmt("WebhookEndpoints", ["dynamodb:Query", "dynamodb:DescribeTable"], [webhooks_table]),
        _stmt("ParkedDeliveries", ["dynamodb:PutItem", "dynamodb:DescribeTable"], [held_table]),
        # Every event kept for the tenant's GET /events, whether or not it has an endpoint.
        _stmt("EventLog", ["dynamodb:BatchWriteItem", "dynamodb:DescribeTable"], [tables["EventLogTable"]]),
        put_deliveries,
        # Each campaign the batch changed noted for its recount (chalicelib.stores.recounts).
        _stmt("RecountNotes", ["dynamodb:BatchWriteItem", "dynamodb:DescribeTable"], [tables["RecountsTable"]]),
        # Lambda's stream poller puts the shard pointers of what it gave up on there, with the function's role.
        _stmt("StreamOnFailureDestination", ["sqs:SendMessage"], [_queue(r.failed_invocations_queue.name)]),
    ]
    deliver_webhooks = [
        # The endpoint read, and disabled when it asks (410) or keeps failing; requests held for replay. A
        # tenant's endpoints listed, its events kept and their deliveries queued, for events webhook_events
        # could not keep (chalicelib.webhooks.later_events).
        _stmt("WebhookEndpoints", [*_READ, "dynamodb:UpdateItem", "dynamodb:Query"], [webhooks_table]),
        _stmt("ParkedDeliveries", ["dynamodb:PutItem", "dynamodb:DescribeTable"], [held_table]),
        _stmt("EventLog", ["dynamodb:BatchWriteItem", "dynamodb:DescribeTable"], [tables["EventLogTable"]]),
        put_deliveries,
        _stmt(
            "Deliveries",
            [
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "sqs:GetQueueUrl",
                "sqs:ChangeMessageVisibility",
            ],
            [webhooks_queue],
        ),
    ]
    # An endpoint's held requests replayed or deleted, a page at a time, its job's row advanced after each
    # (chalicelib.webhooks.jobs); never the endpoints' table, where the secrets are.
    webhook_jobs = [
        _stmt(
            "ParkedDeliveries",
            [
                "dynamodb:Query",
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
                "dynamodb:BatchWriteItem",
                "dynamodb:DescribeTable",
            ],
            [held_table],
        ),
        put_deliveries,
        _stmt("GoOn", ["lambda:InvokeFunction"], [jobs_fn]),  # a job out of time continues itself
    ]
    # An upload read (its file, ranged; its recipients and refused rows written; the tenant's list counted)
    # and a campaign published from it, a step at a time, each step recorded on its row (chalicelib.produce).
    upload_jobs = [
        _stmt(
            "UploadFiles",
            ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
            [f"{bucket}/{UPLOADS_PREFIX}*"],
        ),
        _stmt("UploadRows", [*_READ, "dynamodb:UpdateItem"], [tables["UploadsTable"]]),
        _stmt("TenantSuppressions", ["dynamodb:Query", "dynamodb:DescribeTable"], [tables["SuppressionsTable"]]),
        _stmt("CampaignControl", _READ, [tables["CampaignsTable"]]),  # a pause or a cancel stops it
        _stmt("Publish", ["sns:Publish"], [f"arn:aws:sns:*:*:{r.precompile_topic.name}"]),
        link_key,  # the proof beside a paid tenant's key version (chalicelib.core.links)
        _stmt("GoOn", ["lambda:InvokeFunction"], [upload_jobs_fn]),  # a publication out of time continues itself
    ]
    # The noted campaigns read and removed; each one's ledger partition tallied and its counters read and
    # corrected under a condition (chalicelib.jobs.recount).
    recount = [
        _stmt(
            "RecountNotes",
            ["dynamodb:Scan", "dynamodb:DeleteItem", "dynamodb:DescribeTable"],
            [tables["RecountsTable"]],
        ),
        _stmt("LedgerTally", ["dynamodb:Query", "dynamodb:DescribeTable"], [tables["LedgerTable"]]),
        _stmt(
            "Counters",
            ["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DescribeTable"],
            [tables["CampaignsTable"]],
        ),
    ]
    docs = {
        "precompile_email": precompile,
        "send_emails": send,
        "ses_events": events,
        "ses_sending_status": sending_status,
        "sweep_queues": sweep,
        "release_scheduled": releaser,
        "retire_idle_queues": retire,
        "reconcile_dead_letters": reconcile,
        "recount_campaigns": recount,
        "run_digest": run_digest,
        "webhook_events": webhook_events,
        "deliver_webhooks": deliver_webhooks,
        "webhook_jobs": webhook_jobs,
        "upload_jobs": upload_jobs,
        "api_handler": api,
    }
    # Lambda puts an async event that failed every attempt on the on-failure queue with the function's
    # own role, which must be allowed to (api_handler answers HTTP, and the polled functions are given
    # their records by Lambda's pollers: none is invoked asynchronously, and none has a destination).
    on_failure = _stmt("OnFailureDestination", ["sqs:SendMessage"], [_queue(r.failed_invocations_queue.name)])
    not_async = {"api_handler", *(FUNCTION_IDS[k] for k in POLLED_FUNCTION_IDS)}
    for fn, stmts in docs.items():
        if fn not in not_async:
            stmts.append(on_failure)
    return {fn: {"Version": "2012-10-17", "Statement": [_logs(r, fn), *stmts]} for fn, stmts in docs.items()}


def policy_file(stage: str, function: str) -> str:
    """The file name Chalice's config refers to (relative to `.chalice/`)."""
    return f"policy-{stage}-{function}.json"


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"


def write_policies(stage: str, account_id: str = "123456789012", chalice_dir: Path = ROOT / ".chalice") -> list[Path]:
    """Write the stage's policy files where Chalice reads them; returns their paths."""
    written = []
    for fn, doc in policies(resources_for("moonsend", stage, account_id), console_from_of(stage)).items():
        path = chalice_dir / policy_file(stage, fn)
        path.write_text(render(doc), encoding="utf-8")
        written.append(path)
    return written
