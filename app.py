"""moonsend's Lambda handlers: wiring only, the work is in chalicelib."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from chalice import Chalice, Rate, Response
from chalice.app import CloudWatchEvent, DynamoDBEvent, SNSEvent, SQSEvent

from chalicelib import wiring
from chalicelib.control import etags, openapi, problems
from chalicelib.control.tenant_api import UnreadableBody
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
from chalicelib.feedback.unsubscribe import NOT_FOUND
from chalicelib.ingest.tracking import PIXEL
from chalicelib.send import drain_chain
from chalicelib.send.triggers import parse_trigger

app = Chalice(app_name="moonsend")
app.api.binary_types.append("image/gif")  # the open pixel
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

    batch = wiring.container().ses_events.batch()

    def record(record: SQSRecord) -> str:
        return batch.record(record.body)

    processor = BatchProcessor(EventType.SQS, raise_on_entire_batch_failure=False, logger=log.stdlib_logger())
    try:
        # No Lambda context handed on: Powertools gives it only to a record handler that takes one.
        return dict(process_partial_response(event.to_dict(), record, processor))
    finally:
        batch.flush()


_FORMS = ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"]


def _html(page: Any) -> Response:
    return Response(
        body=page.html,
        status_code=page.status,
        headers={"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"},
    )


@app.route("/unsubscribe/{token}", methods=["GET"])
def unsubscribe_page(token: str) -> Response:
    """The confirmation page behind `{{ unsubscribe_url }}` (a form; no JavaScript)."""
    return _html(wiring.container().unsubscribes.confirm_page(token))


@app.route("/unsubscribe/{token}", methods=["POST"], content_types=_FORMS)
def unsubscribe(token: str) -> Response:
    """Unsubscribe at once: the page's button, and mailbox providers' one-click (RFC 8058)."""
    return _html(wiring.container().unsubscribes.unsubscribe(token))


@app.route("/o/{token}", methods=["GET"])
def opened(token: str) -> Response:
    """The open pixel: records the first open, and always answers with a transparent 1x1 GIF."""
    wiring.container().tracking.opened(token)
    headers: dict[str, str | list[str]] = {"Content-Type": "image/gif", "Cache-Control": "no-store, max-age=0"}
    return Response(body=PIXEL, status_code=200, headers=headers)


@app.route("/c/{token}", methods=["GET"])
def clicked(token: str) -> Response:
    """A tracked link: records the first click, then redirects to the URL the token was signed for."""
    r = wiring.container().tracking.clicked(token)
    if r.location is None:
        return _html(NOT_FOUND)
    return Response(body="", status_code=r.status, headers={"Location": r.location, "Cache-Control": "no-store"})


@app.route("/openapi.json", methods=["GET"])
def openapi_document() -> Response:
    """This API's OpenAPI 3.1 document (no key needed; docs/api.md)."""
    return Response(body=openapi.document(), status_code=200, headers={"Content-Type": "application/json"})


@app.route("/campaigns/{campaign_id}/report", methods=["GET"])
def campaign_report(campaign_id: str) -> Response:
    """A campaign's counts, for the tenant that owns it (`Authorization: Bearer <its API key>`)."""
    return _answer(wiring.container().reports.campaign(_authorization(), campaign_id))


# The API's bodies are JSON; `curl -d '{...}'` labels them form-encoded, and a body-less POST may say anything.
_API_BODIES = ["application/json", "application/x-www-form-urlencoded", "text/plain"]


def _query() -> dict[str, str]:
    request = app.current_request
    return dict(request.query_params or {}) if request else {}


def _authorization() -> str | None:
    request = app.current_request
    return request.headers.get("authorization") if request else None


def _json_body() -> dict[str, Any] | None:
    """The request's JSON object, or None (no body, or not a JSON object: the routes' fields are optional).

    Handed to the tenant API as a reader, called once the caller is authenticated: an anonymous request's
    body is never parsed. JSON nested past what the parser reads raises UnreadableBody (a 400)."""
    raw = app.current_request.raw_body if app.current_request else b""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        return None
    except RecursionError as exc:
        raise UnreadableBody("nested too deeply to read") from exc
    return body if isinstance(body, dict) else None


def _answer(answer: Any) -> Response:
    """Every tenant-API answer: never cached; an error as an RFC 9457 problem (chalicelib.control.problems)."""
    headers = {"Cache-Control": "no-store", **(getattr(answer, "headers", None) or {})}
    body = answer.body
    if problems.is_problem(answer.status):
        headers["Content-Type"] = problems.PROBLEM_JSON
        body = problems.problem(answer.status, body)
    return Response(body=body, status_code=answer.status, headers=headers)


def _campaign_action(campaign_id: str, action: str) -> Response:
    api = wiring.container().tenant_api
    return _answer(api.campaign_action(_authorization(), campaign_id, action, _json_body))


@app.route("/campaigns/{campaign_id}/pause", methods=["POST"], content_types=_API_BODIES)
def pause_campaign(campaign_id: str) -> Response:
    """Hold the campaign's unsent email until it is resumed (the tenant's other campaigns go on)."""
    return _campaign_action(campaign_id, "pause")


@app.route("/campaigns/{campaign_id}/resume", methods=["POST"], content_types=_API_BODIES)
def resume_campaign(campaign_id: str) -> Response:
    return _campaign_action(campaign_id, "resume")


@app.route("/campaigns/{campaign_id}/cancel", methods=["POST"], content_types=_API_BODIES)
def cancel_campaign(campaign_id: str) -> Response:
    """Stop the campaign: nothing more goes out; its unsent recipients are recorded cancelled."""
    return _campaign_action(campaign_id, "cancel")


