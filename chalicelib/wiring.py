"""Building the domain objects once per Lambda container, from the environment.

Handlers in app.py ask for what they need here; nothing is created at import time, so importing
app.py stays cheap (Chalice's packager and cold starts both import it).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from chalicelib.console.guard import INVITATIONS, LINK_REQUESTS, LINKS_PER_MAILBOX, WRONG_KEYS, SignInGuard
from chalicelib.console.links import SignInLinks
from chalicelib.console.mail import SesMailer
from chalicelib.console.people import People
from chalicelib.console.sessions import Sessions
from chalicelib.control.api_keys import ApiKeys
from chalicelib.control.campaign_actions import CampaignActions, Rescheduling, TenantPausing
from chalicelib.control.campaign_reads import CampaignReads
from chalicelib.control.campaign_sends import CampaignSends, TenantFacts
from chalicelib.control.event_reads import EventReads
from chalicelib.control.recipient_export import RecipientExport
from chalicelib.control.retry import RetryFailed
from chalicelib.control.suppression_api import SuppressionApi
from chalicelib.control.tenant_api import DigestRuns, TenantApi
from chalicelib.control.tenant_view import PlatformTerms, TenantView
from chalicelib.control.webhook_registration import BackgroundJobs, WebhookRegistration
from chalicelib.core import aws
from chalicelib.core.config import Settings
from chalicelib.core.contract import iso_ms
from chalicelib.core.links import LinkKeys, LinkSigner
from chalicelib.core.ports import SqsDrain
from chalicelib.digest.assembly import DigestAssembly
from chalicelib.digest.intake import DigestIntake
from chalicelib.digest.runner import DigestRunner
from chalicelib.digest.schedules import DigestSchedules, run_input
from chalicelib.digest.status import DigestStatusReader
from chalicelib.digest.topic import PrecompileTopic
from chalicelib.feedback.reports import Reports
from chalicelib.feedback.sending_status import ParkedLeft, SendingStatus
from chalicelib.feedback.ses_events import SesEvents
from chalicelib.feedback.unsubscribe import Unsubscribes
from chalicelib.ingest.precompile import Outlets, Precompiler, RecipientChecks, Rendering, SenderChecks
from chalicelib.ingest.renderer import TemplateCache
from chalicelib.ingest.tracking import Tracking
from chalicelib.jobs.dead_letters import DeadLetterQueue, DeadLetters
from chalicelib.jobs.idle_queues import IdleQueueCleanup
from chalicelib.jobs.ledger_stream import LedgerStream
from chalicelib.jobs.queue_age import QueueAge
from chalicelib.jobs.queues_in_use import QueuesInUse
from chalicelib.jobs.recount import Recount
from chalicelib.jobs.releaser import Releaser
from chalicelib.jobs.sweeper import Sweeper
from chalicelib.produce.fanout import Publication
from chalicelib.produce.jobs import UploadJobs
from chalicelib.produce.reading import UploadReader
from chalicelib.queueing.drain_starter import DrainStarter, trusted_for_s
from chalicelib.queueing.email_queue import EmailQueue
from chalicelib.queueing.enqueuer import Enqueuer
from chalicelib.queueing.parked_email import ParkedEmail
from chalicelib.queueing.tenant_queues import TenantQueues
from chalicelib.send.delivery import Delivery
from chalicelib.send.drain_chain import DrainChain
from chalicelib.send.drainer import Drainer
from chalicelib.send.executor import Executor
from chalicelib.send.identity import SendingIdentity
from chalicelib.send.message_actions import MessageActions
from chalicelib.send.parking import Parking
from chalicelib.send.ports import SesSending
from chalicelib.send.rate_limiter import Pacings
from chalicelib.send.sent_ahead import SentAhead
from chalicelib.send.ses_sender import SesSender
from chalicelib.send.sides import Content, DrainQueues, GateReads, LedgerSide, SendState, SesSide
from chalicelib.send.triggers import continuation_event, sweep_event
from chalicelib.stores.api_keys import ApiKeyStore
from chalicelib.stores.attempts import AttemptStore
from chalicelib.stores.campaign_control import CampaignControl
from chalicelib.stores.campaign_sender import CampaignSenders
from chalicelib.stores.campaign_stats import CampaignStats
from chalicelib.stores.daily_cap import DailyCap
from chalicelib.stores.digests import DigestStore
from chalicelib.stores.event_log import EventLog
from chalicelib.stores.exports import Exports
from chalicelib.stores.failed_copies import FailedCopies
from chalicelib.stores.free_senders import FreeAddresses
from chalicelib.stores.lease import Leases
from chalicelib.stores.ledger import Ledger
from chalicelib.stores.pauses import SES
from chalicelib.stores.payloads import PayloadStore
from chalicelib.stores.people import PeopleStore
from chalicelib.stores.platform_identities import PlatformIdentities
from chalicelib.stores.ports.campaigns import ControlSwitch
from chalicelib.stores.ports.ledger import LedgerClaims
from chalicelib.stores.ports.sending import FreeAddressRecords, Limits, ReputationCounts, SesTenantRecords
from chalicelib.stores.ports.suppression import SuppressionList
from chalicelib.stores.ports.tenants import TenantRecords
from chalicelib.stores.queue_activity import QueueActivity
from chalicelib.stores.recorder import Recorder
from chalicelib.stores.recounts import Recounts
from chalicelib.stores.reputation import Reputation
from chalicelib.stores.schedule import ScheduleStore
from chalicelib.stores.ses_tenants import SesTenants
from chalicelib.stores.sessions import SessionStore
from chalicelib.stores.sign_in_links import SignInLinkStore
from chalicelib.stores.suppression import Suppressions
from chalicelib.stores.tenant_secrets import TenantSecrets
from chalicelib.stores.tenants import TenantRegistry
from chalicelib.stores.timeline import Timeline
from chalicelib.stores.upload_files import UploadFiles
from chalicelib.stores.uploads import Uploads
from chalicelib.stores.webhook_jobs import Job, WebhookJobs
from chalicelib.stores.webhooks import HeldRequests, WebhookEndpoints
from chalicelib.webhooks.deliverer import WebhookDeliverer
from chalicelib.webhooks.delivery_queue import DeliveryQueue
from chalicelib.webhooks.fanout import WebhookFanout
from chalicelib.webhooks.jobs import WebhookJobRunner, job_event
from chalicelib.webhooks.queue_messages import QueueMessages
from chalicelib.webhooks.trial_request import WebhookTester
from chalicelib.webhooks.url_policy import AddressPolicy


class Container:
    """Everything one Lambda container shares between invocations."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def tenants(self) -> TenantRegistry:
        r = self.settings.resources
        secrets = TenantSecrets.of(r.tenant_secrets_alias, self.settings.region)
        registry = TenantRegistry(r.tenants_table.name, self.settings.region, secrets)
        registry.warm()
        return registry

    @cached_property
    def stats(self) -> CampaignStats:
        stats = CampaignStats(self.settings.resources.campaigns_table.name, self.settings.region, self.timeline)
        stats.warm()
        return stats

    @cached_property
    def timeline(self) -> Timeline:
        return Timeline(self.settings.resources.timeline_table.name, self.settings.region)

    @cached_property
    def queue_activity(self) -> QueueActivity:
        return QueueActivity(self.settings.resources.tenants_table.name, self.settings.region)

    @cached_property
    def queues(self) -> TenantQueues:
        region = self.settings.region
        cloudwatch = aws.client("cloudwatch", region)
        return TenantQueues(self.settings, aws.client("sqs", region), cloudwatch, self.queue_activity)

    @cached_property
    def ledger(self) -> Ledger:
        ledger = Ledger(self.settings.resources.ledger_table.name, self.settings.region)
        ledger.warm()
        return ledger

    @cached_property
    def recorder(self) -> Recorder:
        """The one way to record an outcome (chalicelib.stores.recorder), built here only; a stage that gathers
        its counts asks it for `gathering()`."""
        return Recorder(self.ledger, self.stats)

    @cached_property
    def payloads(self) -> PayloadStore:
        s = self.settings
        return PayloadStore(aws.client("s3", s.region), s.resources.payload_bucket.name, s.payload_threshold_bytes)

    @cached_property
    def precompiler(self) -> Precompiler:
        return Precompiler(
            self.settings,
            SenderChecks(self.tenants, self.free_addresses, self.ses.account_of, self.campaign_senders),
            RecipientChecks(self.ledger, self.suppressions, self.daily_cap),
            Rendering(TemplateCache(), self.links),
            Outlets(self.email_queue, self.drain_starter, self.schedule),
            self.recorder,
            self.stats,
        )

    @cached_property
    def precompile_topic(self) -> PrecompileTopic:
        return PrecompileTopic(self.precompiler, self.digest_intake)

    @cached_property
    def digests(self) -> DigestStore:
        return DigestStore(self.settings.resources.digests_table.name, self.settings.region)

    @cached_property
    def digest_intake(self) -> DigestIntake:
        return DigestIntake(
            self.digests,
            self.digest_schedules,
            self.tenants,
            self.free_addresses,
            self.ses.account_of,
            self.recorder.gathering,
        )

    @cached_property
    def digest_runner(self) -> DigestRunner:
        return DigestRunner(self.digest_assembly, self.invoke_async)

    @cached_property
    def digest_schedules(self) -> DigestSchedules:
        s, r = self.settings, self.settings.resources
        client = aws.client("scheduler", s.region)
        return DigestSchedules(
            client, r.digest_schedule_prefix, s.function_arn("run_digest"), s.role_arn(r.digest_scheduler_role)
        )

    @cached_property
    def digest_assembly(self) -> DigestAssembly:
        return DigestAssembly(self.digests, self.tenants, self.precompiler)

    @cached_property
    def email_queue(self) -> EmailQueue:
        return EmailQueue(self.queues, Enqueuer(aws.client("sqs", self.settings.region)), self.payloads)

    @cached_property
    def drain_starter(self) -> DrainStarter:
        return DrainStarter(self.leases, self.start_drain, trusted_s=trusted_for_s(self.settings.long_poll_seconds))

    @cached_property
    def parked(self) -> ParkedEmail:
        return ParkedEmail(self.schedule, self.email_queue, self.start_drain)

    @cached_property
    def free_addresses(self) -> FreeAddresses:
        return FreeAddresses(self.settings.resources.tenants_table.name, self.settings.region, self.platform_identities)

    @cached_property
    def platform_identities(self) -> PlatformIdentities:
        region = self.settings.region  # free-plan email goes out from the stage's region only
        return PlatformIdentities(lambda: aws.client("sesv2", region))

    @cached_property
    def campaign_senders(self) -> CampaignSenders:
        return CampaignSenders(self.settings.resources.campaigns_table.name, self.settings.region)

    @cached_property
    def daily_cap(self) -> DailyCap:
        s = self.settings
        cap = DailyCap(s.resources.usage_table.name, s.region, s.free_daily_cap)
        cap.warm()
        return cap

    @cached_property
    def ses(self) -> SesSender:
        s = self.settings
        r = s.resources
        if not s.ses_events:
            return SesSender(s.region, None, None)
        return SesSender(s.region, r.configuration_set, s.topic_arn(r.events_topic.name))

    @cached_property
    def ses_tenants(self) -> SesTenants:
        s = self.settings
        r = s.resources
        return SesTenants(
            lambda region: aws.send_client("sesv2", region),
            s.account_id,
            r.prefix,
            r.configuration_set if s.ses_events else None,
            s.ses_tenant_policy,
        )

    @cached_property
    def ses_events(self) -> SesEvents:
        return SesEvents(
            self.recorder,
            self.suppressions,
            self.tenants,
            self.settings.account_id,
            self.reputation,
            self.ses_tenants,
            self.settings.region,
        )

    @cached_property
    def links(self) -> LinkSigner:
        s = self.settings
        base_url = s.link_base_url or s.api_url  # a custom domain outlives the stage's execute-api host
        if s.link_secret is not None:
            return LinkSigner(LinkKeys.parse(s.link_secret), base_url)
        # On AWS: read at the container's start, then again every few minutes and for a key id not known yet
        # (chalicelib.core.links), so that a rotation reaches every container.
        sm = aws.client("secretsmanager", s.region)
        name = s.resources.link_secret_name

        def read() -> LinkKeys:
            return LinkKeys.parse(sm.get_secret_value(SecretId=name)["SecretString"])

        return LinkSigner(read(), base_url, reread=read)

    @cached_property
    def reports(self) -> Reports:
        return Reports(self.stats)

    @cached_property
    def api_key_store(self) -> ApiKeyStore:
        return ApiKeyStore(self.settings.resources.api_keys_table.name, self.settings.region)

    @cached_property
    def api_keys(self) -> ApiKeys:
        return ApiKeys(self.api_key_store, self.tenants)

    @cached_property
    def tracking(self) -> Tracking:
        return Tracking(self.links, self.recorder, self.ledger)

    @cached_property
    def unsubscribes(self) -> Unsubscribes:
        return Unsubscribes(self.links, self.suppressions, self.recorder)

    @cached_property
    def suppressions(self) -> Suppressions:
        s = Suppressions(self.settings.resources.suppressions_table.name, self.settings.region)
        s.warm()
        return s

    @cached_property
    def drainer(self) -> Drainer:
        return send_path(
            self.settings,
            aws.client("sqs", self.settings.region),
            SendStores(
                self.tenants,
                self.recorder,
                self.ledger,
                self.suppressions,
                self.campaign_control,
                self.reputation,
                self.failed_copies,
                self.free_addresses,
            ),
            SesParts(self.ses, self.ses_tenants),
            Content(self.payloads, self.links),
            self.parked,
            self.drain_starter,
        )

    @cached_property
    def drain_chain(self) -> DrainChain:
        """What send_emails' link of a queue's drain chain uses (chalicelib.send.drain_chain)."""
        return DrainChain(self.leases, self.drainer, self.reinvoke, self.settings.deadline_margin_ms)

    @cached_property
    def actions(self) -> CampaignActions:
        return CampaignActions(
            self.settings,
            self.campaign_control,
            self.releaser,
            self.parked,
            self.retry,
            TenantPausing(self.tenants, self.ses_tenants),
            Rescheduling(self.schedule, self.stats),
        )

    @cached_property
    def sending_status(self) -> SendingStatus:
        def resume_ses(user_id: str) -> tuple[bool, str]:
            done = self.actions.resume_tenant(user_id, by_tenant=False, owner=SES)
            if not done.pauses and self.parked.left(user_id):
                # SQS refused some of it back: raised, so that Lambda's retry (which finds no pause) puts it back.
                raise ParkedLeft(f"{user_id}'s parked email is not all back on its queue: {done.message}")
            return done.ok, done.message

        return SendingStatus(
            self.tenants,
            self.ses_tenants,
            resume_ses,
            lambda: (s.user_id for s in self.tenants.every()),
            self.settings.resources.prefix,
            self.settings.region,
        )

    @cached_property
    def tenant_api(self) -> TenantApi:
        digests = DigestRuns(DigestStatusReader(self.digests), self.start_digest_run)
        return TenantApi(self.actions, self.ledger, self.stats, digests, self.campaign_sends.publish_again)

    @cached_property
    def campaign_reads(self) -> CampaignReads:
        return CampaignReads(self.stats, self.timeline)

    @cached_property
    def suppression_api(self) -> SuppressionApi:
        return SuppressionApi(self.suppressions)

    @cached_property
    def event_reads(self) -> EventReads:
        return EventReads(self.event_log)

    @cached_property
    def tenant_view(self) -> TenantView:
        s = self.settings
        terms = PlatformTerms(s.region, s.free_rate_per_second, s.free_daily_cap)
        return TenantView(self.tenants, self.daily_cap, self.ses_tenants, self.free_addresses, terms)

    @cached_property
    def webhook_endpoints(self) -> WebhookEndpoints:
        return WebhookEndpoints(self.settings.resources.webhooks_table.name, self.settings.region)

    @cached_property
    def webhook_registration(self) -> WebhookRegistration:
        tester = WebhookTester(self.webhook_endpoints, allow_loopback=self.settings.webhook_allow_loopback)
        jobs = BackgroundJobs(self.webhook_jobs, self.start_webhook_job)
        return WebhookRegistration(self.webhook_endpoints, tester, self.held_requests, jobs, self.webhook_addresses)

    @cached_property
    def webhook_addresses(self) -> AddressPolicy:
        return AddressPolicy(allow_loopback=self.settings.webhook_allow_loopback)

    @cached_property
    def webhook_jobs(self) -> WebhookJobs:
        return WebhookJobs(self.settings.resources.parked_deliveries_table.name, self.settings.region)

    @cached_property
    def webhook_job_runner(self) -> WebhookJobRunner:
        return WebhookJobRunner(self.webhook_jobs, self.held_requests, self.delivery_queue, self.invoke_async)

    def start_webhook_job(self, job: Job) -> None:
        """Invoke webhook_jobs asynchronously with a job (a replay or a removal's held requests)."""
        self.invoke_async(self.settings.resources.function_name("webhook_jobs"), job_event(job))

    @cached_property
    def held_requests(self) -> HeldRequests:
        return HeldRequests(self.settings.resources.parked_deliveries_table.name, self.settings.region)

    @cached_property
    def delivery_queue(self) -> DeliveryQueue:
        s = self.settings
        return DeliveryQueue(aws.client("sqs", s.region), s.resources.webhooks_queue.name)

    @cached_property
    def webhook_fanout(self) -> WebhookFanout:
        return WebhookFanout(self.webhook_endpoints, self.delivery_queue, self.held_requests, self.event_log)

    @cached_property
    def event_log(self) -> EventLog:
        s = self.settings
        log = EventLog(s.resources.event_log_table.name, s.region, s.events_retention_days)
        log.warm()
        return log

    @cached_property
    def webhook_deliverer(self) -> WebhookDeliverer:
        return WebhookDeliverer(
            self.webhook_endpoints,
            self.held_requests,
            self.delivery_queue,
            self.settings.webhook_retry_s,
            self.webhook_addresses,
        )

    @cached_property
    def webhook_queue_messages(self) -> QueueMessages:
        return QueueMessages(self.webhook_deliverer, self.webhook_fanout.later, self.delivery_queue)

    @cached_property
    def failed_copies(self) -> FailedCopies:
        s = self.settings
        return FailedCopies(aws.client("s3", s.region), s.resources.payload_bucket.name)

    @cached_property
    def recipient_export(self) -> RecipientExport:
        s = self.settings
        exports = Exports(aws.client("s3", s.region), s.resources.payload_bucket.name)
        return RecipientExport(self.tenant_api.recipients, exports)

    # --- sending without code: uploads, their reading, campaigns published from them -------------------
    @cached_property
    def uploads(self) -> Uploads:
        return Uploads(self.settings.resources.uploads_table.name, self.settings.region)

    @cached_property
    def upload_files(self) -> UploadFiles:
        s = self.settings
        return UploadFiles(aws.client("s3", s.region), s.resources.payload_bucket.name)

    @cached_property
    def upload_jobs(self) -> UploadJobs:
        reader = UploadReader(self.uploads, self.upload_files, self.suppressions.addresses)
        return UploadJobs(self.uploads, reader, self.publication)

    @cached_property
    def publication(self) -> Publication:
        s = self.settings
        sns, topic = aws.client("sns", s.region), s.topic_arn(s.resources.precompile_topic.name)

        def publish(message: str) -> None:
            sns.publish(TopicArn=topic, Message=message)

        return Publication(
            self.uploads,
            self.upload_files,
            lambda user, campaign: self.campaign_control.state(user, campaign, fresh=True),
            publish,
            self.links.sender_proof,
            self.invoke_async,
        )

    @cached_property
    def campaign_sends(self) -> CampaignSends:
        s = self.settings
        upload_jobs = s.resources.function_name("upload_jobs")
        facts = TenantFacts(
            lambda user: self.tenants.get(user, fresh=True),
            lambda user, address: self.people_store.get(user, address) is not None,
            self.daily_cap,
        )
        return CampaignSends(
            self.uploads,
            self.upload_files,
            facts,
            lambda event: self.invoke_async(upload_jobs, event),
            self.campaign_reads.show_for,
        )

    @cached_property
    def retry(self) -> RetryFailed:
        s = self.settings
        return RetryFailed(s, self.ledger, self.recorder, self.failed_copies, self.email_queue, self.drain_starter)

    @cached_property
    def campaign_control(self) -> CampaignControl:
        return CampaignControl(self.settings.resources.campaigns_table.name, self.settings.region)

    @cached_property
    def reputation(self) -> Reputation:
        s = self.settings
        limits = Limits(s.bounce_limit, s.complaint_limit, s.reputation_window_days, s.reputation_min_sent)
        return Reputation(s.resources.usage_table.name, s.region, limits, s.resources.ledger_table.name)

    @cached_property
    def leases(self) -> Leases:
        return Leases(self.settings.resources.leases_table.name, self.settings.region)

    @cached_property
    def idle_queues(self) -> IdleQueueCleanup:
        s = self.settings
        return IdleQueueCleanup(
            s, self.queue_activity, aws.client("sqs", s.region), aws.client("cloudwatch", s.region), self.leases
        )

    @cached_property
    def people_store(self) -> PeopleStore:
        return PeopleStore(self.settings.resources.people_table.name, self.settings.region)

    @cached_property
    def people(self) -> People:
        return People(self.people_store)

    @cached_property
    def sessions(self) -> Sessions:
        store = SessionStore(self.settings.resources.sessions_table.name, self.settings.region)
        return Sessions(store, self.people_store, self.api_keys)

    @cached_property
    def sign_in_links(self) -> SignInLinks:
        s = self.settings
        return SignInLinks(SignInLinkStore(s.resources.sign_in_links_table.name, s.region), self.people)

    @cached_property
    def console_mailer(self) -> SesMailer:
        return SesMailer(aws.client("sesv2", self.settings.region))

    def _attempts(self, kind: str, limit: int) -> SignInGuard:
        store = AttemptStore(self.settings.resources.attempts_table.name, self.settings.region)
        return SignInGuard(store, limit=limit, kind=kind)

    @cached_property
    def sign_in_guard(self) -> SignInGuard:
        """Wrong keys and unusable sign-in links, per client address."""
        return self._attempts("wrong-key", WRONG_KEYS)

    @cached_property
    def link_request_guard(self) -> SignInGuard:
        """Sign-in links asked for, per client address."""
        return self._attempts("link-request", LINK_REQUESTS)

    @cached_property
    def mailbox_guard(self) -> SignInGuard:
        """Sign-in links and invitations mailed, per address."""
        return self._attempts("link-mailbox", LINKS_PER_MAILBOX)

    @cached_property
    def invitation_guard(self) -> SignInGuard:
        """Invitation emails, per tenant."""
        return self._attempts("invitation", INVITATIONS)

    @cached_property
    def recounts(self) -> Recounts:
        return Recounts(
            self.settings.resources.recounts_table.name, self.settings.region, self.settings.recount_settle_s
        )

    @cached_property
    def recount(self) -> Recount:
        return Recount(self.recounts, self.ledger, self.stats, self.settings.recount_settle_s)

    @cached_property
    def ledger_stream(self) -> LedgerStream:
        return LedgerStream(self.webhook_fanout, self.recounts)

    @cached_property
    def dead_letters(self) -> DeadLetters:
        s = self.settings
        sqs = aws.client("sqs", s.region)
        queue = s.resources.dead_letter_queue.name
        return DeadLetters(
            s, DeadLetterQueue(sqs, queue), self.ledger, self.recorder, self.payloads, self.failed_copies
        )

    @cached_property
    def sweeper(self) -> Sweeper:
        sqs = aws.client("sqs", self.settings.region)
        in_use = QueuesInUse(self.settings.resources, self.queue_activity, self.leases)
        return Sweeper(self.settings, sqs, self.leases, in_use, self.start_drain)

    @cached_property
    def queue_age(self) -> QueueAge:
        return QueueAge(aws.brief_client("cloudwatch", self.settings.region), self.settings.resources.stage)

    @cached_property
    def schedule(self) -> ScheduleStore:
        s = self.settings
        store = ScheduleStore(
            s.resources.schedule_table.name, s.region, aws.client("s3", s.region), s.resources.payload_bucket.name
        )
        store.warm()
        return store

    @cached_property
    def releaser(self) -> Releaser:
        return Releaser(
            self.settings,
            self.schedule,
            self.recorder,
            self.stats,
            self.campaign_control,
            self.email_queue,
            self.start_drain,
        )

    def start_drain(self, queue_name: str, start_at_ms: int | None = None, slot: int = 0) -> None:
        """Invoke send_emails asynchronously for a queue (the sweeper's and the releaser's way in)."""
        s = self.settings
        event = sweep_event(queue_name, s.topic_arn(s.resources.send_topic.name), start_at_ms, slot)
        self.invoke_async(s.resources.function_name("send_emails"), event)

    def start_digest_run(self, user_id: str, digest_id: str, at: float) -> None:
        """Invoke run_digest asynchronously for the period of `at` (a run asked for, not scheduled)."""
        event = run_input(user_id, digest_id, iso_ms(int(at * 1000)))
        self.invoke_async(self.settings.resources.function_name("run_digest"), event)

    def invoke_async(self, function_name: str, event: dict[str, Any]) -> None:
        """An asynchronous invocation (Lambda queues the event; its retries and on-failure destination apply)."""
        aws.client("lambda", self.settings.region).invoke(
            FunctionName=function_name, InvocationType="Event", Payload=json.dumps(event).encode()
        )

    def reinvoke(
        self,
        function_name: str,
        queue_name: str,
        generation: int,
        lease: str,
        slot: int = 0,
        start_at_ms: int | None = None,
        failures: int = 0,
    ) -> None:
        """Hand the drain (and its lease) on to a fresh asynchronous invocation of the same function, which
        sends from `start_at_ms` on (it may run in another container, with a pacing that starts afresh)."""
        topic = self.settings.topic_arn(self.settings.resources.send_topic.name)
        event = continuation_event(queue_name, generation, topic, lease, slot, start_at_ms, failures)
        self.invoke_async(function_name, event)


