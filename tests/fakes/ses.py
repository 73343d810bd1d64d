"""SES in memory: a generous quota; `outcomes` makes a recipient's send raise."""

from __future__ import annotations

from chalicelib.send.ses_sender import SendQuota


class FakeSes:
    def __init__(self, outcomes=None):
        self.sent = []
        self.tenants = []  # the SES tenant each send went through (None: the tenant's own account)
        self.raws = {}  # recipient -> the raw message last sent to them
        self.outcomes = outcomes or {}
        self.account_sending = True  # GetAccount's SendingEnabled

    def quota(self, sender, platform=False):
        return SendQuota(1000.0, 50000.0, 0.0)

    def send(self, sender, to, raw, platform=False, tenant=None):
        error = self.outcomes.get(to)
        if error:
            raise error
        self.sent.append((sender.api_key, sender.email_address, to, platform))
        self.tenants.append(tenant)
        self.raws[to] = raw
        return f"ses-{len(self.sent)}"

    def sending_enabled(self, sender, platform=False):
        return self.account_sending

    def account_of(self, sender):
        return "111111111111"


class FakeSesTenants:
    """SES tenants of the platform's account: each user's is `ses-<user>`; `statuses` says SES's view."""

    def __init__(self, statuses=None):
        self.statuses = statuses or {}  # user -> TenantStatus
        self.ensured = []
        self.forgotten = []

    def ensure(self, user_id, from_address, region):
        self.ensured.append((user_id, from_address, region))
        return f"ses-{user_id}"

    def name_of(self, user_id):
        return f"ses-{user_id}"

    def forget(self, user_id):
        self.forgotten.append(user_id)

    def status(self, user_id, region, max_age_s=60.0):
        return self.statuses.get(user_id)
