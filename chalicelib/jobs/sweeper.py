"""The sweeper: every minute, start a drain for any queue that has work and no drainer.

CloudWatch alarms act only on state changes. If messages arrive while a queue's alarm is still in
ALARM (the last drain ended, the alarm has not re-evaluated yet), no notification comes and, without
this, the queue would wait forever: MoonMail's stall. The sweeper looks at every queue of this stage;
a queue with visible messages and no live lease gets a drain started (which takes the lease, so a
drain started twice still runs once). Expired leases of dead drainers are retaken the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.core import log
from chalicelib.core.aws import NO_SUCH_QUEUE
from chalicelib.core.config import Settings
from chalicelib.core.routing import is_our_queue
from chalicelib.stores.lease import Leases


class Sweeper:
    def __init__(self, settings: Settings, sqs: Any, leases: Leases, start: Callable[[str], None]) -> None:
        self._settings = settings
        self._sqs = sqs
        self._leases = leases
        self._start = start

    def queues_with_work(self) -> list[str]:
        r = self._settings.resources
        out: list[str] = []
        for page in self._sqs.get_paginator("list_queues").paginate(QueueNamePrefix=r.prefix):
            for url in page.get("QueueUrls", []):
                name = url.rsplit("/", 1)[-1]
                if not is_our_queue(r, name):
                    continue
                try:
                    attrs = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
                except ClientError as exc:
                    if exc.response["Error"]["Code"] in NO_SUCH_QUEUE:
                        continue  # removed since it was listed (an idle queue retired meanwhile)
                    raise
                if int(attrs["Attributes"]["ApproximateNumberOfMessages"]) > 0:
                    out.append(name)
        return out

    def sweep(self) -> list[str]:
        """Start a drain for every queue with work and no live lease; returns those queues."""
        started = []
        for queue in self.queues_with_work():
            if self._leases.holder(queue) is None:
                self._start(queue)
                started.append(queue)
        if started:
            log.info("sweeper started drains", queues=started)
        return started
