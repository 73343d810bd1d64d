"""SES in memory: a generous quota; `outcomes` makes a recipient's send raise."""

from __future__ import annotations

from chalicelib.send.ses_sender import SendQuota


class FakeSes:
    def __init__(self, outcomes=None):
        self.sent = []
        self.raws = {}  # recipient -> the raw message last sent to them
        self.outcomes = outcomes or {}

    def quota(self, sender, platform=False):
        return SendQuota(1000.0, 50000.0, 0.0)

    def send(self, sender, to, raw, platform=False):
        error = self.outcomes.get(to)
        if error:
            raise error
        self.sent.append((sender.api_key, sender.email_address, to, platform))
        self.raws[to] = raw
        return f"ses-{len(self.sent)}"

    def account_of(self, sender):
        return "111111111111"
