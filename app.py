"""moonsend's Lambda handlers: wiring only, the work is in chalicelib."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from chalice import Chalice, Rate
from chalice.app import CloudWatchEvent, DynamoDBEvent, SNSEvent, SQSEvent

from chalicelib import wiring
from chalicelib.api import (
    answers,
    campaigns,
    console,
    console_campaigns,
    console_digests,
    console_events,
    console_people,
    console_send,
    console_settings,
    console_suppressions,
    console_webhooks,
    digests,
    pages,
    suppressions,
    tenant,
    uploads,
    webhooks,
)
from chalicelib.core import log
from chalicelib.core.config import Settings
from chalicelib.core.errors import QueueNotOurs
from chalicelib.core.resources import (
    EVENTS_BATCH_SIZE,
    EVENTS_BATCH_WINDOW_S,
    WEBHOOK_EVENTS_BATCH_SIZE,
    WEBHOOK_EVENTS_WINDOW_S,
    WEBHOOKS_BATCH_SIZE,
)
from chalicelib.core.routing import require_our_queue
from chalicelib.feedback.sending_status import EVENT_PATTERN
from chalicelib.send import drain_chain
from chalicelib.send.triggers import parse_trigger

app = Chalice(app_name="moonsend")
app.api.binary_types.append("image/gif")  # the open pixel (chalicelib.api.pages)
_resources = Settings.from_env().resources


@app.on_sns_message(topic=_resources.precompile_topic.name)
def precompile_email(event: SNSEvent) -> None:
    """Render one recipient event (or a batch of recipients) into its tenant's queue; or take in a digest event."""
    wiring.container().precompile_topic.handle(event.message)


@app.on_sns_message(topic=_resources.send_topic.name)
def send_emails(event: SNSEvent) -> None:
    """Drain the queue named by the alarm (or by our own continuation) at its tenant's rate."""
    request = parse_trigger(event.message)
    if request is None:
        return
    c = wiring.container()
    try:
        queue = require_our_queue(c.settings.resources, request.queue_name)
    except QueueNotOurs as exc:
        log.warning("trigger ignored", reason=str(exc))
        return
    context: object = event.context  # Lambda's context object, though Chalice annotates it `dict | None`
    if not isinstance(context, drain_chain.LambdaContext):
        raise TypeError(f"send_emails' context is {type(context).__name__}, not Lambda's context")
    drain_chain.run(c.drain_chain, request, queue, context)


