"""The reputation guard: too many bounces or complaints pause a tenant; its email is held, not lost."""

import json

from chalicelib import wiring
from chalicelib.contract import Sender
from chalicelib.reputation import Limits, Window, verdict
from chalicelib.ses_events import SesEvents
from tests.test_ses_events import BOUNCE, _record

LIMITS = Limits()


def test_rates_over_the_limits_pause_but_small_volumes_do_not():
    assert verdict(Window(7, 199, 100, 0), LIMITS) is None  # too few sends to mean anything
    assert verdict(Window(7, 1000, 50, 1), LIMITS) is None  # 5.0% and 0.1%: at the limits, not over
    assert "bounce rate 5.1%" in verdict(Window(7, 1000, 51, 0), LIMITS)
    assert "complaint rate 0.20%" in verdict(Window(7, 1000, 0, 2), LIMITS)


def test_permanent_bounces_over_five_percent_pause_the_tenant_with_the_reason(stack, uid):
    c = wiring.container()
    user = f"careless-{uid}"
    c.tenants.remember(user, "free", Sender("news@careless.example", "C", None, None, None, 1.0))
    c.reputation.add(user, sent=300)
    events = SesEvents(c.ledger, c.stats, c.suppressions, c.tenants, c.settings.account_id, c.reputation)
    for i in range(16):  # 16 of 300: 5.3%
        record = json.loads(_record(BOUNCE, account=c.settings.account_id))
        record["mail"]["destination"] = [f"gone{i}@x.io"]
        record["bounce"]["bouncedRecipients"][0]["emailAddress"] = f"gone{i}@x.io"
        for h in record["mail"]["headers"]:
            if h["name"] == "X-Moonsend-Tenant":
                h["value"] = user
        assert events.handle(json.dumps(record)) == "recorded bounced"
        if i < 14:
            assert c.tenants.get(user).paused_reason is None  # 15 of 300 is still 5.0%
    reason = c.tenants.get(user).paused_reason
    assert reason.startswith("reputation guard: bounce rate 5.3% over the last 7 days (16 of 300)")
    assert (user, reason) in c.tenants.paused()
    c.tenants.resume(user)
    assert c.tenants.get(user).paused_reason is None
