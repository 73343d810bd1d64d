"""A tenant's campaigns and sending, as the API's routes (chalicelib.api) and the CLI ask for them: each method
takes the tenant's id (the caller already found) and returns the answer's body, or raises a refusal
(chalicelib.core.errors). Nothing a request gives reaches a table's key unchecked: a path id that no
campaign or digest can have is NotFound, a cursor longer than a key Invalid.

    POST /campaigns/{id}/pause | resume | cancel
    POST /campaigns/{id}/retry-failed          body (optional): {"reasonContains": "..."}
    GET  /campaigns/{id}/recipients?state=failed&limit=100&after=<cursor>
    POST /tenant/pause                         body (optional): {"reason": "..."}
    POST /tenant/resume                        lifts the tenant's own pause; answers every pause still standing
                                               (200 when its own was lifted, even if another owner's holds the
                                               email: clients read `paused`, not the status; 409: none of its own)
    GET  /digests?limit=50&after=<cursor>      the tenant's digests, each with its schedule, last and next run
    GET  /digests/{id}                         its schedule, last and next run, recipients and items pending
    POST /digests/{id}/run                     a run now, for the current minute's period (202: it runs async;
                                               429 with Retry-After while one runs or within 5 minutes of one)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.control import params
from chalicelib.control.campaign_actions import CampaignActions, Done
from chalicelib.control.params import limit as page_limit
from chalicelib.core.contract import MAX_ADDRESS_LENGTH, MAX_SORT_KEY_BYTES, iso_ms
from chalicelib.core.errors import Busy, Conflict, Invalid, NotFound
from chalicelib.core.fields import is_id
from chalicelib.digest.assembly import campaign_id as digest_campaign
from chalicelib.digest.assembly import period_of
from chalicelib.digest.status import DigestStatusReader
from chalicelib.stores.ledger_model import STATES, feedback_parts
from chalicelib.stores.ports.campaigns import CampaignPages
from chalicelib.stores.ports.ledger import Entry, LedgerPages

BAD_CURSOR = "after: not a cursor of this list (give the `next` of the page before)"
MAX_PAGE = 1000
MAX_DIGESTS_PAGE = 100  # definition rows are up to 400 KB each: a page reads at most this many


def _cursor(after: str | None) -> str | None:
    """A page's `after`: at most a ledger sort key once lower-cased (an address, or a rejection's own key)."""
    if not after:
        return None
    try:
        size = len(after.lower().encode("utf-8"))
    except UnicodeEncodeError:
        raise Invalid(BAD_CURSOR) from None
    if size > MAX_SORT_KEY_BYTES or not after.isprintable():
        raise Invalid(BAD_CURSOR)
    return after


@dataclass(frozen=True)
class DigestRuns:
    """A digest's status and readiness read, and a run of it started (run_digest, invoked asynchronously)."""

    status: DigestStatusReader
    start_run: Callable[[str, str, float], None]


