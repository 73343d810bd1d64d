"""A tenant's pauses: each has an owner, and the tenant is paused while any of them stands (docs/operations.md).

Owners: the tenant itself (the tenant API), an operator (`moonsend tenant pause`), the reputation guard
(chalicelib.feedback.ses_events) and SES (its pause of a free tenant's SES tenant, seen by the drainer or
the guard). Each pause is lifted by its owner or by an operator; SES's only once SES has lifted its own.
A pause of one owner never hides or replaces another's: a tenant that pauses itself and resumes lifts only
its own pause, and a guard's pause set meanwhile still holds its email.

In the table each owner has its own pair of attributes (`pause_<owner>`: the reason, `pause_<owner>_at`),
read with the rest of the tenant's item (the drainer's cached read: no request of its own). `paused_reason`
is kept as well, all standing reasons in one line, for code from before owners (a container of the
previous release during a deploy still holds a paused tenant's email), the tenant's own reason last (see
`summary`).

An item from before owners has only `paused_reason`: that one pause is given the owner its reason names
(every writer then prefixed its reason with who it was; see `legacy_owner`), and an unknown reason to an
operator, the owner only an operator lifts, so that a guessed owner never lets a tenant lift a platform's
pause. It is rewritten with its owner at the item's next pause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chalicelib.core.contract import iso_ms

TENANT, OPERATOR, GUARD, SES = "tenant", "operator", "guard", "ses"
OWNERS = (TENANT, OPERATOR, GUARD, SES)
_SUMMARY_ORDER = (OPERATOR, GUARD, SES, TENANT)  # the legacy summary's: the tenant's own reason last

# Who each owner is, and who may lift its pause, in the words the tenant and operators see.
OWNER_NAMES = {TENANT: "the tenant", OPERATOR: "an operator", GUARD: "the reputation guard", SES: "SES"}
LIFTED_BY = {
    TENANT: "the tenant or an operator",
    OPERATOR: "an operator",
    GUARD: "an operator",
    SES: "an operator, once SES has lifted its own pause",
}

# What each owner's reason started with before owners were stored (chalicelib.control.campaign_actions,
# chalicelib.feedback.ses_events, chalicelib.send.delivery, chalicelib.stores.ses_tenants wrote them).
_LEGACY_PREFIXES = (
    ("paused by the tenant", TENANT),
    ("paused by an operator", OPERATOR),
    ("reputation guard:", GUARD),
    ("SES paused sending for SES tenant", SES),
    ("SES refused sending for SES tenant", SES),
)
MAX_REASON = 500


@dataclass(frozen=True)
class Pause:
    owner: str
    reason: str
    at_ms: int | None = None

    @property
    def held_by(self) -> str:
        """`the reputation guard (reputation guard: bounce rate ...)`: whose pause keeps the email back, and why."""
        return f"{OWNER_NAMES.get(self.owner, self.owner)} ({self.reason})"

    def as_dict(self) -> dict[str, Any]:
        """As the tenant API answers it."""
        since = iso_ms(self.at_ms) if self.at_ms else None
        return {"by": self.owner, "reason": self.reason, "since": since, "liftedBy": LIFTED_BY[self.owner]}


def legacy_owner(reason: str) -> str:
    """The owner of a pause stored before owners, from its reason (an operator's when it names none)."""
    return next((owner for prefix, owner in _LEGACY_PREFIXES if reason.startswith(prefix)), OPERATOR)


def pauses_of(item: Any) -> tuple[Pause, ...]:
    """The pauses standing on a tenant's table item, in the order of OWNERS."""
    found = tuple(
        Pause(owner, reason, _ms(getattr(item, f"pause_{owner}_at")))
        for owner in OWNERS
        if (reason := getattr(item, f"pause_{owner}")) is not None
    )
    if found or not item.paused_reason:
        return found
    return (Pause(legacy_owner(item.paused_reason), item.paused_reason, _ms(item.paused_at)),)


def summary(pauses: tuple[Pause, ...] | list[Pause]) -> str | None:
    """Every standing reason in one line (None: not paused), the platform owners' first and the tenant's last.

    Code from before owners lets a tenant resume when this starts with "paused by the tenant" (and then
    clears it): with a platform owner's reason first, a container of the previous release (during a deploy
    or a rollback) never lifts the guard's, an operator's or SES's pause at the tenant's request."""
    ordered = sorted(pauses, key=lambda p: _SUMMARY_ORDER.index(p.owner) if p.owner in _SUMMARY_ORDER else 0)
    return "; ".join(p.reason for p in ordered) or None


def held_by(pauses: tuple[Pause, ...] | list[Pause]) -> str:
    return " and ".join(p.held_by for p in pauses)


def _ms(value: float | None) -> int | None:
    return int(value) if value is not None else None
