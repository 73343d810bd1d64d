"""Every email as its campaign said, from the tenant that sent it (through the local stack).

A campaign's sender is fixed by its first accepted message; keys change only within their AWS account
(STS, as the local gateway answers it: each access key its own account unless added to another's); a
free-plan From address belongs to one tenant.
"""

import json
from email import message_from_bytes
from email.policy import default

import pytest

from chalicelib import wiring
from chalicelib.core.contract import CAMPAIGN_HEADER, TENANT_HEADER
from chalicelib.feedback.ses_events import parse_event
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import eventually, read_sends
from tests.e2e.test_pipeline_e2e import _tenant

pytestmark = pytest.mark.e2e

PLATFORM_ACCOUNT = "123456789012"
OK = "success@simulator.amazonses.com"


def _publish(stack, bodies):
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], bodies)


def _message(user, sender, campaign, emails, subject="Hi"):
    spec = CampaignSpec(user, sender, subject, "<p>Hi</p>", campaign)
    return list(messages(spec, [{"email": e} for e in emails]))


def _froms(stack, user, campaign):
    return {
        str(message_from_bytes(p.read_bytes(), policy=default)["From"])
        for p in (stack.config.outbox / user / campaign).glob("*.eml")
    }


def _reasons(user, campaign):
    return {e.email: (e.state, e.reason) for e in wiring.container().ledger.entries(user, campaign)}


def test_each_email_goes_out_from_its_own_campaigns_sender_whatever_was_published_after_it(stack, uid):
    # The finding: a newsletter went out From the invoice campaign's address published after it.
    user = f"tenant-{uid}"
    news = _tenant(stack, uid, rate=4, ses_rate=14)
    bills = {**news, "emailAddress": f"bills@{uid}.example", "fromName": "Billing", "ratePerSecond": "3"}
    stack.client("sesv2", access_key=news["apiKey"], secret_key=news["apiSecret"]).create_email_identity(
        EmailIdentity=bills["emailAddress"]
    )
    bodies = []
    for i in range(4):  # one recipient per message, the two campaigns interleaved
        bodies += _message(user, news, "newsletter", [f"n{i}@example.org"])
        bodies += _message(user, bills, "invoice", [f"b{i}@example.org"])
    _publish(stack, bodies)
    assert stack.wait_until_drained(60)
    assert _froms(stack, user, "newsletter") == {f"News <news@{uid}.example>"}
    assert _froms(stack, user, "invoice") == {f"Billing <bills@{uid}.example>"}
    stats = wiring.container().stats
    assert stats.get(user, "newsletter")["sent"] == 4 and stats.get(user, "invoice")["sent"] == 4


def test_a_later_message_of_a_campaign_with_another_sender_is_rejected_naming_the_difference(stack, uid):
    user = f"tenant-{uid}"
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    _publish(stack, _message(user, sender, "spring", ["a@example.org"]))
    assert stack.wait_until_drained(60)
    other = {**sender, "emailAddress": f"sales@{uid}.example", "ratePerSecond": "9"}
    _publish(stack, _message(user, other, "spring", ["b@example.org", "c@example.org"]))
    assert stack.wait_until_drained(60)
    rows = _reasons(user, "spring")
    assert rows["a@example.org"][0] == "sent"
    state, reason = rows["b@example.org"]
    assert state == "rejected" and "fixed by its first message" in reason
    assert f"sender.emailAddress is 'news@{uid}.example' for this campaign, 'sales@{uid}.example'" in reason
    assert "sender.ratePerSecond is 20.0 for this campaign, 9.0 in this message" in reason
    assert [s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user] == ["a@example.org"]


