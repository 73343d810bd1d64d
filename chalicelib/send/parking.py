"""The drainer's side of a pause: paused email taken off the queue and parked (chalicelib.queueing.parked_email).

One stored batch per paused campaign (or paused free-plan tenant) per collect. After storing, the pause
is read again without the cache: if a resume came in meanwhile (and its unparking may have run before
this batch was stored), the batch goes straight back onto the queue. If storing fails, the email is kept
on the queue as a delayed fresh copy instead. Either way the received messages are deleted only once
their email is safe elsewhere.
"""

from __future__ import annotations

from typing import Any

from chalicelib.core import log
from chalicelib.queueing.parked_email import ParkedEmail
from chalicelib.send.message_actions import MessageActions
from chalicelib.send.outcomes import Decision, Outcome
from chalicelib.send.queue_ref import QueueRef
from chalicelib.stores.campaign_control import PAUSED
from chalicelib.stores.ports.campaigns import ControlSwitch
from chalicelib.stores.ports.tenants import TenantRecords


class Parking:
    def __init__(
        self, parked: ParkedEmail, control: ControlSwitch, tenants: TenantRecords, actions: MessageActions
    ) -> None:
        self._parked = parked
        self._control = control
        self._tenants = tenants
        self._actions = actions

    def park(self, queue: QueueRef, items: list[tuple[dict[str, Any], Decision]]) -> list[dict[str, Any]]:
        """Park the paused email of these messages; returns the messages that may now be deleted."""
        url = queue.url
        groups: dict[tuple[str, str | None], list[tuple[dict[str, Any], str, str]]] = {}
        for m, decision in items:
            email, body = decision.email, decision.body
            if email is None or body is None:  # cannot happen for a paused outcome; kept safe all the same
                self._actions.keep_on_queue(url, m)
                continue
            campaign = email.campaign_id if decision.outcome is Outcome.CAMPAIGN_PAUSED else None
            groups.setdefault((email.user_id, campaign), []).append((m, email.recipient_email, body))
        done: list[dict[str, Any]] = []
        for (user, campaign), group in groups.items():
            emails = [(address, body) for _m, address, body in group]
            try:
                batch = self._parked.park(user, campaign, "free" if queue.free else "paid", queue.name, emails)
            except Exception as exc:
                log.warning("paused email not parked, kept on the queue", user=user, error=type(exc).__name__)
                for m, _a, _b in group:
                    self._actions.keep_on_queue(url, m)
                continue
            if not self._still_paused(user, campaign):
                self._parked.put_back(batch, emails, url)  # what cannot go back stays parked for the next resume
            done.extend(m for m, _a, _b in group)
        return done

    def _still_paused(self, user: str, campaign: str | None) -> bool:
        if campaign is not None:
            return self._control.state(user, campaign, fresh=True) == PAUSED
        return self._tenants.pause_of(user, fresh=True) is not None
