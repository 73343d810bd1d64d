"""SES's sending status events followed: driven by the examples AWS documents (tests/fixtures), each with
its page; SES's status read again when one arrives, and only SES's own pause lifted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chalicelib.core.contract import Sender
from chalicelib.feedback.sending_status import (
    DISABLED,
    ENABLED,
    IGNORED,
    PAUSED,
    RESUMED,
    UNCHANGED,
    SendingStatus,
    read_event,
)
from chalicelib.stores.pauses import GUARD, SES
from chalicelib.stores.ports.sending import TenantStatus
from chalicelib.stores.ports.tenants import Tenant
from chalicelib.stores.ses_tenants import tenant_name
from tests.fakes import FakeTenants
from tests.fakes.ses import FakeSesTenants

EXAMPLES = json.loads((Path(__file__).parents[1] / "fixtures" / "ses_sending_status_events.json").read_text())
PREFIX = "moonsend-dev"
ACCOUNT, REGION = "012345678901", "us-east-1"


def documented(index: int, user: str) -> dict[str, Any]:
    """AWS's example `index`, its placeholders filled for this tenant (the blog's names its own tenant, whose
    name stands for ours)."""
    example = EXAMPLES["examples"][index]
    assert example["page"].startswith("https://") and example["detail-type"] == example["event"]["detail-type"]
    text = json.dumps(example["event"])
    name = tenant_name(PREFIX, user)
    for placeholder, value in (
        ("{tenant-name}", name),
        ("CustomerA-Tenant", name),
        ("{tenant-id}", "tn-0123456789abcdef"),
        ("[account_id]", ACCOUNT),
        ("[aws_region]", REGION),
    ):
        text = text.replace(placeholder, value)
    return json.loads(text)


def _free(user: str) -> Tenant:
    return Tenant(user, "free", Sender(f"{user}@free.moonsend.io", "A", REGION, "", "", 1.0), ())


class Following:
    def __init__(self, *tenants: Tenant, statuses: dict[str, TenantStatus] | None = None) -> None:
        self.tenants = FakeTenants(*tenants)
        self.ses = FakeSesTenants(statuses)
        self.resumed: list[str] = []
        self.follower = SendingStatus(
            self.tenants, self.ses, self._resume, lambda: list(self.tenants.by_id), PREFIX, REGION
        )

    def _resume(self, user: str) -> tuple[bool, str]:
        self.resumed.append(user)
        lifted = self.tenants.resume(user, [SES])
        return bool(lifted), "resumed" if lifted else "not paused by SES"


def _status(user: str, sending: str, cause: str | None = None) -> TenantStatus:
    return TenantStatus(tenant_name(PREFIX, user), sending, cause, None)


@pytest.mark.parametrize("index", range(len(EXAMPLES["examples"])))
def test_each_documented_example_is_read_as_sesses_word_on_its_tenant(index):
    said = read_event(documented(index, "acme"))
    assert (said.detail_type, said.region, said.tenant) == (DISABLED, REGION, "moonsend-dev-acme")
    assert (said.origin, said.status, said.cause) == ("CUSTOMER_MANAGED", "DISABLED", "Status manually updated.")


@pytest.mark.parametrize("index", range(len(EXAMPLES["examples"])))
def test_a_documented_disabled_event_pauses_the_free_tenant_as_ses_with_sesses_cause(index):
    f = Following(_free("acme"), statuses={"acme": _status("acme", "DISABLED", "The bounce rate exceeded 10%.")})
    done = f.follower.follow(documented(index, "acme"))
    assert done.what == PAUSED and done.user_id == "acme"
    (pause,) = f.tenants.get("acme").pauses
    assert pause.owner == SES and pause.reason.endswith("The bounce rate exceeded 10%.")
    again = f.follower.follow(documented(index, "acme"))  # EventBridge delivers at least once
    assert again.what == UNCHANGED and len(f.tenants.get("acme").pauses) == 1


def test_a_disabled_event_that_arrives_after_ses_enabled_the_tenant_again_pauses_nothing():
    """Best effort and out of order: SES's status now decides, not the event's."""
    f = Following(_free("acme"), statuses={"acme": _status("acme", "ENABLED")})
    done = f.follower.follow(documented(0, "acme"))
    assert done.what == UNCHANGED and not f.tenants.get("acme").pauses


def test_once_ses_enables_the_tenant_its_event_lifts_sesses_pause_and_only_sesses():
    f = Following(_free("acme"), statuses={"acme": _status("acme", "DISABLED", "bounces")})
    f.follower.follow(documented(0, "acme"))
    f.tenants.pause("acme", GUARD, "reputation guard: bounce rate 6%")
    f.ses.statuses["acme"] = _status("acme", "ENABLED")
    # AWS documents no Enabled example: the documented Disabled one, with the detail-type and record SES
    # gives when it enables (the local stand-in's, infra.local.ses_tenants).
    event = documented(0, "acme")
    event["detail-type"] = ENABLED
    event["detail"]["data"]["record"] = {"status": "ENABLED", "lastUpdatedTimestamp": [2025, 7, 25, 0, 0, 0, 0]}
    done = f.follower.follow(event)
    assert done.what == RESUMED and f.resumed == ["acme"]
    assert [p.owner for p in f.tenants.get("acme").pauses] == [GUARD]  # the guard's pause stands


def test_a_late_disabled_event_for_a_tenant_ses_reinstated_lifts_sesses_pause():
    """REINSTATED may send (SES's word): the cue of any event lifts a pause SES no longer holds."""
    f = Following(_free("acme"), statuses={"acme": _status("acme", "DISABLED", "bounces")})
    f.follower.follow(documented(1, "acme"))
    f.ses.statuses["acme"] = _status("acme", "REINSTATED")
    assert f.follower.follow(documented(1, "acme")).what == RESUMED and not f.tenants.get("acme").pauses


def test_a_retry_of_an_event_whose_try_died_after_lifting_sesses_pause_takes_the_resume_again():
    """Killed between the lift and the parked email's return: Lambda's retry finds no pause, and still
    resumes, which puts the parked email back (chalicelib.control.campaign_actions)."""
    f = Following(_free("acme"), statuses={"acme": _status("acme", "ENABLED")})
    done = f.follower.follow(documented(0, "acme"))
    assert done.what == UNCHANGED and f.resumed == ["acme"]


def test_a_tenant_named_by_its_digest_is_found_among_every_tenant():
    user = "acme.io"  # not of SES's alphabet: its SES tenant is named by a digest
    assert tenant_name(PREFIX, user).startswith(f"{PREFIX}-_")
    f = Following(_free(user), statuses={user: _status(user, "DISABLED", "complaints")})
    assert f.follower.follow(documented(0, user)).what == PAUSED


@pytest.mark.parametrize(
    ("case", "change"),
    [
        (
            "another stage's tenant",
            lambda e: e.update(resources=["arn:aws:ses:us-east-1:1:tenant/moonsend-prod-acme/tn-1"]),
        ),
        ("no tenant named: the account's", lambda e: e.update(resources=[])),
        ("another service's event", lambda e: e.update(source="aws.sns")),
        ("another detail-type", lambda e: e.update({"detail-type": "Email Bounced"})),
    ],
)
def test_an_event_about_no_tenant_of_this_stage_changes_nothing(case, change):
    f = Following(_free("acme"), statuses={"acme": _status("acme", "DISABLED", "bounces")})
    event = documented(0, "acme")
    change(event)
    assert f.follower.follow(event).what == IGNORED, case
    assert not f.tenants.get("acme").pauses


def test_a_paid_tenant_sends_from_its_own_account_and_its_old_ses_tenant_is_not_followed():
    paid = Tenant("acme", "paid", Sender("news@acme.io", "A", REGION, "AKIA", "s", 5.0), ())
    f = Following(paid, statuses={"acme": _status("acme", "DISABLED", "bounces")})
    assert f.follower.follow(documented(0, "acme")).what == IGNORED and not f.tenants.get("acme").pauses


def test_a_status_ses_cannot_give_now_raises_so_that_lambda_retries_the_event():
    class Throttled(FakeSesTenants):
        def status(self, user_id, region, *, max_age_s=60.0):
            raise RuntimeError("TooManyRequestsException")

    f = Following(_free("acme"))
    f.follower = SendingStatus(f.tenants, Throttled(), f._resume, lambda: [], PREFIX, REGION)
    with pytest.raises(RuntimeError):
        f.follower.follow(documented(0, "acme"))


def test_a_pause_written_after_ses_enabled_the_tenant_again_is_lifted_at_once():
    """Disabled read DISABLED; SES enabled the tenant and its Enabled event found no pause to lift; then the
    Disabled's pause was written. Read again after writing it, SES's word wins: no pause of SES's outlives it."""

    class EnabledMeanwhile(FakeSesTenants):
        def status(self, user_id, region, *, max_age_s=60.0):
            given = self.statuses[user_id]
            self.statuses[user_id] = _status(user_id, "ENABLED")  # SES enables it right after the first read
            return given

    f = Following(_free("acme"))
    f.ses = EnabledMeanwhile({"acme": _status("acme", "DISABLED", "bounces")})
    f.follower = SendingStatus(f.tenants, f.ses, f._resume, lambda: [], PREFIX, REGION)
    done = f.follower.follow(documented(0, "acme"))
    assert done.what == UNCHANGED and "enabled it again meanwhile" in done.message
    assert f.resumed == ["acme"] and not f.tenants.get("acme").pauses


def test_an_event_from_a_region_the_tenant_does_not_send_from_changes_nothing():
    f = Following(_free("acme"), statuses={"acme": _status("acme", "DISABLED", "bounces")})
    event = documented(0, "acme")
    event["region"] = "eu-west-1"  # an SES tenant it once had there: its email goes out in us-east-1
    done = f.follower.follow(event)
    assert done.what == IGNORED and "us-east-1, not eu-west-1" in done.message
    assert not f.tenants.get("acme").pauses