def test_email_queued_for_a_paid_tenant_never_goes_through_the_platform_after_a_keyless_message(stack, uid):
    # The finding: 400 queued paid emails went out through the platform's account at the paid rate after one
    # message without keys. Here the paid campaign drains at 3/s while the keyless message arrives.
    user = f"tenant-{uid}"
    paid = _tenant(stack, uid, rate=3, ses_rate=14)
    tenant_account = stack.ses.account_id_for(paid["apiKey"])
    _publish(stack, _message(user, paid, "paid", [f"p{i}@example.org" for i in range(9)]))
    # The keyless message comes once the paid one is on the queue: two messages in flight at once are
    # precompiled in either order, and the registry keeps the plan of the last one it accepted.
    ledger = wiring.container().ledger
    assert eventually(lambda: len(ledger.recorded(user, "paid", [f"p{i}@example.org" for i in range(9)])) == 9, 30)
    keyless = {k: v for k, v in paid.items() if k not in ("apiKey", "apiSecret")}
    keyless["emailAddress"] = f"free@{uid}.example"
    stack.client("sesv2").create_email_identity(EmailIdentity=keyless["emailAddress"])  # the platform's account
    _publish(stack, _message(user, keyless, "free-one", ["f@example.org"]))
    assert stack.wait_until_drained(60)
    sends = [s for s in read_sends(stack.config.outbox) if s["userId"] == user]
    accounts = {c: {s["account"] for s in sends if s["campaignId"] == c} for c in ("paid", "free-one")}
    assert accounts == {"paid": {tenant_account}, "free-one": {PLATFORM_ACCOUNT}}
    assert sum(1 for s in sends if s["campaignId"] == "paid") == 9
    tenant = wiring.container().tenants.get(user, fresh=True)
    assert tenant.plan == "free" and [k.account for k in tenant.keys] == [tenant_account]  # keys stay registered


def test_keys_rotate_within_their_account_and_the_events_stay_trusted_but_another_accounts_are_refused(stack, uid):
    user = f"tenant-{uid}"
    first = _tenant(stack, uid, rate=20, ses_rate=20)
    account = stack.ses.account_id_for(first["apiKey"])
    _publish(stack, _message(user, first, "one", [OK]))
    assert stack.wait_until_drained(60)

    # A rotation: a second key of the same AWS account (STS says so). The finding: a warm sender never
    # re-learned the account, and every later SES event of the tenant was dropped as untrusted.
    rotated = {**first, "apiKey": f"AKIAR{uid}".upper(), "apiSecret": f"rotated-{uid}"}
    stack.ses.add_key(rotated["apiKey"], to_account_of=first["apiKey"])
    # The rest of campaign "one" with the rotated keys: the same account, so the same sender (not refused).
    _publish(stack, _message(user, rotated, "two", [OK]) + _message(user, rotated, "one", ["later@example.org"]))
    assert stack.wait_until_drained(60)
    assert _reasons(user, "one")["later@example.org"][0] == "sent"
    c = wiring.container()
    assert eventually(lambda: c.stats.get(user, "two")["delivered"] == 1, 30)  # SES's Delivery event was trusted
    tenant = c.tenants.get(user, fresh=True)
    assert [(k.version, k.account) for k in tenant.keys] == [(1, account), (2, account)]

    # Keys of another account: refused with the accounts named; the registered keys are unchanged.
    stranger = {**first, "apiKey": f"AKIAS{uid}".upper(), "apiSecret": f"stranger-{uid}"}
    other_account = stack.ses.account_id_for(stranger["apiKey"])
    _publish(stack, _message(user, stranger, "three", ["x@example.org"]))
    assert stack.wait_until_drained(60)
    state, reason = _reasons(user, "three")["x@example.org"]
    assert state == "rejected"
    assert f"these keys belong to AWS account {other_account}, not to {account}" in reason
    assert "moonsend tenant move-keys" in reason
    assert [k.api_key for k in c.tenants.get(user, fresh=True).keys] == [first["apiKey"], rotated["apiKey"]]
    sent_three = [s for s in read_sends(stack.config.outbox) if s["userId"] == user and s["campaignId"] == "three"]
    assert sent_three == []


def test_an_operator_moves_a_tenant_to_another_account_and_its_events_are_trusted_from_both(stack, uid):
    from chalicelib.core.contract import Sender

    user = f"tenant-{uid}"
    first = _tenant(stack, uid, rate=20, ses_rate=20)
    _publish(stack, _message(user, first, "before", [OK]))
    assert stack.wait_until_drained(60)
    moved = {**first, "apiKey": f"AKIAM{uid}".upper(), "apiSecret": f"moved-{uid}"}
    stack.client("sesv2", access_key=moved["apiKey"], secret_key=moved["apiSecret"]).create_email_identity(
        EmailIdentity=moved["emailAddress"]
    )
    c = wiring.container()
    keys = Sender("", "", "us-east-1", moved["apiKey"], moved["apiSecret"], 1)
    new = c.tenants.replace_keys(user, keys, c.ses.account_of)
    assert new.version == 2 and new.account == stack.ses.account_id_for(moved["apiKey"])
    _publish(stack, _message(user, moved, "after", [OK]))
    assert stack.wait_until_drained(60)
    assert eventually(lambda: c.stats.get(user, "after")["delivered"] == 1, 30)
    sends = {s["campaignId"]: s["account"] for s in read_sends(stack.config.outbox) if s["userId"] == user}
    assert sends == {"before": stack.ses.account_id_for(first["apiKey"]), "after": new.account}


