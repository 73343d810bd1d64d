"""SES tenants: each free-plan tenant an SES tenant of the platform's account, so that SES pauses only the
one that misbehaves, and moonsend holds that tenant's email (never fails it) and says why.

The local SES stand-in's tenant calls are made through boto3's own SES v2 client (its model serialises
the requests and parses the answers), and the functions' calls pass the local IAM's checks of the
template's grants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from chalicelib import wiring
from chalicelib.stores.ses_tenants import SesTenants, tenant_name
from infra.producer import CampaignSpec, messages, publish
from infra.status import snapshot
from tests.conftest import eventually, free_tenant

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parents[1] / "fixtures" / "ses_sending_status_events.json"


def _ses(stack):
    return stack.client("sesv2")  # the operator's: the platform's account


def test_the_stand_in_answers_tenant_calls_in_the_shapes_of_the_ses_v2_model(stack, uid):
    ses, name = _ses(stack), f"shape-{uid}"
    created = ses.create_tenant(TenantName=name)
    assert created["TenantName"] == name and created["SendingStatus"] == "ENABLED"
    arn = created["TenantArn"]
    assert arn.startswith(f"arn:aws:ses:{stack.config.region}:") and f":tenant/{name}/tn-" in arn
    with pytest.raises(ClientError) as again:
        ses.create_tenant(TenantName=name)
    assert again.value.response["Error"]["Code"] == "AlreadyExistsException"
    got = ses.get_tenant(TenantName=name)["Tenant"]
    assert got["TenantId"] == created["TenantId"] and got["CreatedTimestamp"].year >= 2026  # parsed as a time
    with pytest.raises(ClientError) as missing:
        ses.get_tenant(TenantName=f"none-{uid}")
    assert missing.value.response["Error"]["Code"] == "NotFoundException"
    identity = f"arn:aws:ses:{stack.config.region}:123456789012:identity/news@{uid}.example"
    ses.create_tenant_resource_association(TenantName=name, ResourceArn=identity)
    listed = ses.list_tenant_resources(TenantName=name)["TenantResources"]
    assert listed == [{"ResourceType": "EMAIL_IDENTITY", "ResourceArn": identity}]
    entity = ses.get_reputation_entity(ReputationEntityType="RESOURCE", ReputationEntityReference=arn)
    entity = entity["ReputationEntity"]
    assert entity["ReputationManagementPolicy"].endswith(":aws:reputation-policy/standard")  # SES's default
    assert entity["SendingStatusAggregate"] == "ENABLED"
    strict = f"arn:aws:ses:{stack.config.region}:aws:reputation-policy/strict"
    ses.update_reputation_entity_policy(
        ReputationEntityType="RESOURCE", ReputationEntityReference=arn, ReputationEntityPolicy=strict
    )
    ses.update_reputation_entity_customer_managed_status(
        ReputationEntityType="RESOURCE", ReputationEntityReference=arn, SendingStatus="DISABLED"
    )
    entity = ses.get_reputation_entity(ReputationEntityType="RESOURCE", ReputationEntityReference=arn)
    entity = entity["ReputationEntity"]
    assert entity["ReputationManagementPolicy"] == strict
    assert entity["CustomerManagedStatus"]["Status"] == "DISABLED" and entity["SendingStatusAggregate"] == "DISABLED"
    assert ses.get_tenant(TenantName=name)["Tenant"]["SendingStatus"] == "DISABLED"


def test_a_tenant_is_set_up_once_with_the_stages_policy_and_read_by_another_container_without_creating(stack, uid):
    ses = _ses(stack)
    address = f"news@{uid}.example"
    ses.create_email_identity(EmailIdentity=address)
    made: list[str] = []
    ses.meta.events.register("before-call.sesv2.*", lambda model, **_: made.append(model.name))

    def tenants(policy="standard"):
        s = stack.settings
        r = s.resources
        return SesTenants(lambda _region: ses, s.account_id, r.prefix, r.configuration_set, policy)

    region = stack.config.region

    first = tenants("strict")
    name = first.ensure(f"strict-{uid}", address, region)
    assert name == f"moonsend-local-strict-{uid}"
    assert made == [
        "GetTenant",
        "CreateTenant",
        "UpdateReputationEntityPolicy",
        "GetEmailIdentity",
        "ListTenantResources",
        "CreateTenantResourceAssociation",
        "CreateTenantResourceAssociation",
    ]
    made.clear()
    assert first.ensure(f"strict-{uid}", address, region) == name and made == []  # remembered in the container
    resources = {r["ResourceArn"] for r in ses.list_tenant_resources(TenantName=name)["TenantResources"]}
    head = f"arn:aws:ses:{stack.config.region}:{stack.config.account_id}"
    assert resources == {f"{head}:identity/{address}", f"{head}:configuration-set/moonsend-local-events"}
    status = first.status(f"strict-{uid}", region)
    assert status is not None and status.policy and status.policy.endswith("/strict") and not status.paused
    # Another container finds the tenant and its resources in place, and creates nothing.
    made.clear()
    assert tenants().ensure(f"strict-{uid}", address, region) == name
    assert made == ["GetTenant", "GetEmailIdentity", "ListTenantResources"]
    assert tenants().status(f"nobody-{uid}", region) is None


def test_a_tenant_name_is_the_stages_prefix_and_the_id_or_a_digest_no_other_id_can_name():
    assert tenant_name("moonsend-dev", "acme") == "moonsend-dev-acme"
    long = tenant_name("moonsend-dev", "a" * 100)
    assert len(long) <= 64 and long.startswith("moonsend-dev-_")
    dotted = tenant_name("moonsend-dev", "acme.io")
    assert dotted.startswith("moonsend-dev-_") and dotted != tenant_name("moonsend-dev", "acme.iq")
    # The digest of one id is not another id's plain name (ids never start with `_`).
    assert tenant_name("moonsend-dev", dotted.removeprefix("moonsend-dev-").lstrip("_")) != dotted
    with pytest.raises(ValueError, match="one of none, standard, strict"):
        SesTenants(lambda _region: None, "1", "p", None, "lenient")


def _sent(user):
    counts = wiring.container().stats.get(user, "spring")
    return counts["sent"] if counts else 0


def test_ses_pausing_one_free_tenant_holds_its_email_and_no_other_tenants(stack, uid):
    c = wiring.container()
    careless, careful = f"careless-{uid}", f"careful-{uid}"
    topic = stack.topic_arns["moonsend-local-PrecompileEmail"]
    sns = stack.client("sns")
    bad = free_tenant(stack, careless)
    good = free_tenant(stack, careful)
    # A quarter bounce: SES's standard policy (the stand-in's: over 10% after 20 sends) pauses the SES tenant.
    people = [{"email": f"bounce+{uid}{i}@simulator.amazonses.com"} for i in range(10)]
    people += [{"email": f"success+{uid}{i}@simulator.amazonses.com"} for i in range(30)]
    publish(sns, topic, messages(CampaignSpec(careless, bad, "Hi", "<p>Hi</p>", "spring"), people))
    publish(sns, topic, messages(CampaignSpec(careful, good, "Hi", "<p>Hi</p>", "spring"), people[10:]))
    assert eventually(lambda: _sent(careful) == 30, 120)
    assert eventually(lambda: c.tenants.get(careless, fresh=True).paused_reason is not None, 60)
    stack.wait_until_drained(60)
    name = f"moonsend-local-{careless}"
    reason = c.tenants.get(careless, fresh=True).paused_reason
    assert reason.startswith(f"SES paused sending for SES tenant {name}: The bounce rate exceeded 10.0%")
    counts = c.stats.get(careless, "spring")
    assert 20 <= counts["sent"] < 40 and counts["failed"] == 0  # held, never failed
    states = {e.state for e in c.ledger.entries(careless, "spring")}
    assert "failed" not in states
    # `moonsend status` shows it paused, with SES's reason; the careful tenant is not paused.
    paused = {(u, p.owner): p.reason for u, p in snapshot(stack.settings, stack.client("sqs")).paused}
    assert paused.get((careless, "ses")) == reason and not any(u == careful for u, _ in paused)
    # SES's own view, read by the sender: its SES tenant is disabled by SES, the other's is not.
    ses = stack.client("sesv2")
    assert ses.get_tenant(TenantName=name)["Tenant"]["SendingStatus"] == "DISABLED"
    assert ses.get_tenant(TenantName=f"moonsend-local-{careful}")["Tenant"]["SendingStatus"] == "ENABLED"

    # SES said so on EventBridge too, in the shape it documents (tests/fixtures), followed by
    # ses_sending_status (chalicelib.feedback.sending_status).
    said = [e for e in stack.event_bus.put_events if e["resources"] and f"/{name}/" in e["resources"][0]]
    assert [e["detail-type"] for e in said] == ["Sending Status Disabled"]
    documented = json.loads(FIXTURES.read_text())["examples"][1]["event"]
    assert _shape(said[0]) == _shape(documented)
    assert said[0]["detail"]["data"]["origin"] == "AWS_MANAGED"
    assert said[0]["resources"][0].startswith(f"arn:aws:ses:{stack.config.region}:{stack.config.account_id}:tenant/")

    # While SES keeps it paused, nobody resumes it here; once SES lifts it, its event resumes it with no
    # operator, and what was held goes out.
    refused = c.actions.resume_tenant(careless, by_tenant=False)
    assert not refused.ok and "The bounce rate exceeded" in refused.message
    stack.ses.tenants.enable(stack.config.account_id, name)
    assert eventually(lambda: not c.tenants.get(careless, fresh=True).pauses, 60)
    assert eventually(lambda: _sent(careless) == 40, 120), c.stats.get(careless, "spring")
    said = [e for e in stack.event_bus.put_events if e["resources"] and f"/{name}/" in e["resources"][0]]
    assert [e["detail-type"] for e in said] == ["Sending Status Disabled", "Sending Status Enabled"]


def test_ses_enabling_a_tenant_lifts_only_sesses_pause_and_the_tenants_own_stands(stack, uid):
    """Pauses have owners: SES's word lifts SES's pause, never the tenant's own."""
    c = wiring.container()
    user = f"both-{uid}"
    sender = free_tenant(stack, user)
    ses = _ses(stack)
    name = c.ses_tenants.ensure(user, sender["emailAddress"], stack.config.region)
    arn = ses.get_tenant(TenantName=name)["Tenant"]["TenantArn"]
    # The platform's own (customer-managed) status: SES's event says CUSTOMER_MANAGED, as in AWS's example.
    ses.update_reputation_entity_customer_managed_status(
        ReputationEntityType="RESOURCE", ReputationEntityReference=arn, SendingStatus="DISABLED"
    )
    assert eventually(lambda: any(p.owner == "ses" for p in c.tenants.get(user, fresh=True).pauses), 60)
    assert c.actions.pause_tenant(user, "holiday", by_tenant=True).ok
    ses.update_reputation_entity_customer_managed_status(
        ReputationEntityType="RESOURCE", ReputationEntityReference=arn, SendingStatus="ENABLED"
    )
    assert eventually(lambda: [p.owner for p in c.tenants.get(user, fresh=True).pauses] == ["tenant"], 60)
    calls = [e for e in stack.event_bus.put_events if e["resources"] and f"/{name}/" in e["resources"][0]]
    assert [(e["detail-type"], e["detail"]["data"]["origin"]) for e in calls] == [
        ("Sending Status Disabled", "CUSTOMER_MANAGED"),
        ("Sending Status Enabled", "CUSTOMER_MANAGED"),
    ]
    follower = stack.settings.resources.function_name("ses_sending_status")
    assert not [d for d in stack.access.denied if d[0] == follower]


def _shape(value):
    """The event's keys, nested, with each value's JSON type: what AWS's example and ours must share."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k not in ("version", "id")}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__
