"""The one way email goes onto a queue: the queue made sure of, a body over the size limit offloaded to S3.

Precompile, the release of scheduled and parked email, retry-failed and the drainer's own put-back all
come through here, so none can forget a step: a tenant queue is marked used (and created again if the
idle-queue job removed it) before anything goes on it, and an email larger than the queue takes goes to
S3 with a pointer in its place (chalicelib.stores.payloads), then it is sent in batches.
"""

from __future__ import annotations

from collections.abc import Sequence

from chalicelib.core.contract import QueuedEmail
from chalicelib.core.errors import MessageInvalid
from chalicelib.queueing.enqueuer import EnqueueFailure, Enqueuer, Outgoing
from chalicelib.queueing.ports import QueueRegistry
from chalicelib.stores.payloads import PayloadStore


class EmailQueue:
    def __init__(self, queues: QueueRegistry, enqueuer: Enqueuer, payloads: PayloadStore) -> None:
        self._queues = queues
        self._enqueuer = enqueuer
        self._payloads = payloads

    def put(
        self, queue: str, user_id: str, campaign_id: str | None, emails: Sequence[Outgoing]
    ) -> list[EnqueueFailure]:
        """Queue the emails (queued JSON, whole); the ones SQS would not take come back with the reason.

        `campaign_id` None: a batch of several campaigns (a paused free-plan tenant's parked email), each
        email's own is read from it."""
        return self.put_at(self._queues.ensure(queue, user_id), user_id, campaign_id, emails)

    def put_at(
        self, url: str, user_id: str, campaign_id: str | None, emails: Sequence[Outgoing]
    ) -> list[EnqueueFailure]:
        """Onto a queue known to exist: the drainer putting back what it just received from it (it may not
        create queues, and need not mark one used that it is draining)."""
        wrapped = []
        for o in emails:
            body = self._wrap(user_id, campaign_id, o.body)
            wrapped.append(o if body is o.body else o._replace(body=body))  # most go as they are: no copy
        return self._enqueuer.send(url, wrapped)

    def _wrap(self, user_id: str, campaign_id: str | None, body: str) -> str:
        if campaign_id is None:
            try:
                campaign_id = QueuedEmail.from_json(body).campaign_id
            except MessageInvalid:
                campaign_id = "_unreadable"  # only names the S3 key; the drainer records it unreadable
        return self._payloads.wrap(user_id, campaign_id, body)
