"""A free-plan From address: what a claim costs in SES requests, against the local stack's DynamoDB and SES."""

import pytest

from chalicelib.core.errors import SenderRefused
from chalicelib.stores.free_senders import FreeAddresses
from chalicelib.stores.platform_identities import PlatformIdentities

pytestmark = pytest.mark.e2e


def _counted(stack):
    """The platform's SES v2 client, and the names of the calls made with it."""
    ses, calls = stack.client("sesv2"), []
    ses.meta.events.register("before-call.sesv2.*", lambda model, **_: calls.append(model.name))
    return ses, calls


def test_a_first_send_costs_one_ses_read_and_later_sends_none(stack, uid):
    ses, calls = _counted(stack)
    own = f"news@{uid}.example"
    ses.create_email_identity(EmailIdentity=own)
    calls.clear()
    s = stack.settings
    addresses = FreeAddresses(s.resources.tenants_table.name, s.region, PlatformIdentities(lambda: ses))
    addresses.claim(f"a-{uid}", own, 1)
    assert calls == ["GetEmailIdentity"]  # its own identity: claimed
    calls.clear()
    for _ in range(3):
        addresses.claim(f"a-{uid}", own.upper(), 2)  # the claim is read (DynamoDB), SES is not
    assert calls == []
    # Another container (no cache) refusing another tenant reads no SES either: the claim says whose it is.
    again = FreeAddresses(s.resources.tenants_table.name, s.region, PlatformIdentities(lambda: ses))
    with pytest.raises(SenderRefused, match="is the From address of another tenant"):
        again.claim(f"b-{uid}", own, 3)
    assert calls == []


def test_a_refused_domain_covered_address_reads_ses_once_per_container_not_once_per_message(stack, uid):
    ses, calls = _counted(stack)
    domain = f"platform-{uid}.example"
    ses.create_email_identity(EmailIdentity=domain)
    calls.clear()
    s = stack.settings
    addresses = FreeAddresses(s.resources.tenants_table.name, s.region, PlatformIdentities(lambda: ses))
    for _ in range(5):
        with pytest.raises(SenderRefused, match=f"covered only by the platform's domain identity {domain}"):
            addresses.claim(f"a-{uid}", f"billing@{domain}", 1)
    assert calls == ["GetEmailIdentity", "GetEmailIdentity"]  # the address's, then its domain's; then kept
    assert addresses.owner(f"billing@{domain}") is None