def test_a_free_plan_from_address_belongs_to_the_tenant_that_used_it_first(stack, uid):
    address = f"hello@{uid}.example"
    owner, thief = f"owner-{uid}", f"thief-{uid}"
    free = {"region": "us-east-1", "ratePerSecond": "5", "emailAddress": address, "fromName": "Hello"}
    stack.client("sesv2").create_email_identity(EmailIdentity=address)  # verified in the platform's account
    _publish(stack, _message(owner, free, "c", ["a@example.org"]))
    assert stack.wait_until_drained(60)
    _publish(stack, _message(thief, {**free, "fromName": "Not Hello"}, "c", ["b@example.org"]))
    assert stack.wait_until_drained(60)
    state, reason = _reasons(thief, "c")["b@example.org"]
    assert state == "rejected"
    assert reason == (
        f"sender.emailAddress: {address} is the From address of another tenant on the free plan "
        "(an operator can assign it: moonsend tenant assign-from)"
    )
    assert [s["userId"] for s in read_sends(stack.config.outbox) if s["userId"] in (owner, thief)] == [owner]
    # The case of the address does not make it another one.
    _publish(stack, _message(thief, {**free, "emailAddress": address.upper()}, "d", ["c@example.org"]))
    assert stack.wait_until_drained(60)
    assert _reasons(thief, "d")["c@example.org"][0] == "rejected"


def test_a_tenants_ses_events_from_another_account_stay_untrusted_after_a_message_with_its_user_id(stack, uid):
    # The finding: a message naming another tenant's userId with other keys made those keys' account the
    # trusted source of that tenant's SES events. Now those keys are refused and nothing is learned.
    user = f"tenant-{uid}"
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    _publish(stack, _message(user, sender, "one", [OK]))
    assert stack.wait_until_drained(60)
    intruder = {**sender, "apiKey": f"AKIAI{uid}".upper(), "apiSecret": "intruder"}
    _publish(stack, _message(user, intruder, "two", ["y@example.org"]))
    assert stack.wait_until_drained(60)
    tenant = wiring.container().tenants.get(user, fresh=True)
    assert tenant.accounts == {stack.ses.account_id_for(sender["apiKey"])}
    forged = {
        "eventType": "Bounce",
        "bounce": {"bounceType": "Permanent", "bouncedRecipients": [{"emailAddress": OK}]},
        "mail": {
            "messageId": "forged-1",
            "sendingAccountId": stack.ses.account_id_for(intruder["apiKey"]),
            "destination": [OK],
            "headers": [
                {"name": TENANT_HEADER, "value": user},
                {"name": CAMPAIGN_HEADER, "value": "one"},
            ],
        },
    }
    assert parse_event(forged).user_id == user  # the forged record names the tenant as a real one would
    assert wiring.container().ses_events.handle(json.dumps(forged)) == "untrusted"


def _platform_domain(stack, uid):
    """A domain verified in the platform's SES account, as the platform's own is (`billing@`, `security@`)."""
    domain = f"platform-{uid}.example"
    stack.client("sesv2").create_email_identity(EmailIdentity=domain)
    return domain


def _free(address, name="N"):
    return {"region": "us-east-1", "ratePerSecond": "5", "emailAddress": address, "fromName": name}


def test_no_free_tenant_claims_an_address_covered_only_by_the_platforms_domain_identity(stack, uid):
    # The finding: the first free tenant to send as `billing@<the platform's domain>` made it its own,
    # and its SES tenant was associated with the platform's domain identity.
    domain = _platform_domain(stack, uid)
    first, second = f"first-{uid}", f"second-{uid}"
    news, billing = f"news@{domain}", f"billing@{domain}"
    stack.client("sesv2").create_email_identity(EmailIdentity=news)  # an identity of its own
    _publish(stack, _message(first, _free(news), "c", ["a@example.org"]))
    _publish(stack, _message(second, _free(billing), "c", ["b@example.org"]))
    _publish(stack, _message(first, _free(billing), "d", ["c@example.org"]))
    assert stack.wait_until_drained(60)
    assert _reasons(first, "c") == {"a@example.org": ("sent", None)}  # its own identity: claimed on first send
    assert wiring.container().free_addresses.owner(news) == first
    for user, campaign, email in ((second, "c", "b@example.org"), (first, "d", "c@example.org")):
        state, reason = _reasons(user, campaign)[email]
        assert state == "rejected"
        assert reason == (
            f"sender.emailAddress: {billing} is covered only by the platform's domain identity {domain}, not by "
            "an identity of its own, so no free tenant claims it by sending: an operator assigns it first "
            f"(moonsend tenant assign-from --user {user} --address {billing})"
        )
    assert wiring.container().free_addresses.owner(billing) is None
    sent = [(s["userId"], s["campaignId"]) for s in read_sends(stack.config.outbox) if s["userId"] in (first, second)]
    assert sent == [(first, "c")]


