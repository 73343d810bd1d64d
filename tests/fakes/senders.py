"""The campaign sender snapshots, free-plan From addresses and STS in memory."""

from __future__ import annotations


class FakeCampaignSenders:
    """chalicelib.stores.campaign_sender.CampaignSenders in memory: the first snapshot of a campaign stays."""

    def __init__(self) -> None:
        self.fixed: dict[tuple[str, str], object] = {}

    def fix(self, user_id, campaign_id, snapshot) -> None:
        from chalicelib.core.errors import SenderRefused

        fixed = self.fixed.setdefault((user_id, campaign_id), snapshot)
        differences = snapshot.differences(fixed)
        if differences:
            raise SenderRefused("sender: " + "; ".join(differences))


class FakeFreeAddresses:
    def __init__(self) -> None:
        self.owners: dict[str, str] = {}

    def claim(self, user_id, address, now_ms) -> None:
        from chalicelib.core.errors import SenderRefused

        if self.owners.setdefault(address.lower(), user_id) != user_id:
            raise SenderRefused(f"sender.emailAddress: {address} is another tenant's")


def no_account(_sender) -> str:
    """account_of for unit tests whose tenants never change keys."""
    return "111111111111"
