"""The tenant's HTTP API for its campaigns and its sending, behind its API key (chalicelib.feedback.reports).

Every route answers 401 without a key and the same 404 for a wrong key, another tenant's key or a
campaign the tenant does not have, as the report does. Answers are JSON. A request is authenticated before
its body is read (the body is handed in as a reader), and nothing it gives reaches a table's key unchecked:
a path id that no campaign, digest or endpoint can have is a 404, a cursor longer than a key a 400, a body
nested deeper than JSON can be read a 400.

    POST /campaigns/{id}/pause | resume | cancel
    POST /campaigns/{id}/retry-failed          body (optional): {"reasonContains": "..."}
    GET  /campaigns/{id}/recipients?state=failed&limit=100&after=<cursor>
    POST /tenant/pause                         body (optional): {"reason": "..."}
    POST /tenant/resume                        lifts the tenant's own pause; answers every pause still standing
                                               (200 when its own was lifted, even if another owner's holds the
                                               email: clients read `paused`, not the status; 409: none of its own)
    GET  /digests/{id}                         its schedule, last and next run, recipients and items pending
    POST /digests/{id}/run                     a run now, for the current minute's period (202: it runs async;
                                               429 with Retry-After while one runs or within 5 minutes of one)
    POST /webhooks                             {"url", "eventTypes", "maxEventsPerRequest"}: 201, its secret once
    GET  /webhooks                             the tenant's endpoints (never their secrets)
    DELETE /webhooks/{id}
    POST /webhooks/{id}/test                   one signed test request to the endpoint, and its answer
    POST /webhooks/{id}/replay                 enable it again and deliver what was parked while it was not
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.control.campaign_actions import CampaignActions
from chalicelib.control.params import BadParam
from chalicelib.control.params import limit as page_limit
from chalicelib.control.tenant_keys import TenantKeys
from chalicelib.control.webhook_registration import NO_ENDPOINT, WebhookRegistration
from chalicelib.core.contract import MAX_SORT_KEY_BYTES, iso_ms
from chalicelib.core.fields import is_id
from chalicelib.digest.assembly import campaign_id as digest_campaign
from chalicelib.digest.assembly import period_of
from chalicelib.digest.status import DigestStatusReader
from chalicelib.feedback.reports import NOT_FOUND, Answer, Reports
from chalicelib.stores.ledger_model import STATES, Entry, feedback_parts
from chalicelib.stores.ports import CountsReader, LedgerPages

BAD_CURSOR = Answer(400, {"error": "after: not a cursor of this list (give the `next` of the page before)"})
MAX_PAGE = 1000
CAMPAIGN_ACTIONS = ("pause", "resume", "cancel", "retry-failed")


class UnreadableBody(ValueError):
    """A request body that is JSON, but not JSON this API can read (nested past the parser's depth)."""


# The request's body as a JSON object, or None (no body, not a JSON object); read only once the caller is
# authenticated. Raises UnreadableBody.
BodyReader = Callable[[], dict[str, Any] | None]


def no_body() -> dict[str, Any] | None:
    return None


def _read(body: BodyReader) -> dict[str, Any] | Answer | None:
    try:
        return body()
    except UnreadableBody as exc:
        return Answer(400, {"error": f"body: {exc}"})


def _cursor(after: str | None) -> str | Answer | None:
    """A page's `after`: at most a ledger sort key once lower-cased (an address, or a rejection's own key)."""
    if not after:
        return None
    try:
        size = len(after.lower().encode("utf-8"))
    except UnicodeEncodeError:
        return BAD_CURSOR
    return after if size <= MAX_SORT_KEY_BYTES and after.isprintable() else BAD_CURSOR


@dataclass(frozen=True)
class DigestRuns:
    """A digest's status and readiness read, and a run of it started (run_digest, invoked asynchronously)."""

    status: DigestStatusReader
    start_run: Callable[[str, str, float], None]


class TenantApi:
    def __init__(
        self,
        reports: Reports,
        actions: CampaignActions,
        ledger: LedgerPages,
        stats: CountsReader,
        digests: DigestRuns,
        webhooks: WebhookRegistration,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keys = TenantKeys(reports.authenticate)
        self._actions = actions
        self._ledger = ledger
        self._stats = stats
        self._digests = digests.status
        self._start_digest_run = digests.start_run
        self._webhooks = webhooks
        self._clock = clock

    def _owner(self, authorization: str | None, campaign_id: str | None = None) -> str | Answer:
        user_id = self._keys.owner(authorization)
        if isinstance(user_id, Answer):
            return user_id
        if campaign_id is not None and (not is_id(campaign_id) or self._stats.get(user_id, campaign_id) is None):
            return NOT_FOUND
        return user_id

    def campaign_action(
        self, authorization: str | None, campaign_id: str, action: str, body: BodyReader = no_body
    ) -> Answer:
        if action not in CAMPAIGN_ACTIONS:
            return NOT_FOUND
        user = self._owner(authorization, campaign_id)
        if isinstance(user, Answer):
            return user
        if action == "retry-failed":
            given = _read(body)
            if isinstance(given, Answer):
                return given
            needle = (given or {}).get("reasonContains")
            if needle is not None and (not isinstance(needle, str) or len(needle) > 200):
                return Answer(400, {"error": "reasonContains: must be a string of at most 200 characters"})
            result = self._actions.retry_failed(user, campaign_id, needle or None)
            return Answer(200, {"campaign": campaign_id, **result.as_dict()})
        act = {"pause": self._actions.pause, "resume": self._actions.resume, "cancel": self._actions.cancel}[action]
        done = act(user, campaign_id)
        return Answer(200 if done.ok else 409, {"campaign": campaign_id, "ok": done.ok, "message": done.message})

    def recipients(self, authorization: str | None, campaign_id: str, params: Mapping[str, str] | None) -> Answer:
        user = self._owner(authorization, campaign_id)
        if isinstance(user, Answer):
            return user
        p = params or {}
        state = p.get("state") or None
        if state is not None and state not in STATES:
            return Answer(400, {"error": f"state: one of {', '.join(STATES)}"})
        try:
            limit = page_limit(p, default=100, most=MAX_PAGE)  # empty: the default, as on every list
        except BadParam as exc:
            return exc.answer()
        after = _cursor(p.get("after"))
        if isinstance(after, Answer):
            return after
        entries, cursor = self._ledger.page(user, campaign_id, state=state, limit=limit, after=after)
        return Answer(
            200,
            {
                "campaign": campaign_id,
                "recipients": [_recipient(e) for e in entries],
                "next": cursor,
            },
        )

    def tenant_action(self, authorization: str | None, action: str, body: BodyReader = no_body) -> Answer:
        user = self._owner(authorization)
        if isinstance(user, Answer):
            return user
        if action == "pause":
            given = _read(body)
            if isinstance(given, Answer):
                return given
            reason = (given or {}).get("reason")
            if reason is None or reason == "":
                reason = "no reason given"
            elif not isinstance(reason, str) or len(reason) > 200:
                return Answer(400, {"error": "reason: a string of at most 200 characters"})
            done = self._actions.pause_tenant(user, reason, by_tenant=True)
        elif action == "resume":
            done = self._actions.resume_tenant(user, by_tenant=True)
        else:
            return NOT_FOUND
        # Whether its email is still held, and by whom: a resume lifts only the tenant's own pause.
        pauses = [p.as_dict() for p in done.pauses]
        return Answer(
            200 if done.ok else 409, {"ok": done.ok, "message": done.message, "paused": bool(pauses), "pauses": pauses}
        )

    def digest_status(self, authorization: str | None, digest_id: str) -> Answer:
        user = self._owner(authorization)
        if isinstance(user, Answer):
            return user
        if not is_id(digest_id):
            return NOT_FOUND
        status = self._digests.status(user, digest_id)
        return NOT_FOUND if status is None else Answer(200, status.as_dict())

    def run_digest(self, authorization: str | None, digest_id: str) -> Answer:
        """A run now, asynchronous (a run mails thousands of recipients: longer than an HTTP answer may take).
        Its period is the current minute: asked twice in one minute, or at a scheduled run's minute, it
        mails once (the period's ledger)."""
        user = self._owner(authorization)
        if isinstance(user, Answer):
            return user
        if not is_id(digest_id):
            return NOT_FOUND
        ready = self._digests.ready(user, digest_id)  # not its status: that reads every item
        if ready is None:
            return NOT_FOUND
        if not ready:
            return Answer(
                409, {"error": "the digest cannot run: its subject, body, schedule and window are not all given"}
            )
        wait = self._digests.claim_run(user, digest_id)
        if wait is not None:
            error = "a run of this digest is under way, or one was asked for or ran too recently: retry later"
            return Answer(429, {"error": error, "retryAfterSeconds": wait}, {"Retry-After": str(wait)})
        now = self._clock()
        self._start_digest_run(user, digest_id, now)
        period = period_of(now)
        return Answer(202, {"digest": digest_id, "period": period, "campaign": digest_campaign(digest_id, period)})

    def webhooks(
        self, authorization: str | None, action: str, endpoint_id: str | None, body: BodyReader = no_body
    ) -> Answer:
        """`add`, `list`, `remove`, `test` or `replay` the tenant's webhook endpoints."""
        user = self._owner(authorization)
        if isinstance(user, Answer):
            return user
        if action == "add":
            given = _read(body)
            return given if isinstance(given, Answer) else self._webhooks.add(user, given)
        if action == "list":
            return self._webhooks.list(user)
        if endpoint_id is None:
            return NOT_FOUND
        if not is_id(endpoint_id):
            return NO_ENDPOINT
        if action == "remove":
            return self._webhooks.remove(user, endpoint_id)
        if action == "test":
            return self._webhooks.test(user, endpoint_id)
        if action == "replay":
            return self._webhooks.replay(user, endpoint_id)
        return NOT_FOUND


def _recipient(e: Entry) -> dict[str, Any]:
    """One recipient as GET /campaigns/{id}/recipients answers it: `feedback` the kind only (the document's
    enum), `feedbackDetail` what the receiving side said (SES's text: `250 2.6.0 Message received`)."""
    kind, detail = feedback_parts(e.feedback)
    return {
        "email": e.email,
        "state": e.state,
        "reason": e.reason,
        "messageId": e.message_id,
        "updatedAt": iso_ms(e.updated_at) if e.updated_at else None,
        "feedback": kind,
        "feedbackDetail": detail,
        "retries": e.retries,
    }
