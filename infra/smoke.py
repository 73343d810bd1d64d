"""`moonsend smoke`: a small campaign to SES's mailbox simulator that proves a stage's whole event path.

The drainer records `sent` itself, so a smoke that waits only for `sent` passes with SES's configuration
set, the SesEvents topic (on the stage's key), its queue or `ses_events` broken: bounces and complaints
would then never be suppressed and the account's reputation would suffer unseen. So the smoke waits for
what only that path records: the simulator's delivery, bounce and complaint in the ledger, and the bounced
and complaining addresses on the smoke tenant's suppression list.

It also proves the queue's not-empty alarm, which precompile's direct start makes a backstop that a
normal campaign never exercises: once the campaign's drain has ended, one more email is composed by the
app's own precompiler in this process, with nothing in it starting a drain, and put on the free queue.
Only the alarm (through the SendEmails topic) or the sweeper drains it; the alarm's state must change after
the email is put, which the sweeper's drain alone does not do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from chalicelib.core.config import Settings
from chalicelib.core.routing import alarm_name

SMOKE_TENANT = "moonsend-smoke"

# What the simulator's addresses must show in the ledger (the state, and the latest feedback SES's events
# recorded), and the reason each must then have on the smoke tenant's suppression list.
SIMULATOR = {
    "success@simulator.amazonses.com": ("sent", "delivered", None),
    "bounce@simulator.amazonses.com": ("sent", "bounced", "bounce"),
    "complaint@simulator.amazonses.com": ("sent", "complained", "complaint"),
}


def _labelled(address: str, label: str) -> str:
    local, _, domain = address.partition("@")
    return f"{local}+{label.replace('+', '-')}@{domain}"


def simulator_addresses(campaign_id: str) -> list[str]:
    """The simulator's addresses labelled with the campaign (`bounce+smoke-1a2b@...`). SES's mailbox simulator
    takes a `+label`; unlabelled, the bounce and complaint addresses are on the suppression list after the
    first smoke, and every later smoke of the stage would fail."""
    return [_labelled(a, campaign_id) for a in SIMULATOR]


def alarm_address(campaign_id: str) -> str:
    """The success address the email drained through the queue's alarm goes to."""
    return _labelled("success@simulator.amazonses.com", f"{campaign_id}-alarm")


def smoke_messages(sender_address: str, campaign_id: str) -> list[dict[str, Any]]:
    """A free-plan campaign to the SES mailbox simulator: one message, three recipients."""
    return [
        {
            "userId": SMOKE_TENANT,
            "userPlan": "free",
            "sender": {"ratePerSecond": "1", "emailAddress": sender_address, "fromName": "moonsend smoke test"},
            "campaign": {
                "id": campaign_id,
                "subject": "moonsend smoke test {{ recipient.email }}",
                "body": "<p>Hello from moonsend's smoke test.</p>",
            },
            "recipients": [{"email": address} for address in simulator_addresses(campaign_id)],
        }
    ]


@dataclass(frozen=True)
class Seen:
    """One address as the ledger and the smoke tenant's suppression list show it."""

    state: str | None
    feedback: str | None  # the latest kind SES's events recorded: delivered, bounced, complained
    suppressed: str | None  # why it is on the list, if it is

    def line(self) -> str:
        listed = f"; {self.suppressed}" if self.suppressed else ""
        return f"{self.state or 'not recorded'}; {self.feedback or 'no feedback yet'}{listed}"


def _seen(settings: Settings, campaign_id: str, address: str) -> Seen:
    from chalicelib.stores.ledger import Ledger
    from chalicelib.stores.ledger_model import feedback_parts
    from chalicelib.stores.suppression import Suppressions

    entry = Ledger(settings.resources.ledger_table.name, settings.region).get(SMOKE_TENANT, campaign_id, address)
    if entry is None:
        return Seen(None, None, None)
    kind, _detail = feedback_parts(entry.feedback)
    listed = Suppressions(settings.resources.suppressions_table.name, settings.region).check(SMOKE_TENANT, [address])
    return Seen(entry.state, kind, listed.get(address.lower()))


def wanted(campaign_id: str) -> dict[str, Callable[[Seen], bool]]:
    """Each address of the smoke's campaign with what its `Seen` must be."""

    def check(state: str, feedback: str, reason: str | None) -> Callable[[Seen], bool]:
        return lambda s: (
            s.state == state and s.feedback == feedback and (reason is None or reason in (s.suppressed or ""))
        )

    return {_labelled(plain, campaign_id): check(*want) for plain, want in SIMULATOR.items()}


def wait_for(
    settings: Settings, campaign_id: str, checks: dict[str, Callable[[Seen], bool]], timeout_s: float, poll_s: float
) -> dict[str, Seen]:
    """Poll until every address passes its check (or the time is up): what was last seen of each."""
    deadline = time.time() + timeout_s
    while True:
        seen = {a: _seen(settings, campaign_id, a) for a in checks}
        if all(check(seen[a]) for a, check in checks.items()) or time.time() > deadline:
            return seen
        time.sleep(poll_s)


class _NoStart:
    """A drain starter that starts nothing: the smoke's email waits for the queue's alarm."""

    def ensure(self, queue: str, start_at_ms: int | None = None, slot: int = 0) -> bool:
        return False


def queue_for_the_alarm(
    settings: Settings, cloudwatch: Any, sender_address: str, campaign_id: str, wait_s: float
) -> float:
    """Compose one email with the app's precompiler and put it on the free queue with no drain started, once
    no drainer holds the queue and its alarm is back to OK; returns when it was put (epoch seconds)."""
    from chalicelib.core.message_parser import parse_precompile_message
    from chalicelib.wiring import Container

    c = Container(settings)
    queue = settings.resources.free_queue.name
    deadline = time.time() + wait_s
    # The campaign's drain would take the email itself; an alarm still in ALARM from the campaign (CloudWatch
    # looks once a minute) would not change state for it, and would not fire.
    while c.leases.holder(queue) is not None or _alarm_state(cloudwatch, settings) != "OK":
        if time.time() > deadline:
            raise TimeoutError(f"{queue} still has a drainer, or its alarm is not OK, after {wait_s:.0f} s")
        time.sleep(1)
    # Put in place of the container's cached property of that name (a rename must not leave this a no-op).
    if not isinstance(type(c).__dict__.get("drain_starter"), cached_property):
        raise RuntimeError("the container has no drain_starter to put aside: the smoke would start a drain")
    c.__dict__["drain_starter"] = _NoStart()  # before the precompiler is made, which takes it
    (message,) = smoke_messages(sender_address, campaign_id)
    message["recipients"] = [{"email": alarm_address(campaign_id)}]
    put_at = time.time()
    result = c.precompiler.handle_request(parse_precompile_message(json.dumps(message)))
    if result.queued != 1:
        raise RuntimeError(f"the alarm's email was not queued: {result}")
    return put_at


def _alarm(cloudwatch: Any, settings: Settings) -> dict[str, Any]:
    """The free queue's not-empty alarm, as CloudWatch describes it."""
    name = alarm_name(settings.resources.free_queue.name)
    (alarm,) = cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]
    return dict(alarm)


def _alarm_state(cloudwatch: Any, settings: Settings) -> str:
    return str(_alarm(cloudwatch, settings)["StateValue"])


def alarm_fired_since(cloudwatch: Any, settings: Settings, since: float) -> bool:
    """The free queue's not-empty alarm changed state after `since` (to ALARM, and back to OK once drained)."""
    return bool(_alarm(cloudwatch, settings)["StateUpdatedTimestamp"].timestamp() >= since)