class TenantApi:
    def __init__(
        self,
        actions: CampaignActions,
        ledger: LedgerPages,
        stats: CampaignPages,
        digests: DigestRuns,
        publish_again: Callable[[str, str], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._actions = actions
        self._publish_again = publish_again  # a publication a pause stopped (chalicelib.control.campaign_sends)
        self._ledger = ledger
        self._stats = stats
        self._digests = digests.status
        self._start_digest_run = digests.start_run
        self._clock = clock

    def _campaign(self, user: str, campaign_id: str) -> None:
        """NotFound unless the tenant has this campaign."""
        if not is_id(campaign_id) or self._stats.get(user, campaign_id) is None:
            raise NotFound()

    def pause(self, user: str, campaign_id: str) -> dict[str, Any]:
        self._campaign(user, campaign_id)
        return _done(campaign_id, self._actions.pause(user, campaign_id))

    def resume(self, user: str, campaign_id: str) -> dict[str, Any]:
        self._campaign(user, campaign_id)
        done = _done(campaign_id, self._actions.resume(user, campaign_id))
        self._publish_again(user, campaign_id)  # recipients moonsend was publishing when it was paused
        return done

    def cancel(self, user: str, campaign_id: str) -> dict[str, Any]:
        self._campaign(user, campaign_id)
        done = _done(campaign_id, self._actions.cancel(user, campaign_id))
        self._publish_again(user, campaign_id)  # a publication a pause stopped: it now sees the cancel, and ends
        return done

    def retry_failed(self, user: str, campaign_id: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
        self._campaign(user, campaign_id)
        needle = (given or {}).get("reasonContains")
        if needle is not None and (not isinstance(needle, str) or len(needle) > 200):
            raise Invalid("reasonContains: must be a string of at most 200 characters")
        result = self._actions.retry_failed(user, campaign_id, needle or None)
        return {"campaign": campaign_id, **result.as_dict()}

    def recipients(self, user: str, campaign_id: str, given: Mapping[str, str] | None) -> dict[str, Any]:
        self._campaign(user, campaign_id)
        p = given or {}
        state = p.get("state") or None
        if state is not None and state not in STATES:
            raise Invalid(f"state: one of {', '.join(STATES)}")
        limit = page_limit(p, default=100, most=MAX_PAGE)  # empty: the default, as on every list
        after = _cursor(p.get("after"))
        prefix = params.text(p, "prefix", max_chars=MAX_ADDRESS_LENGTH)
        # DynamoDB refuses a start key outside the query's key condition (a ValidationException: a 500).
        if after is not None and prefix is not None and not after.lower().startswith(prefix.lower()):
            raise Invalid(BAD_CURSOR)
        entries, cursor = self._ledger.page(user, campaign_id, state=state, limit=limit, after=after, prefix=prefix)
        return {"campaign": campaign_id, "recipients": [_recipient(e) for e in entries], "next": cursor}

    def pause_tenant(self, user: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
        reason = (given or {}).get("reason")
        if reason is None or reason == "":
            reason = "no reason given"
        elif not isinstance(reason, str) or len(reason) > 200:
            raise Invalid("reason: a string of at most 200 characters")
        return _standing(self._actions.pause_tenant(user, reason, by_tenant=True))

    def resume_tenant(self, user: str) -> dict[str, Any]:
        return _standing(self._actions.resume_tenant(user, by_tenant=True))

    def digests(self, user: str, given: Mapping[str, str] | None) -> dict[str, Any]:
        """The tenant's digests in id order, each as its definition row has it (no items read)."""
        after = params.decode_cursor(given)
        if after is not None and not is_id(after):
            raise params.bad_cursor()
        heads, more = self._digests.heads(user, after, page_limit(given, default=50, most=MAX_DIGESTS_PAGE))
        return {"digests": [h.as_dict() for h in heads], "next": params.encode_cursor(more) if more else None}

    def digest_status(self, user: str, digest_id: str) -> dict[str, Any]:
        status = self._digests.status(user, digest_id) if is_id(digest_id) else None
        if status is None:
            raise NotFound()
        return status.as_dict()

    def run_digest(self, user: str, digest_id: str) -> dict[str, Any]:
        """A run now, asynchronous (a run mails thousands of recipients: longer than an HTTP answer may take).
        Its period is the current minute: asked twice in one minute, or at a scheduled run's minute, it
        mails once (the period's ledger)."""
        ready = self._digests.ready(user, digest_id) if is_id(digest_id) else None  # not its status: reads every item
        if ready is None:
            raise NotFound()
        if not ready:
            raise Conflict("the digest cannot run: its subject, body, schedule and window are not all given")
        wait = self._digests.claim_run(user, digest_id)
        if wait is not None:
            error = "a run of this digest is under way, or one was asked for or ran too recently: retry later"
            raise Busy(error, retry_after_s=wait)
        now = self._clock()
        self._start_digest_run(user, digest_id, now)
        period = period_of(now)
        return {"digest": digest_id, "period": period, "campaign": digest_campaign(digest_id, period)}


def _done(campaign_id: str, done: Done) -> dict[str, Any]:
    """A pause, resume or cancel's answer; Conflict (with the same members) when it could not be done."""
    body = {"campaign": campaign_id, "ok": done.ok, "message": done.message}
    if not done.ok:
        raise Conflict(done.message, **body)
    return body


def _standing(done: Done) -> dict[str, Any]:
    """A tenant's pause or resume: whether its email is still held, and by whom (a resume lifts only the
    tenant's own pause); Conflict (with the same members) when there was nothing of its own to lift."""
    pauses = [p.as_dict() for p in done.pauses]
    body = {"ok": done.ok, "message": done.message, "paused": bool(pauses), "pauses": pauses}
    if not done.ok:
        raise Conflict(done.message, **body)
    return body


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
