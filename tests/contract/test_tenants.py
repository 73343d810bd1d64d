"""The tenant registry on the local stack's DynamoDB: key versions, accounts, conditional writes."""

import threading
import time

import pytest

from chalicelib.core import aws
from chalicelib.core.contract import Sender
from chalicelib.core.errors import SenderRefused
from chalicelib.stores.tables import bound
from chalicelib.stores.tenant_model import TenantModel
from chalicelib.stores.tenant_secrets import TenantSecrets
from chalicelib.stores.tenants import TenantRegistry

ACCOUNTS = {"K1": "111111111111", "K2": "111111111111", "K3": "333333333333"}


def _account_of(sender):
    return ACCOUNTS[sender.api_key]


def _sender(key=None, address="news@a.example", rate=5.0):
    return Sender(address, "News", "us-east-1", key, key and f"secret-{key}", rate)


@pytest.fixture
def rows(stack):
    """The tenants table's rows as the registry's own bound model reads them (tables.bound caches one class
    per model and table): how a test writes a row from an earlier release."""
    return bound(TenantModel, stack.settings.resources.tenants_table.name, stack.settings.region)


@pytest.fixture
def registry(stack):
    s = stack.settings
    return lambda: TenantRegistry(
        s.resources.tenants_table.name, s.region, TenantSecrets.of(s.resources.tenant_secrets_alias, s.region), 60
    )


def test_first_keys_register_a_tenant_and_a_rotation_in_the_same_account_adds_a_version(registry, uid):
    r = registry()
    assert r.accept(uid, "paid", _sender("K1"), _account_of).version == 1
    assert r.accept(uid, "paid", _sender("K1"), _account_of).version == 1  # the same keys: no new version
    assert r.accept(uid, "paid", _sender("K2"), _account_of).version == 2
    assert r.accept(uid, "paid", _sender("K1"), _account_of).version == 1  # a slow producer's older keys: v1
    tenant = r.get(uid, fresh=True)
    assert [(k.version, k.account) for k in tenant.keys] == [(1, "111111111111"), (2, "111111111111")]
    assert tenant.sender.api_key == "K2" and tenant.sending_keys(1).api_key == "K2"  # the account's newest


def test_keys_of_another_account_are_refused_and_change_nothing(registry, uid):
    r = registry()
    r.accept(uid, "paid", _sender("K1"), _account_of)
    with pytest.raises(SenderRefused, match="belong to AWS account 333333333333, not to 111111111111"):
        r.accept(uid, "paid", _sender("K3", address="other@a.example"), _account_of)
    tenant = r.get(uid, fresh=True)
    assert [k.api_key for k in tenant.keys] == ["K1"] and tenant.sender.email_address == "news@a.example"


def test_a_move_to_another_account_is_explicit_and_old_email_keeps_its_own_accounts_keys(registry, uid):
    r = registry()
    r.accept(uid, "paid", _sender("K1"), _account_of)
    moved = r.replace_keys(uid, _sender("K3"), _account_of)
    assert (moved.version, moved.account) == (2, "333333333333")
    assert r.accept(uid, "paid", _sender("K3"), _account_of).version == 2
    tenant = r.get(uid, fresh=True)
    assert tenant.sending_keys(1).api_key == "K1" and tenant.sending_keys(2).api_key == "K3"
    assert tenant.accounts == {"111111111111", "333333333333"}
    # The account it moved away from is closed to new campaigns, even with keys it had registered.
    with pytest.raises(SenderRefused, match="belong to AWS account 111111111111, not to 333333333333"):
        r.accept(uid, "paid", _sender("K1"), _account_of)
    # Moving back to the first keys keeps their old version too (email queued with it still goes out).
    back = r.replace_keys(uid, _sender("K1"), _account_of)
    tenant = r.get(uid, fresh=True)
    assert back.version == 3 and [k.version for k in tenant.keys] == [1, 2, 3]
    assert tenant.sending_keys(1).api_key == "K1" and tenant.sending_keys(2).api_key == "K3"


def test_the_latest_message_wins_whatever_each_container_wrote_before(registry, uid):
    # The finding: a container skipped a write whose digest it had written itself, leaving another
    # container's newer (older-message) settings in force.
    a, b = registry(), registry()
    a.accept(uid, "paid", _sender("K1", rate=5.0), _account_of)
    b.accept(uid, "paid", _sender("K1", rate=9.0), _account_of)
    a.accept(uid, "paid", _sender("K1", rate=5.0), _account_of)
    assert a.get(uid, fresh=True).sender.rate_per_second == 5.0


