"""Per-campaign reports over HTTP, for the tenant that owns the campaign (its API key: chalicelib.control.api_keys).
A campaign the tenant does not have is the same 404 as another tenant's: a report reveals nothing of others.
"""

from __future__ import annotations

from typing import Any

from chalicelib.core.errors import NotFound
from chalicelib.core.fields import is_id
from chalicelib.stores.campaign_stats import COUNTERS
from chalicelib.stores.ports.campaigns import CampaignPages


class Reports:
    def __init__(self, stats: CampaignPages) -> None:
        self._stats = stats

    def report_for(self, user_id: str, campaign_id: str) -> dict[str, Any]:
        """A campaign's counts; NotFound when the tenant has no such campaign."""
        if not is_id(campaign_id):  # an id no campaign can have is not a key to look up
            raise NotFound()
        counts = self._stats.get(user_id, campaign_id)
        if counts is None:
            raise NotFound()
        rate = counts.achieved_rate
        return {
            "campaign": campaign_id,
            "counts": {name: counts[name] for name in COUNTERS},
            "achievedRatePerSecond": round(rate, 3) if rate else None,
            "lastError": counts.last_error,
        }