def test_an_address_no_identity_covers_is_refused_before_it_reaches_ses(stack, uid):
    user, address = f"nowhere-{uid}", f"hello@nowhere-{uid}.example"
    _publish(stack, _message(user, _free(address), "c", ["a@example.org"]))
    assert stack.wait_until_drained(60)
    state, reason = _reasons(user, "c")["a@example.org"]
    assert state == "rejected"
    assert reason.startswith(
        f"sender.emailAddress: {address} is not verified in the platform's SES account (neither the address nor "
        "its domain)"
    )
    assert wiring.container().free_addresses.owner(address) is None


def test_after_assign_from_a_domain_covered_address_sends_for_that_tenant_only(stack, uid, capsys, monkeypatch):
    from infra import cli
    from infra.cli import main

    monkeypatch.setattr(cli, "_container", wiring.container)  # this session's objects (see test_webhooks_e2e)
    domain = _platform_domain(stack, uid)
    billing, owner, other = f"billing@{domain}", f"billing-{uid}", f"other-{uid}"
    common = ["--endpoint", stack.endpoint, "--stage", "local"]
    # Before its first message: the tenant is not registered yet, and the assignment is what lets it send.
    assert main(["tenant", "assign-from", "--user", owner, "--address", billing.upper(), *common]) == 0
    out = capsys.readouterr().out
    assert f"{owner} (no message from this tenant yet): {billing.upper()} is now its free-plan From address" in out
    assert f"covered in the platform's SES account by only the domain identity {domain}" in out
    _publish(stack, _message(owner, _free(billing), "c", ["a@example.org"]))
    _publish(stack, _message(other, _free(billing), "c", ["b@example.org"]))
    assert stack.wait_until_drained(60)
    assert _reasons(owner, "c") == {"a@example.org": ("sent", None)}
    assert _reasons(other, "c")["b@example.org"] == (
        "rejected",
        f"sender.emailAddress: {billing} is the From address of another tenant on the free plan "
        "(an operator can assign it: moonsend tenant assign-from)",
    )
    assert [s["userId"] for s in read_sends(stack.config.outbox) if s["userId"] in (owner, other)] == [owner]


def test_assign_from_refuses_a_malformed_address_and_says_which_identity_covers_it(stack, uid, capsys, monkeypatch):
    from infra import cli
    from infra.cli import main

    monkeypatch.setattr(cli, "_container", wiring.container)
    user, common = f"assigned-{uid}", ["--endpoint", stack.endpoint, "--stage", "local"]
    for bad in ("not an address", "a@b@c.example", "x" * 250 + "@example.org", ""):
        assert main(["tenant", "assign-from", "--user", user, "--address", bad, *common]) == 2
        assert "is not an email address" in capsys.readouterr().err
        assert wiring.container().free_addresses.owner(bad or "-") is None
    own = f"own@{uid}.example"
    stack.client("sesv2").create_email_identity(EmailIdentity=own)
    assert main(["tenant", "assign-from", "--user", user, "--address", own, *common]) == 0
    assert f"covered in the platform's SES account by its own verified identity {own}" in capsys.readouterr().out
    nowhere = f"hello@nowhere-{uid}.example"
    assert main(["tenant", "assign-from", "--user", user, "--address", nowhere, *common]) == 0
    printed = capsys.readouterr()
    assert "by no verified identity (neither the address nor its domain)" in printed.out
    assert f"SES refuses email from {nowhere} until the address or its domain is verified" in printed.err
    assert wiring.container().free_addresses.owner(nowhere) == user  # assigned all the same: verified later


def _claimed_as_before(stack, user, address):
    """A claim made by a first send under the earlier rule (any free tenant, any address nobody had)."""
    stack.client("dynamodb").put_item(
        TableName=stack.settings.resources.tenants_table.name,
        Item={"user_id": {"S": f"_from:{address}"}, "owner": {"S": user}, "claimed_at": {"N": "1700000000000"}},
    )