def test_a_write_that_lost_a_race_reads_again_and_never_overwrites_the_newer_entry(stack, registry, uid):
    a, b = registry(), registry()
    a.accept(uid, "paid", _sender("K1"), _account_of)
    raced: list = []
    me = threading.get_ident()

    def another_writes(**_):
        if threading.get_ident() == me and not raced:  # between a's read and a's conditional write,
            raced.append(None)  # (b's own reads come through here too)
            raced[0] = b.accept(uid, "paid", _sender("K2"), _account_of)  # b registers the rotated keys

    # The client the registry's model calls (tables.bound takes it from chalicelib.core.aws), observed from
    # outside: the race is made on the wire, after a's read is answered.
    client = aws.table_client(stack.settings.region, stack.settings.resources.tenants_table.name)
    client.meta.events.register("after-call.dynamodb.GetItem", another_writes)
    try:
        assert a.accept(uid, "paid", _sender("K1", rate=7.0), _account_of).version == 1
    finally:
        client.meta.events.unregister("after-call.dynamodb.GetItem", another_writes)
    tenant = a.get(uid, fresh=True)
    assert [v.version for v in raced] == [2] and [k.api_key for k in tenant.keys] == [
        "K1",
        "K2",
    ]  # b's version survived a's write
    assert tenant.sender.rate_per_second == 7.0


def test_an_entry_from_before_key_versions_is_read_as_version_one_and_rewritten(registry, rows, uid):
    r = registry()
    m = rows
    m(uid, email_address="old@a.example", rate_per_second=3, api_key="K1", api_secret="secret-K1").save()
    assert r.get(uid, fresh=True).sending_keys(None).api_key == "K1"
    assert r.accept(uid, "paid", _sender("K2"), _account_of).version == 2  # K1's account learned, then compared
    assert [(k.version, k.account) for k in r.get(uid, fresh=True).keys] == [(1, "111111111111"), (2, "111111111111")]
    # The current keys stay where the previous release reads them: a rollback sends with them, never the platform.
    assert (m.get(uid).api_key, m.get(uid).ses_account_id) == ("K2", "111111111111")


def test_registered_keys_aws_no_longer_accepts_give_way_to_the_next_keys(registry, rows, uid):
    r = registry()
    m = rows
    m(uid, email_address="old@a.example", rate_per_second=3, api_key="DEAD", api_secret="x").save()

    def account_of(sender):
        if sender.api_key == "DEAD":
            raise SenderRefused("sender.apiKey: AWS does not accept these keys (InvalidClientTokenId)")
        return ACCOUNTS[sender.api_key]

    assert r.accept(uid, "paid", _sender("K3"), account_of).version == 1
    assert [k.api_key for k in r.get(uid, fresh=True).keys] == ["K3"]


def test_a_pause_written_by_another_container_is_seen_within_a_second_by_one_read_a_second(stack, registry, uid):
    from chalicelib.stores.pauses import OPERATOR
    from chalicelib.stores.tenants import PAUSE_READ_S

    drainer, operator = registry(), registry()
    drainer.accept(uid, "paid", _sender("K1"), _account_of)
    assert drainer.get(uid) is not None  # the tenant's settings, cached 60 s here
    reads: list[str] = []
    client = drainer._model._get_connection().connection.client  # the requests it makes
    client.meta.events.register("before-call.dynamodb.*", lambda model, **_: reads.append(model.name))
    assert drainer.pause_of(uid) is None
    for _ in range(50):
        assert drainer.pause_of(uid) is None
    assert reads == ["GetItem"]  # one read however often it is asked within the second

    assert operator.pause(uid, OPERATOR, "paused by an operator: audit")
    assert drainer.get(uid).paused_reason is None  # the settings' cache does not know yet
    assert drainer.pause_of(uid, fresh=True) == "paused by an operator: audit"
    operator.resume(uid)
    time.sleep(PAUSE_READ_S + 0.05)
    assert drainer.pause_of(uid) is None  # within PAUSE_READ_S of the resume, unasked
