"""What an operator does to a stage, from the operator's page or the CLI: the same domain calls either way,
and each recorded in the operator log (chalicelib.stores.operator_log) with who did it, when, and what it
answered, whether or not it did what was asked. Nothing here decides anything the domain does not: a pause
is `CampaignActions.pause_tenant` as an operator, a cancel the tenant API's own cancel, a replay
infra.replay's.

Who: the ARN of the credentials the operator's process runs with (STS GetCallerIdentity), never a name typed
in a form: the log says which identity's rights were used.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.core.errors import NotFound, Refused
from chalicelib.core.fields import is_email, is_id
from chalicelib.stores.operator_log import OperatorAction, OperatorLog
from infra.replay import ReplayReport
from infra.terminal import plain

# What an operator may do, and the words the log and the page use for each.
ACTIONS = {
    "pause": "pause a tenant",
    "resume": "resume a tenant",
    "cancel": "cancel a campaign",
    "replay": "replay failed invocations",
    "assign-from": "assign a free-plan From address",
}
MAX_REASON = 200


@dataclass(frozen=True)
class Acted:
    ok: bool
    message: str
    entry: OperatorAction | None  # None when the log could not keep it (`unlogged` says why)
    report: ReplayReport | None = None  # a replay's, invocation by invocation
    unlogged: str | None = None


# What an action answers: whether it did what was asked, what it says, and a replay's report.
ActionResult = tuple[bool, str, ReplayReport | None]


class OperatorActions:
    def __init__(
        self,
        container: Any,
        log: OperatorLog,
        who: str,
        via: str,
        replay: Callable[[str | None], ReplayReport],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._c = container
        self._log = log
        self.who = who
        self._via = via
        self._replay = replay  # (a function's name, or None: every function's) -> what was replayed
        self._clock = clock

    def pause(self, user_id: str, reason: str, owner: str = "operator") -> Acted:
        reason = reason.strip()[:MAX_REASON] or "no reason given"
        return self._take("pause", user_id, f"{owner}: {reason}", lambda: self._pause(user_id, reason, owner))

    def resume(self, user_id: str, owner: str | None = None) -> Acted:
        return self._take("resume", user_id, owner or "every owner's pause", lambda: self._resume(user_id, owner))

    def cancel(self, user_id: str, campaign_id: str) -> Acted:
        return self._take("cancel", f"{user_id}/{campaign_id}", None, lambda: self._cancel(user_id, campaign_id))

    def replay(self, function: str | None = None) -> Acted:
        return self._take("replay", function or "every function", None, lambda: self._replayed(function))

    def assign_from(self, user_id: str, address: str) -> Acted:
        """A free-plan From address given to the tenant, whoever had it (a tenant not registered yet may be
        given one: its first message may be from it); the platform's identity that covers it said."""
        return self._take("assign-from", user_id, address, lambda: self._assign(user_id, address))

    def record(self, action: str, target: str, detail: str | None, ok: bool, message: str) -> Acted:
        """An action taken elsewhere (the CLI's own wording of it), kept in the log as this class's are."""
        return self._take(action, target, detail, lambda: (ok, message, None))

    def newest(self, limit: int = 50) -> list[OperatorAction]:
        return self._log.newest(limit)

    def entry(self, key: str) -> OperatorAction | None:
        return self._log.get(key)

    def pauses_of(self, user_id: str) -> tuple[Any, ...] | None:
        """The tenant's standing pauses (None: no such tenant)."""
        tenant = self._c.tenants.get(user_id, fresh=True)
        return None if tenant is None else tenant.pauses

    # --- each action, as the domain takes it ----------------------------------------------------------------
    def _pause(self, user_id: str, reason: str, owner: str) -> ActionResult:
        if not self._known(user_id):
            return False, f"no tenant {plain(user_id)!r}", None
        done = self._c.actions.pause_tenant(user_id, reason, by_tenant=False, owner=owner)
        return done.ok, done.message, None

    def _resume(self, user_id: str, owner: str | None) -> ActionResult:
        if not self._known(user_id):
            return False, f"no tenant {plain(user_id)!r}", None
        done = self._c.actions.resume_tenant(user_id, by_tenant=False, owner=owner)
        return done.ok, done.message, None

    def _cancel(self, user_id: str, campaign_id: str) -> ActionResult:
        try:
            answer = self._c.tenant_api.cancel(user_id, campaign_id)
        except NotFound:
            return False, f"no campaign {plain(campaign_id)!r} of {plain(user_id)!r}", None
        except Refused as refused:  # it cannot be cancelled now (a conflict)
            return False, refused.detail, None
        return bool(answer["ok"]), str(answer["message"]), None

    def _replayed(self, function: str | None) -> ActionResult:
        report = self._replay(function)
        said = f"{len(report.replayed)} failed invocation(s) replayed"
        if report.unreadable:
            said += f"; {len(report.unreadable)} message(s) are no invocation record, left on the queue"
        return not report.unreadable, said, report

    def _assign(self, user_id: str, address: str) -> ActionResult:
        if not is_id(user_id):
            return False, f"{plain(user_id)!r} is not a tenant id", None
        if not is_email(address):
            return False, f"{plain(address)!r} is not an email address", None
        coverage = self._c.platform_identities.covering(address)
        previous = self._c.free_addresses.assign(user_id, address, int(self._clock() * 1000))
        was = f" (it was {plain(previous)}'s)" if previous and previous != user_id else ""
        said = f"{plain(address)} is now its free-plan From address{was}; covered by {coverage.describe()}"
        if not (coverage.own or coverage.domain):
            said += "; SES refuses its email until the address or its domain is verified in the platform's account"
        return True, said, None

    def _known(self, user_id: str) -> bool:
        return self._c.tenants.get(user_id, fresh=True) is not None

    # --- taking one, and keeping what it did ------------------------------------------------------------------
    def _take(self, action: str, target: str, detail: str | None, act: Callable[[], ActionResult]) -> Acted:
        """Take the action and record it, whatever happened: an action that failed is recorded as not done,
        with why (then raised no further: the caller says it); a log that cannot keep the entry leaves the
        action done as it is, and says so (`unlogged`)."""
        try:
            ok, message, report = act()
        except Exception as exc:
            ok, message, report = False, f"failed: {type(exc).__name__}: {plain(str(exc))}", None
        entry = OperatorAction(int(self._clock() * 1000), self.who, action, target, detail, ok, message, self._via)
        try:
            return Acted(ok, message, self._log.record(entry), report)
        except Exception as exc:
            return Acted(ok, message, None, report, f"not in the operator log: {type(exc).__name__}: {exc}")
