"""The drainer's port on SES (chalicelib.send.ses_sender.SesSender), as Protocols sized to each consumer.

Beside its adapter (chalicelib.stores.ports says how ports are kept)."""

from __future__ import annotations

from typing import Protocol

from chalicelib.core.contract import Sender
from chalicelib.send.ses_sender import SendQuota


class SesQuota(Protocol):
    """The sending identity's: an SES account's limits."""

    def quota(self, sender: Sender, *, platform: bool = False) -> SendQuota: ...


class SesSend(Protocol):
    """The delivery's: send one raw email, and whether the account may send at all."""

    def send(
        self, sender: Sender, to: str, raw_mime: bytes, *, platform: bool = False, tenant: str | None = None
    ) -> str: ...

    def sending_enabled(self, sender: Sender, *, platform: bool = False) -> bool: ...


class SesSending(SesQuota, SesSend, Protocol):
    """The drainer's, which hands SES to both."""


class SesTenantForget(Protocol):
    """The executor's (chalicelib.send.executor): a free tenant's SES tenant, set up again on its next send."""

    def forget(self, user_id: str) -> None: ...
