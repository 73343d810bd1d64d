"""The fault explorer's scenarios: for each function, the smallest work of a tenant's that makes it run, started
as its trigger starts it, and how the stack is brought to rest after (with the clock moved, not waited for)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.local.scheduler import scheduled_event
from infra.producer import CampaignSpec, messages, publish
from tests.faults.invariants import Campaign, not_final, queue_left
from tests.faults.moved_clock import CLOCK

SIMULATOR = "simulator.amazonses.com"
# Past every wait the pipeline has on AWS: a send queue's visibility (5 min, the free queue's 10), SES's
# events queue's, a lease's grace, Lambda's async retries (1 and 2 min). A claim's 30 min takes three.
STEP_S = 660.0
SETTLE_S = 960.0  # past the recount's 15 minutes


@dataclass(frozen=True)
class Scenario:
    function: str  # the function whose invocation is watched
    start: Callable[[Any, str], Campaign]  # the tenant's work, as its trigger gives it
    after_rest: Callable[[Any, str], None] | None = None  # what runs once the pipeline is at rest (a schedule)
    # What only the invocation to watch carries, beside the tenant (ses_events: the batch with the complaint).
    also: tuple[str, ...] = ()


def fresh_user() -> str:
    return f"x{uuid.uuid4().hex[:10]}"


def _campaign(stack: Any, user: str, recipients: list[str], campaign_id: str = "c1") -> Campaign:
    sender = stack.paid_sender(user, rate=10, ses_max_rate=20)
    spec = CampaignSpec(user, sender, "Hi {{ name }}", "<p>Dear {{ name }}</p>", campaign_id)
    people = [{"email": e, "metadata": {"name": "N"}} for e in recipients]
    publish(
        stack.client("sns"), stack.topic_arns[stack.settings.resources.precompile_topic.name], messages(spec, people)
    )
    return Campaign(user, campaign_id, tuple(e.lower() for e in recipients))


def a_small_campaign(stack: Any, user: str) -> Campaign:
    return _campaign(stack, user, [f"success+{user}-{i}@{SIMULATOR}" for i in range(2)])


def a_campaign_with_feedback(stack: Any, user: str) -> Campaign:
    """Delivered, bounced and complained: SES's events that reach the ledger, the guard and the suppressions."""
    return _campaign(stack, user, [f"success+{user}@{SIMULATOR}", f"bounce@{SIMULATOR}", f"complaint@{SIMULATOR}"])


def recount_run(stack: Any, user: str) -> None:
    """recount_campaigns as its schedule invokes it, once the campaign's changes settled: the rule names the
    tenant, so that this invocation is the one watched."""
    _advance(stack, SETTLE_S)
    fn = stack.runner.functions[stack.settings.resources.function_name("recount_campaigns")]
    event = scheduled_event(f"arn:aws:events:::rule/explore-{user}", stack.config.account_id, stack.config.region)
    try:
        stack.runner.invoke(fn, event)
    except BaseException:  # killed or failed: its next run (five minutes on) is the retry
        _advance(stack, 300)
        stack.runner.invoke(
            fn, scheduled_event("arn:aws:events:::rule/next", stack.config.account_id, stack.config.region)
        )


SCENARIOS = {
    "precompile_email": Scenario("precompile_email", a_small_campaign),
    "send_emails": Scenario("send_emails", a_small_campaign),
    "ses_events": Scenario("ses_events", a_campaign_with_feedback, also=("Complaint",)),
    "webhook_events": Scenario("webhook_events", a_small_campaign),
    "recount_campaigns": Scenario("recount_campaigns", a_small_campaign, after_rest=recount_run),
}


def bring_to_rest(stack: Any, c: Campaign, rounds: int = 6) -> None:
    """Until every recipient is final and its queue empty: each round waits for the stack to be idle, then moves
    the clock past the pipeline's waits and runs the sweeper as its next minute would."""
    sweep = stack.runner.functions[stack.settings.resources.function_name("sweep_queues")]
    for _ in range(rounds):
        stack.wait_until_drained(timeout=60, settle_s=1.0)
        if not not_final(c) and not queue_left(stack, c):
            return
        _advance(stack, STEP_S)
        stack.runner.invoke(
            sweep, scheduled_event("arn:aws:events:::rule/sweep", stack.config.account_id, stack.config.region)
        )


def _advance(stack: Any, seconds: float) -> None:
    """Move the clock, once the ledger's stream has been read: Lambda's stream poller reads in real time, and a
    record left pending across the jump would look as old as the jump (and be given up on, past its age)."""
    stack.wait_for_streams(60)
    CLOCK.advance(seconds)


def recount(stack: Any) -> None:
    """The recount's next run, once everything settled: what the counters are judged after."""
    _advance(stack, SETTLE_S)
    fn = stack.runner.functions[stack.settings.resources.function_name("recount_campaigns")]
    stack.runner.invoke(
        fn, scheduled_event("arn:aws:events:::rule/recount", stack.config.account_id, stack.config.region)
    )
