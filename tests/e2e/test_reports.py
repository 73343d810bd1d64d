"""Per-campaign reports over HTTP: a tenant's own key sees its campaign, nobody else's key sees anything."""

import json
import urllib.error
import urllib.request

import pytest

from chalicelib.control.api_keys import ApiKeys, key_hash, new_key, owner_of
from chalicelib.core.contract import Sender
from chalicelib.feedback.reports import Reports
from tests.fakes.answered import answered

pytestmark = pytest.mark.e2e


def _get(url, key=None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_a_key_names_its_tenant_and_only_its_hash_is_kept():
    key = new_key("auth0|5f3e.a")
    assert owner_of(key) == "auth0|5f3e.a" and len(key) > 50
    assert key_hash(key) != key and len(key_hash(key)) == 64


def test_a_tenant_reads_its_campaign_report_and_another_tenants_key_gets_404(stack, uid):
    from chalicelib import wiring

    c = wiring.container()
    for user in (f"a-{uid}", f"b-{uid}"):
        c.tenants.accept(user, "free", Sender(f"news@{user}.example", "N", None, None, None, 1.0), c.ses.account_of)
    c.stats.add(f"a-{uid}", "spring", queued=3, sent=2, failed=1, error="MessageRejected: x")
    key_a, key_b = c.api_keys.replace_all(f"a-{uid}"), c.api_keys.replace_all(f"b-{uid}")
    url = f"{stack.api_url}/campaigns/spring/report"

    status, body = _get(url, key_a)
    assert status == 200 and body["campaign"] == "spring"
    assert (body["counts"]["queued"], body["counts"]["sent"], body["counts"]["failed"]) == (3, 2, 1)
    assert set(body["counts"]) >= {"delivered", "bounced", "complained", "opened", "clicked", "unsubscribed"}

    assert _get(url, key_b)[0] == 404  # b has no campaign "spring": same answer as a wrong key
    assert _get(url, key_a[:-3] + "xyz")[0] == 404
    assert _get(url, new_key(f"a-{uid}"))[0] == 404  # a well-formed key that was never issued
    assert _get(url)[0] == 401
    newer = c.api_keys.replace_all(f"a-{uid}")  # a new key replaces the old one
    assert _get(url, key_a)[0] == 404 and _get(url, newer)[0] == 200
    assert [k.digest for k in c.api_key_store.of_tenant(f"a-{uid}")] == [key_hash(newer)] != [newer]  # hashed


@pytest.mark.parametrize(
    "key",
    ["msk__x", "msk_" + "YWFh" * 1000 + "_x", new_key("x" * 129), new_key("_unattributed"), "msk_4pyT_x", "msk_%%_x"],
    # Named, not shown: new_key's random part would give each xdist worker another test id.
    ids=["empty-id", "id-of-3000-bytes", "id-of-129-chars", "unattributed", "not-base64url", "percent-signs"],
)
def test_a_key_naming_an_id_no_tenant_can_have_names_nobody_and_is_never_looked_up(key):
    """`msk__x` names "", which the tenant registry's GetItem refuses (an empty key) as it refuses an id over
    the key's size: both answered 500 before. Nothing that cannot be an id is looked up."""
    assert owner_of(key) is None

    class Nothing:  # a registry or counter store that must not be asked
        def __getattr__(self, name):
            raise AssertionError(f"looked up: {name}")

    api_keys = ApiKeys(Nothing(), Nothing())
    assert api_keys.authenticate(f"Bearer {key}") is None


def test_a_campaign_id_no_campaign_can_have_is_a_404_without_a_look_up():
    class Registry:  # a tenant whose key is the one its row held before keys had their own table
        def api_key_hash(self, user_id):
            return key_hash(key)

    class NoKeys:
        def get(self, user_id, digest):
            return None

    class Stats:
        def get(self, user_id, campaign_id):
            raise AssertionError(f"looked up {campaign_id[:20]}")

    key = new_key("acme")
    api_keys, reports = ApiKeys(NoKeys(), Registry()), Reports(Stats())
    assert api_keys.authenticate(f"Bearer {key}") == "acme"
    assert api_keys.authenticate(f"bearer {key}") == api_keys.authenticate(f"BEARER  {key} ") == "acme"  # RFC 9110
    assert api_keys.authenticate(f"Basic {key}") is None and api_keys.authenticate(key) is None
    for campaign in ("c" * 3000, "é" * 600, "..x"):
        assert answered(lambda c=campaign: reports.report_for("acme", c)).status == 404
