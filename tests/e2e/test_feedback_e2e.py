"""Bounces, complaints and deliveries through the local stack: SES's events suppress, and stick."""

import pytest

from chalicelib import wiring
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import eventually, read_sends
from tests.e2e.test_pipeline_e2e import _tenant

pytestmark = pytest.mark.e2e

BOUNCE, COMPLAINT, OK = (f"{n}@simulator.amazonses.com" for n in ("bounce", "complaint", "success"))


def _campaign(stack, user, sender, campaign, recipients):
    spec = CampaignSpec(user, sender, "Hi", "<p>Hi</p>", campaign)
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, [{"email": e} for e in recipients]),
    )
    assert stack.wait_until_drained(60)


def test_a_bounced_or_complaining_address_is_suppressed_and_never_sent_to_again(stack, uid):
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    c = wiring.container()
    _campaign(stack, user, sender, "first", [BOUNCE, COMPLAINT, OK])
    assert eventually(
        lambda: c.stats.get(user, "first")["complained"] == 1 and c.stats.get(user, "first")["bounced"], 30
    )
    counts = c.stats.get(user, "first")
    assert (counts["sent"], counts["delivered"], counts["bounced"], counts["complained"]) == (3, 2, 1, 1)
    feedback = {e.email: e.feedback for e in c.ledger.entries(user, "first")}
    assert feedback[BOUNCE].startswith("bounced: Permanent")
    assert feedback[OK] == "delivered: 250 2.6.0 Message received"
    assert c.suppressions.check(user, [BOUNCE, COMPLAINT, OK]).keys() == {BOUNCE, COMPLAINT}

    # The tenant's next campaign: both are recorded as suppressed, with why, and only the third is sent.
    before = len(read_sends(stack.config.outbox))
    _campaign(stack, user, sender, "second", [BOUNCE, COMPLAINT, OK])
    second = {e.email: (e.state, e.reason) for e in c.ledger.entries(user, "second")}
    assert second[OK][0] == "sent"
    assert second[BOUNCE] == (
        "suppressed",
        "suppressed for every tenant: bounce (permanent bounce: smtp; 550 5.1.1 user unknown)",
    )
    assert second[COMPLAINT][0] == "suppressed" and "for this tenant: complaint" in second[COMPLAINT][1]
    new_sends = [s["to"] for s in read_sends(stack.config.outbox)[before:] if s["userId"] == user]
    assert new_sends == [OK]
    assert c.stats.get(user, "second")["suppressed"] == 2

    # Another tenant: the bounce is suppressed for everyone, the complaint was about the first tenant only.
    other = c.suppressions.check(f"other-{uid}", [BOUNCE, COMPLAINT])
    assert list(other) == [BOUNCE]


def test_a_free_plan_emails_ses_events_reach_its_ledger_entry(stack, uid):
    """The free plan sends from the platform's SES account: its events must come back as a paid tenant's
    do. The Send event is what records a send whose drainer died after SES accepted it; without it the
    claim expires and the email goes out again (soak seed 12 saw one such duplicate)."""
    user = f"free-{uid}"
    free = {"region": "us-east-1", "ratePerSecond": "5", "emailAddress": f"news@{uid}.example", "fromName": "Free"}
    stack.client("sesv2").create_email_identity(EmailIdentity=free["emailAddress"])  # in the platform's account
    _campaign(stack, user, free, "free-events", [OK])
    c = wiring.container()
    assert eventually(lambda: c.stats.get(user, "free-events")["delivered"] == 1, 30)
    assert {e.email: e.feedback for e in c.ledger.entries(user, "free-events")} == {
        OK: "delivered: 250 2.6.0 Message received"
    }
