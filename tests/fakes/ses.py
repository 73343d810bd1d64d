"""SES in memory: a generous quota; `outcomes` makes a recipient's send raise."""

from __future__ import annotations

from collections.abc import Mapping

from chalicelib.core.contract import Sender
from chalicelib.send.ses_sender import SendQuota
from chalicelib.stores.ports.sending import TenantStatus
from chalicelib.stores.ses_tenants import STATUS_CACHE_S


class FakeSes:
    def __init__(self, outcomes: Mapping[str, Exception] | None = None) -> None:
        self.sent: list[tuple[str | None, str, str, bool]] = []
        self.tenants: list[str | None] = []  # the SES tenant each send went through (None: the tenant's own account)
        self.raws: dict[str, bytes] = {}  # recipient -> the raw message last sent to them
        self.outcomes = dict(outcomes or {})
        self.account_sending = True  # GetAccount's SendingEnabled

    def quota(self, sender: Sender, platform: bool = False) -> SendQuota:
        return SendQuota(1000.0, 50000.0, 0.0)

    def send(self, sender: Sender, to: str, raw_mime: bytes, platform: bool = False, tenant: str | None = None) -> str:
        error = self.outcomes.get(to)
        if error:
            raise error
        self.sent.append((sender.api_key, sender.email_address, to, platform))
        self.tenants.append(tenant)
        self.raws[to] = raw_mime
        return f"ses-{len(self.sent)}"

    def sending_enabled(self, sender: Sender, platform: bool = False) -> bool:
        return self.account_sending

    def account_of(self, sender: Sender) -> str:
        return "111111111111"


class FakeSesTenants:
    """SES tenants of the platform's account (chalicelib.stores.ports.SesTenantRecords): each user's is
    `ses-<user>`; `statuses` says SES's view (a user with none is no SES tenant)."""

    def __init__(self, statuses: Mapping[str, TenantStatus] | None = None) -> None:
        self.statuses = dict(statuses or {})
        self.ensured: list[tuple[str, str, str]] = []
        self.forgotten: list[str] = []

    def ensure(self, user_id: str, from_address: str, region: str) -> str:
        self.ensured.append((user_id, from_address, region))
        return f"ses-{user_id}"

    def name_of(self, user_id: str) -> str:
        return f"ses-{user_id}"

    def forget(self, user_id: str) -> None:
        self.forgotten.append(user_id)

    def status(self, user_id: str, region: str, *, max_age_s: float = STATUS_CACHE_S) -> TenantStatus | None:
        """`statuses`' word; else a tenant set up here may send (SES's answer for a new tenant)."""
        given = self.statuses.get(user_id)
        if given is None and any(user == user_id for user, _a, _r in self.ensured):
            return TenantStatus(self.name_of(user_id), "ENABLED", None, None)
        return given
