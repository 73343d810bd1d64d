"""A campaign's rates as its page shows them, from the counts the API gives (chalicelib.control.campaign_views).

Each rate is over what could have led to it, as ESPs report them: delivered, bounced and complained over
the emails sent; opened, clicked and unsubscribed over the emails delivered (an email never delivered
cannot be opened). None, not 0 %, while nothing has been sent or delivered yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

OVER_SENT = ("delivered", "bounced", "complained")
OVER_DELIVERED = ("opened", "clicked", "unsubscribed")


@dataclass(frozen=True)
class Rate:
    kind: str
    count: int
    of: int  # what it is counted over
    over: str  # "sent" or "delivered"

    @property
    def percent(self) -> float | None:
        return round(100 * self.count / self.of, 1) if self.of else None


def rates(counts: Mapping[str, int]) -> tuple[Rate, ...]:
    sent, delivered = counts.get("sent", 0), counts.get("delivered", 0)
    return tuple(Rate(k, counts.get(k, 0), sent, "sent") for k in OVER_SENT) + tuple(
        Rate(k, counts.get(k, 0), delivered, "delivered") for k in OVER_DELIVERED
    )
