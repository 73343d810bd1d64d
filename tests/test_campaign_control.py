"""Campaign control state in DynamoDB (the local stack), as the CLI sets it and the sender reads it."""

import pytest

from chalicelib.campaign_control import CANCELLED, PAUSED, CampaignControl

pytestmark = pytest.mark.e2e


def test_pause_resume_cancel_round_trip_and_the_sender_sees_a_change_within_its_cache(stack, uid):
    table = stack.settings.resources.campaigns_table.name
    cli = CampaignControl(table, stack.settings.region)
    sender_view = CampaignControl(table, stack.settings.region, cache_s=0.0)
    assert sender_view.state(f"t-{uid}", "c1") is None  # a campaign never controlled sends
    cli.set(f"t-{uid}", "c1", PAUSED)
    assert sender_view.state(f"t-{uid}", "c1") == PAUSED
    cli.set(f"t-{uid}", "c1", None)
    assert sender_view.state(f"t-{uid}", "c1") is None
    cli.set(f"t-{uid}", "c1", CANCELLED)
    assert sender_view.state(f"t-{uid}", "c1") == CANCELLED
    with pytest.raises(ValueError):
        cli.set(f"t-{uid}", "c1", "stopped")