@app.lambda_function(name="run_digest")
def run_digest(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Mail a digest for one period: invoked by the digest's EventBridge schedule, or by a run asked for."""
    return wiring.container().digest_runner.handle(event, context.function_name, context.get_remaining_time_in_millis)


@app.on_dynamodb_record(
    stream_arn=_resources.ledger_stream_placeholder,
    batch_size=WEBHOOK_EVENTS_BATCH_SIZE,
    starting_position="TRIM_HORIZON",
    maximum_batching_window_in_seconds=WEBHOOK_EVENTS_WINDOW_S,
)
def webhook_events(event: DynamoDBEvent) -> dict[str, Any]:
    """Make the ledger's changes (its stream) into webhook deliveries, for the endpoints that want them; the
    answer names the records to give again (ReportBatchItemFailures), the others' go on."""
    return wiring.container().ledger_stream.batch(event.to_dict()["Records"])


@app.on_sqs_message(queue=_resources.webhooks_queue.name, batch_size=WEBHOOKS_BATCH_SIZE)
def deliver_webhooks(event: SQSEvent) -> dict[str, Any]:
    """Make each delivery's signed request, all of the batch's at once; those that failed come back later."""
    return wiring.container().webhook_queue_messages.batch(event.to_dict()["Records"])


@app.lambda_function(name="webhook_jobs")
def webhook_jobs(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Replay or delete an endpoint's held requests in the background, continuing itself when time runs short."""
    runner = wiring.container().webhook_job_runner
    return runner.handle(event, context.function_name, context.get_remaining_time_in_millis)


@app.lambda_function(name="upload_jobs")
def upload_jobs(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Read an upload into recipients and its report, or publish a campaign from them to PrecompileEmail,
    continuing itself when time runs short."""
    return wiring.container().upload_jobs.handle(event, context.function_name, context.get_remaining_time_in_millis)


@app.on_sqs_message(
    queue=_resources.events_queue.name,
    batch_size=EVENTS_BATCH_SIZE,
    maximum_batching_window_in_seconds=EVENTS_BATCH_WINDOW_S,
)
def ses_events(event: SQSEvent) -> dict[str, Any]:
    """Record a batch of SES's sending events (Send closes the window between SES's answer and our record).

    The answer names the records that raised, so that only they come back (ReportBatchItemFailures); a
    batch where all failed is answered the same way rather than raised, which Lambda treats alike."""
    # Imported here: about 15 ms (measured after the app's own imports) the other cold starts need not pay.
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    context: Any = event.context  # Lambda's context object, though Chalice annotates it `dict | None`
    batch = wiring.container().ses_events.batch(context.get_remaining_time_in_millis)
    raw = event.to_dict()

    def record(record: SQSRecord) -> str:
        return batch.outcome(record.message_id)

    processor = BatchProcessor(EventType.SQS, raise_on_entire_batch_failure=False, logger=log.stdlib_logger())
    try:
        batch.record_all(raw.get("Records", []))  # several at once; Powertools then answers each record's outcome
        # No Lambda context handed on: Powertools gives it only to a record handler that takes one.
        return dict(process_partial_response(raw, record, processor))
    finally:
        batch.flush()


@app.on_cw_event(EVENT_PATTERN, name="ses_sending_status")
def ses_sending_status(event: CloudWatchEvent) -> None:
    """SES paused or enabled one of the platform account's SES tenants: its pause followed, or lifted
    (chalicelib.feedback.sending_status)."""
    wiring.container().sending_status.follow(event.to_dict())


# The HTTP side: every route, by resource (chalicelib.api); Chalice's own refusals as problems too.
app.register_middleware(answers.chalice_problems, "http")
for _resource in (
    pages,
    console,
    console_campaigns,
    console_digests,
    console_people,
    console_send,
    console_settings,
    console_suppressions,
    console_webhooks,
    console_events,
    campaigns,
    uploads,
    suppressions,
    tenant,
    digests,
    webhooks,
):
    app.register_blueprint(_resource.routes())


@app.schedule(Rate(1, unit=Rate.MINUTES))
def release_scheduled(event: CloudWatchEvent) -> None:
    """Put scheduled email that is about due on its queue (delayed until its time) and start its drain."""
    wiring.container().releaser.release()


@runtime_checkable
class _LambdaClock(Protocol):
    """What a scheduled job asks of Lambda's context object: the invocation's time left."""

    def get_remaining_time_in_millis(self) -> int: ...


def _remaining_ms(event: CloudWatchEvent) -> Callable[[], int]:
    """The invocation's time left. Chalice annotates an event's `context` as `dict | None`, but hands over
    Lambda's context object: checked here rather than assumed."""
    context: object = event.context
    if not isinstance(context, _LambdaClock):
        raise TypeError(f"a scheduled event's context is {type(context).__name__}, not Lambda's context")
    return context.get_remaining_time_in_millis


@app.schedule(Rate(6, unit=Rate.HOURS))
def retire_idle_queues(event: CloudWatchEvent) -> None:
    """Remove tenant queues and alarms idle for MOONSEND_IDLE_QUEUE_DAYS; the next send recreates them."""
    wiring.container().idle_queues.run()


@app.schedule(Rate(15, unit=Rate.MINUTES))
def reconcile_dead_letters(event: CloudWatchEvent) -> None:
    """Record `failed` (with why) for recipients whose message SQS dead-lettered with no outcome recorded."""
    wiring.container().dead_letters.reconcile(_remaining_ms(event))


@app.schedule(Rate(5, unit=Rate.MINUTES))
def recount_campaigns(event: CloudWatchEvent) -> None:
    """Make the counters of each campaign whose ledger changes have settled equal to what its ledger says."""
    wiring.container().recount.run(_remaining_ms(event))


@app.schedule(Rate(1, unit=Rate.MINUTES))
def sweep_queues(event: CloudWatchEvent) -> None:
    """Start a drain for every queue with work and no drainer (alarms fire only on state changes), then put
    the oldest queued email's age, over every queue, for the stage's alarm."""
    c = wiring.container()
    remaining_ms = _remaining_ms(event)
    swept = c.sweeper.sweep(remaining_ms)
    c.queue_age.record(swept.busy, remaining_ms)