@dataclass(frozen=True)
class SendStores:
    """The stores the send path reads and writes (the container's, or a test's fakes)."""

    tenants: TenantRecords
    recorder: Recorder  # the container's one (chalicelib.stores.recorder)
    ledger: LedgerClaims
    suppressions: SuppressionList
    control: ControlSwitch
    reputation: ReputationCounts
    failed_copies: FailedCopies
    addresses: FreeAddressRecords  # whose each free-plan From address is, checked again at each send


@dataclass(frozen=True)
class SesParts:
    """SES as the send path uses it: the sends, and the free tenants' SES tenants."""

    ses: SesSending
    ses_tenants: SesTenantRecords


def send_path(
    settings: Settings,
    sqs: SqsDrain,
    stores: SendStores,
    ses: SesParts,
    content: Content,
    parked: ParkedEmail,
    drains: DrainStarter,
) -> Drainer:
    """The send path, built whole: every collaborator of the Drainer and its Delivery, here and only here."""
    # The drains' counts: one write per campaign every two seconds, within the 5 s a campaign's counts promise;
    # once a second, a tenant sending one email a second would pay a counter write (and a timeline write) for each.
    recorder = stores.recorder.gathering(2.0)
    # The reputation guard's denominator is counted before each send (SentAhead says why).
    state = SendState(Pacings(), recorder, SentAhead(stores.reputation))
    ledger = LedgerSide(stores.ledger, recorder)
    executor = Executor(ledger, stores.tenants, ses.ses_tenants, state, stores.failed_copies)
    gate = GateReads(stores.tenants, stores.suppressions, stores.control)
    identity = SendingIdentity(settings, stores.tenants, ses.ses, stores.addresses)
    delivery = Delivery(
        settings, stores.ledger, SesSide(ses.ses, ses.ses_tenants, identity), gate, state, content, executor
    )
    actions = MessageActions(sqs, content.payloads)
    parking = Parking(parked, stores.control, stores.tenants, actions)
    return Drainer(settings, DrainQueues(sqs, actions, parking), delivery, state, gate, drains)


# One container per function: on Lambda a process runs one function, so there is one; a process running
# several (tests) builds each from its own environment, as Lambda would, never one from another's.
_containers: dict[str | None, Container] = {}
_lock = threading.Lock()


def container() -> Container:
    function = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
    with _lock:
        found = _containers.get(function)
        if found is None:
            found = _containers[function] = Container(Settings.from_env())
        return found


def reset() -> None:
    """Forget the containers (after the process's environment changed: its endpoint or settings)."""
    with _lock:
        _containers.clear()
    aws.reset()
