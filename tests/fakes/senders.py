"""The campaign sender snapshots, free-plan From addresses and STS in memory (chalicelib.stores.ports:
SenderFix, FreeAddressRecords)."""

from __future__ import annotations

from collections.abc import Iterable

from chalicelib.core.contract import Sender
from chalicelib.core.errors import SenderRefused
from chalicelib.stores.free_senders import unclaimable
from chalicelib.stores.ports.campaigns import SenderSnapshot
from chalicelib.stores.ports.sending import Coverage


class FakeCampaignSenders:
    """chalicelib.stores.campaign_sender.CampaignSenders in memory: the first snapshot of a campaign stays."""

    def __init__(self) -> None:
        self.fixed: dict[tuple[str, str], SenderSnapshot] = {}
        self.subjects: dict[tuple[str, str], str | None] = {}

    def fix(self, user_id: str, campaign_id: str, snapshot: SenderSnapshot, subject: str | None = None) -> None:
        self.subjects.setdefault((user_id, campaign_id), subject)
        fixed = self.fixed.setdefault((user_id, campaign_id), snapshot)
        differences = snapshot.differences(fixed)
        if differences:
            raise SenderRefused("sender: " + "; ".join(differences))


class FakeFreeAddresses:
    """chalicelib.stores.free_senders.FreeAddresses in memory: the first free tenant to send from an address
    has it, when the address has a verified identity of its own in the platform's account.

    `own`: the addresses with one (None: every address, for tests that are not about the claim's rules);
    `domains`: the domains verified as such (their other addresses are claimed by nobody)."""

    def __init__(self, own: Iterable[str] | None = None, domains: Iterable[str] = ()) -> None:
        self.owners: dict[str, str] = {}
        self._own = None if own is None else {a.lower() for a in own}
        self._domains = {d.lower() for d in domains}

    def covering(self, address: str) -> Coverage:
        own = self._own is None or address.lower() in self._own
        return Coverage(address, own, not own and address.rpartition("@")[2].lower() in self._domains)

    def owner(self, address: str) -> str | None:
        return self.owners.get(address.lower())

    def claim(self, user_id: str, address: str, now_ms: int) -> None:
        owner = self.owners.get(address.lower())
        if owner is None:
            coverage = self.covering(address)
            if not coverage.own:
                raise SenderRefused(unclaimable(user_id, coverage))
            owner = self.owners.setdefault(address.lower(), user_id)
        if owner != user_id:
            raise SenderRefused(
                f"sender.emailAddress: {address} is the From address of another tenant on the free plan"
            )


def no_account(_sender: Sender) -> str:
    """account_of for unit tests whose tenants never change keys."""
    return "111111111111"