@app.route("/campaigns/{campaign_id}/retry-failed", methods=["POST"], content_types=_API_BODIES)
def retry_failed(campaign_id: str) -> Response:
    """Queue the failed recipients again (`{"reasonContains": "..."}` to pick some); each is sent at most once."""
    return _campaign_action(campaign_id, "retry-failed")


@app.route("/campaigns/{campaign_id}/recipients", methods=["GET"])
def campaign_recipients(campaign_id: str) -> Response:
    """Each recipient's state, reason and times, a page at a time (`?state=&limit=&after=`)."""
    return _answer(wiring.container().tenant_api.recipients(_authorization(), campaign_id, _query()))


def _read_answer(answer: Any) -> Response:
    """A GET of the tenant API: with an ETag, and 304 with no body when the client's If-None-Match has it."""
    if answer.status != 200:
        return _answer(answer)
    tag = etags.etag(answer.body)
    headers: dict[str, str | list[str]] = {"ETag": tag, "Cache-Control": "private, no-cache"}
    request = app.current_request
    if etags.not_modified(request.headers.get("if-none-match") if request else None, tag):
        return Response(body="", status_code=304, headers=headers)
    return Response(body=answer.body, status_code=200, headers=headers)


@app.route("/campaigns", methods=["GET"])
def list_campaigns() -> Response:
    """The tenant's campaigns, newest first, with counts, state and progress (`?state=&limit=&after=`)."""
    return _read_answer(wiring.container().campaign_reads.list(_authorization(), _query()))


@app.route("/campaigns/{campaign_id}", methods=["GET"])
def show_campaign(campaign_id: str) -> Response:
    """One campaign as listed, with its timeline per minute and its busiest second (`?timelineAfter=`)."""
    return _read_answer(wiring.container().campaign_reads.show(_authorization(), campaign_id, _query()))


@app.route("/suppressions", methods=["GET"])
def list_suppressions() -> Response:
    """The tenant's suppression list (`?reason=&prefix=&limit=&after=`)."""
    return _read_answer(wiring.container().suppression_api.list(_authorization(), _query()))


@app.route("/suppressions", methods=["POST"], content_types=_API_BODIES)
def add_suppressions() -> Response:
    """Put addresses on the tenant's list (`{"addresses": [...], "reason": "..."}`): never sent to again."""
    return _answer(wiring.container().suppression_api.add(_authorization(), _json_body))


@app.route("/suppressions/{address}", methods=["DELETE"])
def remove_suppression(address: str) -> Response:
    """Lift one of the tenant's own entries; a complaint, an unsubscribe or a bounce stays (409 says why)."""
    return _answer(wiring.container().suppression_api.remove(_authorization(), address))


@app.route("/tenant", methods=["GET"])
def show_tenant() -> Response:
    """The tenant's settings and standing: plan, rate, From addresses, pauses, SES status, daily cap."""
    return _read_answer(wiring.container().tenant_view.get(_authorization()))


@app.route("/events", methods=["GET"])
def list_events() -> Response:
    """The tenant's recorded events, as its webhooks carry them, oldest first (`?after=&since=&type=&campaign=`)."""
    return _read_answer(wiring.container().event_reads.list(_authorization(), _query()))


@app.route("/tenant/{action}", methods=["POST"], content_types=_API_BODIES)
def tenant_action(action: str) -> Response:
    """`/tenant/pause` keeps all of the tenant's email from going out; `/tenant/resume` lifts a pause of its own."""
    return _answer(wiring.container().tenant_api.tenant_action(_authorization(), action, _json_body))


@app.route("/digests/{digest_id}", methods=["GET"])
def digest_status(digest_id: str) -> Response:
    """The digest's schedule, last and next run, and the recipients and items the next run would mail."""
    return _answer(wiring.container().tenant_api.digest_status(_authorization(), digest_id))


@app.route("/digests/{digest_id}/run", methods=["POST"], content_types=_API_BODIES)
def run_digest_now(digest_id: str) -> Response:
    """Run the digest now (asynchronously: 202), for the current minute's period."""
    return _answer(wiring.container().tenant_api.run_digest(_authorization(), digest_id))


def _webhooks(action: str, endpoint_id: str | None = None) -> Response:
    api = wiring.container().tenant_api
    return _answer(api.webhooks(_authorization(), action, endpoint_id, _json_body))


@app.route("/webhooks", methods=["POST"], content_types=_API_BODIES)
def add_webhook() -> Response:
    """Register an endpoint for the tenant's events (201 with its signing secret, shown this once)."""
    return _webhooks("add")


@app.route("/webhooks", methods=["GET"])
def list_webhooks() -> Response:
    return _webhooks("list")


@app.route("/webhooks/{endpoint_id}", methods=["DELETE"])
def remove_webhook(endpoint_id: str) -> Response:
    return _webhooks("remove", endpoint_id)


@app.route("/webhooks/{endpoint_id}/test", methods=["POST"], content_types=_API_BODIES)
def test_webhook(endpoint_id: str) -> Response:
    """One signed test request to the endpoint, and what it answered."""
    return _webhooks("test", endpoint_id)


@app.route("/webhooks/{endpoint_id}/replay", methods=["POST"], content_types=_API_BODIES)
def replay_webhook(endpoint_id: str) -> Response:
    """Enable the endpoint again and deliver the events held while it was disabled."""
    return _webhooks("replay", endpoint_id)


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
    """Start a drain for every queue with work and no drainer (alarms fire only on state changes)."""
    wiring.container().sweeper.sweep(_remaining_ms(event))
