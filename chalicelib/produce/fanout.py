"""upload_jobs' publication: a campaign's recipients (an upload's `recipients.jsonl`) published to
PrecompileEmail in messages of up to MAX_RECIPIENTS_PER_MESSAGE recipients, as a producer's code would.

An invocation first takes the send's lease (chalicelib.stores.uploads): one at a time publishes, so that an
invocation started twice (a request retried, an event given twice) publishes nothing twice. A step reads one
window of the file from where the send's row says it got to (a ranged GET), publishes the whole lines in it
as one message, and records how far it got, renewing the lease (conditional on holding it and on the step
read). A killed invocation's lease runs out after LEASE_S, before Lambda's retry comes. With CONTINUE_WITH_S of its time
left an invocation invokes itself again, and the next goes on from the row: a crash or a retry never
skips a recipient. A kill between a publish and its record publishes that one message again on the retry;
precompile's ledger then finds each of its recipients recorded and queues none of them twice (the
ledger's exactly-once is the last line; docs/exactly-once.md).

Before each step the campaign's control is read: a pause stops the publication where it is (a resume starts
it again from there), a cancel ends it, its unpublished recipients counted in its row.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from chalicelib.core import log
from chalicelib.core.contract import MAX_RECIPIENTS_PER_MESSAGE
from chalicelib.stores.campaign_control import CANCELLED, PAUSED
from chalicelib.stores.upload_files import RECIPIENTS, UploadFiles
from chalicelib.stores.uploads import CANCELLED as SEND_CANCELLED
from chalicelib.stores.uploads import PUBLISHING, Send, Uploads

# SNS takes 256 KiB a message: a message's recipients take at most this, its envelope (the campaign's
# templates) at most MAX_ENVELOPE_BYTES (checked when the campaign is made), and a recipient line is at
# most a recipient's metadata (16 KiB) and address, so a window this size always holds one whole line.
RECIPIENT_BYTES = 120 * 1024
MAX_ENVELOPE_BYTES = 128 * 1024
CONTINUE_WITH_S = 30.0
# Longer than a step takes (a ranged read and a publish, with their retries), shorter than Lambda's first
# retry of a failed invocation (a minute or more).
LEASE_S = 45.0


def send_event(user_id: str, campaign_id: str) -> dict[str, str]:
    """What upload_jobs is invoked with to publish a campaign."""
    return {"job": "publish", "userId": user_id, "campaignId": campaign_id}


class Publication:
    def __init__(
        self,
        uploads: Uploads,
        files: UploadFiles,
        control_state: Callable[[str, str], str | None],
        publish: Callable[[str], None],
        sender_proof: Callable[[str, str, int], str],
        invoke_async: Callable[[str, dict[str, Any]], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._uploads = uploads
        self._files = files
        self._control_state = control_state
        self._publish = publish
        self._sender_proof = sender_proof
        self._invoke_async = invoke_async
        self._clock = clock

    def run(
        self, user_id: str, campaign_id: str, function_name: str, remaining_ms: Callable[[], int]
    ) -> dict[str, Any]:
        """Publish the send's recipients until all are, or hand it on when time runs short."""
        send = self._uploads.send(user_id, campaign_id)
        if send is None or send.state != PUBLISHING:
            return {"ran": False}
        holder = secrets.token_hex(8)
        if not self._uploads.hold(send, holder, self._clock(), LEASE_S):
            log.info("publication held by another invocation", user=user_id, campaign=campaign_id)
            return {"ran": False, "held": True}
        held = self._uploads.send(user_id, campaign_id)  # as it is now: another may have stepped since the read
        if held is None or held.state != PUBLISHING:
            return {"ran": False}
        send = held
        files = self._files
        key = files.key(user_id, send.upload_id, RECIPIENTS)
        stored = files.stored(key)
        if stored is None:  # the upload's files are gone (past their 30 days)
            raise RuntimeError(f"send {campaign_id}: the recipients' file {key} is gone")
        steps = 0
        while send is not None and send.state == PUBLISHING:
            if remaining_ms() / 1000 < CONTINUE_WITH_S:
                self._uploads.release(send, holder)  # the next invocation takes it at once
                self._invoke_async(function_name, send_event(user_id, campaign_id))
                return {"ran": True, "steps": steps, "published": send.published, "continued": True}
            control = self._control_state(user_id, campaign_id)
            if control == CANCELLED:
                self._uploads.set_send_state(user_id, campaign_id, SEND_CANCELLED, self._clock())
                log.info("publication cancelled", user=user_id, campaign=campaign_id, published=send.published)
                return {"ran": True, "steps": steps, "published": send.published, "cancelled": True}
            if control == PAUSED:
                self._uploads.release(send, holder)  # a resume starts another invocation
                log.info("publication paused", user=user_id, campaign=campaign_id, published=send.published)
                return {"ran": True, "steps": steps, "published": send.published, "paused": True}
            send = self._step(send, key, stored, holder)
            steps += 1
        if send is None:  # its step was not recorded: the lease is given up, for whoever goes on
            self._uploads.release(held, holder)
            log.info("publication went on elsewhere", user=user_id, campaign=campaign_id)
            return {"ran": True, "steps": steps, "continued": False}
        log.info("publication done", user=user_id, campaign=campaign_id, published=send.published)
        return {"ran": True, "steps": steps, "published": send.published, "continued": False}

    def _step(self, send: Send, key: str, stored: Any, holder: str) -> Send | None:
        window = next(self._files.chunks(key, stored, send.offset, RECIPIENT_BYTES), b"")
        at_end = send.offset + len(window) >= stored.size
        whole = window if at_end else window[: window.rfind(b"\n") + 1]
        if not whole and not at_end:
            raise RuntimeError(f"send {send.campaign_id}: a line of {key} at {send.offset} is over {RECIPIENT_BYTES}")
        lines = whole.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()
        taken = lines[:MAX_RECIPIENTS_PER_MESSAGE]
        used = len(whole) if len(taken) == len(lines) else sum(len(line) + 1 for line in taken)
        recipients = [line for line in taken if line.strip()]
        if recipients:
            self._publish(self._message(send, recipients))
        offset = send.offset + used
        finished = offset >= stored.size
        return self._uploads.advance(send, offset, len(recipients), finished, self._clock(), holder, LEASE_S)

    def _message(self, send: Send, lines: list[bytes]) -> str:
        envelope = dict(send.envelope)
        sender = dict(envelope["sender"])
        version = sender.get("keyVersion")
        if isinstance(version, int):
            sender["keyProof"] = self._sender_proof(send.user_id, send.campaign_id, version)
        envelope["sender"] = sender
        head = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
        return head[:-1] + ',"recipients":[' + b",".join(lines).decode("utf-8") + "]}"
