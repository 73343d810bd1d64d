"""A digest event taken in: the definition merged and kept, items stored per recipient, retractions kept.

Nothing is rendered or queued here; that is the run's (chalicelib.digest.assembly). What is refused is
recorded in the ledger under the digest's id, as a campaign's rejected recipients are under the campaign's:
`moonsend report --campaign <digest id>` shows each with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from botocore.exceptions import ClientError

from chalicelib.core import log
from chalicelib.core.contract import RejectedRecipient
from chalicelib.core.digest_contract import (
    MAX_ITEM_AHEAD_S,
    MAX_WINDOW_S,
    DigestDefinition,
    DigestRequest,
    parse_digest_message,
)
from chalicelib.core.errors import MessageInvalid, SenderRefused, TemplateInvalid
from chalicelib.digest.schedules import DigestSchedules
from chalicelib.ingest.rejection import rejection_records, rejects_of_message
from chalicelib.ingest.renderer import CompiledCampaign
from chalicelib.stores.digests import DigestStore
from chalicelib.stores.ports.sending import FreeAddressRecords
from chalicelib.stores.ports.tenants import AccountOf, TenantRecords
from chalicelib.stores.recorder import Recorder

# What a retraction applies to, whatever recipients its event names (docs/digests.md).
RETRACT_SCOPE = "every recipient"


@dataclass
class DigestIntakeResult:
    user_id: str | None
    digest_id: str | None
    stored: int = 0  # items written (an item sent again is written over itself)
    expired: int = 0  # items already past the window: dropped, not stored
    retracted: int = 0
    rejected: list[RejectedRecipient] = field(default_factory=list)
    # A retraction's scope, said: always every recipient (`retract_named`: those the event named, which
    # did not narrow it).
    retract_scope: str | None = None
    retract_named: list[str] = field(default_factory=list)


class DigestIntake:
    def __init__(
        self,
        store: DigestStore,
        schedules: DigestSchedules,
        tenants: TenantRecords,
        free_addresses: FreeAddressRecords,
        account_of: AccountOf,
        recorder: Callable[[], Recorder],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._schedules = schedules
        self._tenants = tenants
        self._free_addresses = free_addresses
        self._account_of = account_of
        self._recorder = recorder
        self._clock = clock

    def handle(self, message: dict[str, Any], raw: str) -> DigestIntakeResult:
        recorder = self._recorder()
        try:
            return self._handle(message, raw, recorder)
        finally:
            recorder.flush()

    def _handle(self, message: dict[str, Any], raw: str, recorder: Recorder) -> DigestIntakeResult:
        try:
            req = parse_digest_message(message)
        except MessageInvalid as exc:
            r = rejects_of_message(raw, exc)
            log.warning("digest event rejected", user=r.user_id, reason=r.records[0][1])
            recorder.rejected(r.user_id, r.campaign_id, r.records)
            return DigestIntakeResult(r.given_user, r.given_campaign, rejected=r.rejected)
        result = DigestIntakeResult(req.user_id, req.digest.id, rejected=list(req.rejected))
        # The Sender first: an event whose sender is refused changes nothing, and once the definition is
        # seen stored, the tenant is registered (an item event without a Sender may follow at once).
        if (req.recipients or req.sender is not None) and not self._register_sender(req, result):
            return self._finish(req, result, raw, recorder)
        if not self._templates_compile(req, result):
            return self._finish(req, result, raw, recorder)
        scheduled = self._schedule(req, result)
        if scheduled is False:
            return self._finish(req, result, raw, recorder)
        definition = self._store.define(req.user_id, req.digest).definition
        if scheduled:
            self._store.mark_scheduled(req.user_id, definition.id, scheduled)
        if req.retract:
            # Kept as long as an item it names can be: one dated up to a day ahead, in the longest window (a
            # window lengthened later must not bring back an item whose retraction is gone).
            until = self._clock() + MAX_WINDOW_S + MAX_ITEM_AHEAD_S
            self._store.retract(req.user_id, definition.id, req.retract, until)
            result.retracted = len(req.retract)
            result.retract_scope, result.retract_named = RETRACT_SCOPE, list(req.retract_named)
            if req.retract_named:
                log.warning(
                    "digest retraction applies to every recipient",
                    user=req.user_id,
                    digest=definition.id,
                    retracted=list(req.retract),
                    named=list(req.retract_named),
                )
        self._store_items(req, definition, result)
        return self._finish(req, result, raw, recorder)

    def _register_sender(self, req: DigestRequest, result: DigestIntakeResult) -> bool:
        """The tenant's sender and keys, kept in the registry for the run (which sends with them)."""
        if req.sender is None:
            if self._tenants.get(req.user_id, fresh=True) is not None:
                return True
            reason = "sender: required until the tenant has sent once (the digest's email goes out with it)"
        else:
            plan = "paid" if req.sender.has_own_account else "free"  # as a campaign's message decides it
            try:
                if plan == "free":  # as precompile does: a refused address never becomes the registered From
                    self._free_addresses.claim(req.user_id, req.sender.email_address, int(self._clock() * 1000))
                self._tenants.accept(req.user_id, plan, req.sender, self._account_of)
                return True
            except SenderRefused as exc:
                reason = str(exc)
        result.rejected.extend(RejectedRecipient(r.recipient.email, reason) for r in req.recipients)
        return False

    def _templates_compile(self, req: DigestRequest, result: DigestIntakeResult) -> bool:
        """A subject or body given is compiled before anything is stored: one that does not compile is
        refused with the event (where, and what), not found out at the run, a week later."""
        if req.digest.subject is None and req.digest.body is None:
            return True
        try:
            CompiledCampaign(req.digest.id, req.digest.subject or "", req.digest.body or "", strict=False)
        except TemplateInvalid as exc:
            reason = f"digest: {exc}"
            named = [RejectedRecipient(r.recipient.email, reason) for r in req.recipients]
            result.rejected.extend(named or [RejectedRecipient(None, reason)])
            return False
        return True

    def _schedule(self, req: DigestRequest, result: DigestIntakeResult) -> str | Literal[False] | None:
        """The digest's schedule put, before anything is stored, when this event gives one it was not yet
        put with (an item event that repeats the definition, as most do, costs a read): the expression put,
        None when there was nothing to put, False when Scheduler refused it (the event is refused, nothing
        of it stored). Scheduler throttled or failing raises: the event is retried (storing is idempotent)."""
        schedule = req.digest.schedule
        if schedule is None:
            return None
        stored = self._store.state(req.user_id, req.digest.id)
        if stored is not None and stored.scheduled == schedule:
            return None
        try:
            self._schedules.put(req.user_id, req.digest.id, schedule)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ValidationException":
                raise
            reason = f"digest.schedule: EventBridge Scheduler refused it: {exc.response['Error'].get('Message')}"
            named = [RejectedRecipient(r.recipient.email, reason) for r in req.recipients]
            result.rejected.extend(named or [RejectedRecipient(None, reason)])
            return False
        return schedule

    def _store_items(self, req: DigestRequest, definition: DigestDefinition, result: DigestIntakeResult) -> None:
        if not req.recipients:
            return
        if definition.window_s is None:
            reason = f"digest {definition.id}: no window yet (send the digest's definition with its window first)"
            result.rejected.extend(RejectedRecipient(r.recipient.email, reason) for r in req.recipients)
            return
        now, window = self._clock(), definition.window_s
        entries = []
        for r in req.recipients:
            for item in r.items:
                if item.at + window <= now:
                    result.expired += 1
                else:
                    entries.append((r.recipient, item))
        result.stored = self._store.add_items(req.user_id, definition.id, window, entries)

    def _finish(
        self, req: DigestRequest, result: DigestIntakeResult, raw: str, recorder: Recorder
    ) -> DigestIntakeResult:
        if result.rejected:
            recorder.rejected(req.user_id, req.digest.id, rejection_records(result.rejected, raw))
        log.info(
            "digest event",
            user=req.user_id,
            digest=req.digest.id,
            stored=result.stored,
            expired=result.expired,
            retracted=result.retracted,
            retract_scope=result.retract_scope,
            rejected=len(result.rejected),
        )
        return result