def test_audit_from_lists_and_with_fix_drops_claims_no_identity_of_their_own_proves(stack, uid, capsys, monkeypatch):
    # The finding: `security@` of the platform's domain, claimed by a free tenant's first send before the rule
    # changed, was only ever read back: it stayed that tenant's.
    from infra import cli
    from infra.cli import main

    monkeypatch.setattr(cli, "_container", wiring.container)
    domain = _platform_domain(stack, uid)
    hijacker, owner = f"hijacker-{uid}", f"owner-{uid}"
    security, nowhere, news, billing = (
        f"security@{domain}",
        f"hello@nowhere-{uid}.example",
        f"news@{domain}",
        f"billing@{domain}",
    )
    _claimed_as_before(stack, hijacker, security)
    _claimed_as_before(stack, hijacker, nowhere)
    stack.client("sesv2").create_email_identity(EmailIdentity=news)
    _claimed_as_before(stack, owner, news)  # its own identity: a first send proves it
    common = ["--endpoint", stack.endpoint, "--stage", "local"]
    assert main(["tenant", "assign-from", "--user", owner, "--address", billing, *common]) == 0  # an operator's
    capsys.readouterr()

    assert main(["tenant", "audit-from", *common]) == 1  # listed, not dropped
    listed = [line for line in capsys.readouterr().out.splitlines() if uid in line]
    assert listed == [
        f"{nowhere}  claimed by {hijacker} since 2023-11-14T22:13:20+00:00, covered by no verified identity "
        "(neither the address nor its domain)",
        f"{security}  claimed by {hijacker} since 2023-11-14T22:13:20+00:00, covered by only the domain "
        f"identity {domain}",
    ]
    addresses = wiring.container().free_addresses
    assert addresses.owner(security) == hijacker  # listing changes nothing

    assert main(["tenant", "audit-from", "--fix", *common]) == 0
    out = capsys.readouterr().out
    assert f"{security}  claimed by {hijacker}" in out and f"{nowhere}  claimed by {hijacker}" in out
    assert " -> dropped" in out and "a dropped address is refused until an operator assigns it" in out
    assert [addresses.owner(a) for a in (security, nowhere, news, billing)] == [None, None, owner, owner]
    assert not [c for c in addresses.unproven() if uid in c.address]
    # The hijacker's next message from security@ is refused like any free tenant's.
    _publish(stack, _message(hijacker, _free(security), "c", ["a@example.org"]))
    assert stack.wait_until_drained(60)
    state, reason = _reasons(hijacker, "c")["a@example.org"]
    assert state == "rejected" and f"covered only by the platform's domain identity {domain}" in reason


def test_a_claim_released_after_an_operator_reassigned_it_stays_assigned(stack, uid):
    domain = _platform_domain(stack, uid)
    security = f"security@{domain}"
    _claimed_as_before(stack, f"hijacker-{uid}", security)
    addresses = wiring.container().free_addresses
    (claim,) = [c for c in addresses.unproven() if c.address == security]
    addresses.assign(f"owner-{uid}", security, 1)  # meanwhile, an operator's decision
    assert not addresses.release(claim)
    assert addresses.owner(security) == f"owner-{uid}"


def test_the_smoke_assigns_its_from_address_to_the_smoke_tenant_whatever_covers_it(stack, uid):
    from infra.cli import _smoke_sender
    from infra.smoke import SMOKE_TENANT

    ses, addresses = stack.client("sesv2"), wiring.container().free_addresses
    own, domain_covered = f"smoke@own-{uid}.example", f"smoke@{_platform_domain(stack, uid)}"
    nowhere = f"smoke@nowhere-{uid}.example"
    ses.create_email_identity(EmailIdentity=own)
    for sender in (own, domain_covered, nowhere):
        assert _smoke_sender(stack.settings, ses, sender) is None
        assert addresses.owner(sender) == SMOKE_TENANT
    assert not [c for c in addresses.unproven() if uid in c.address]  # assigned: nothing for the audit to drop
    taken = f"smoke@taken-{uid}.example"
    addresses.assign(f"other-{uid}", taken, 1)
    assert _smoke_sender(stack.settings, ses, taken) == (
        f"{taken} is the free-plan From address of other-{uid}: give the smoke an address of its own"
    )
    assert addresses.owner(taken) == f"other-{uid}"
