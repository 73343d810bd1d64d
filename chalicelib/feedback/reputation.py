"""The reputation guard: a tenant whose bounces or complaints run too high stops sending.

SES reviews (and then pauses) an account whose bounce rate passes about 5% or complaint rate 0.1%; on
the platform's account one careless free tenant would take every other free tenant down with it, and a
paid tenant's own account is its livelihood. So each tenant's sends, permanent bounces and complaints
are counted per UTC day (the `usage` table, beside the free plan's cap), and after each bounce or
complaint the rolling window (7 days by default) is checked: over a limit, with enough volume to mean
something, the tenant is paused with the reason. The drainer parks a paused tenant's email (nothing is
dropped) until `moonsend tenant resume`.

The sends (the rates' denominator) are counted ahead of sending, in blocks (`SentAhead`): a drainer that
dies can then only leave the count a little high (the guard pauses a little late), never low, which
would pause a tenant whose rates are fine.
"""

from __future__ import annotations

from chalicelib.stores.ports.sending import Limits, Window


def verdict(window: Window, limits: Limits) -> str | None:
    """Why this window should pause the tenant, or None."""
    if window.sent < limits.min_sent:
        return None
    if window.bounce_rate > limits.bounce_rate:
        return (
            f"bounce rate {window.bounce_rate:.1%} over the last {window.days} days "
            f"({window.bounced} of {window.sent}) is above {limits.bounce_rate:.1%}"
        )
    if window.complaint_rate > limits.complaint_rate:
        return (
            f"complaint rate {window.complaint_rate:.2%} over the last {window.days} days "
            f"({window.complained} of {window.sent}) is above {limits.complaint_rate:.2%}"
        )
    return None
