"""Tenants' SES secrets at rest: encrypted with the stage's KMS key, bound to their tenant, and decrypted
only by the functions that send (send_emails) or check keys (precompile_email), IAM enforced locally."""

import json

import pytest
from botocore.exceptions import ClientError

from chalicelib.core import aws
from chalicelib.core.contract import Sender
from chalicelib.stores.tenant_secrets import SecretUnreadable, TenantSecrets
from chalicelib.stores.tenants import TenantRegistry
from infra.cli import main as moonsend
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import as_function, read_sends
from tests.e2e.test_pipeline_e2e import _tenant

ACCOUNT = "111111111111"


def _secrets(stack):
    s = stack.settings
    return TenantSecrets.of(s.resources.tenant_secrets_alias, s.region)


def _registry(stack):
    s = stack.settings
    return TenantRegistry(s.resources.tenants_table.name, s.region, _secrets(stack))


def _sender(key, secret):
    return Sender("news@a.example", "News", "us-east-1", key, secret, 5.0)


def _raw(stack, user):
    ddb = stack.client("dynamodb")
    return ddb.get_item(TableName=stack.settings.resources.tenants_table.name, Key={"user_id": {"S": user}})["Item"]


def _sealed_versions(stack, user):
    return json.loads(_raw(stack, user)["key_versions"]["S"])


def test_the_stored_row_holds_no_secret_in_the_clear_and_the_registry_reads_it_back(stack, uid):
    secret = f"wJalrXUtnFEMI/K7MDENG/{uid}"
    r = _registry(stack)
    r.accept(uid, "paid", _sender("AKIA1", secret), lambda _s: ACCOUNT)
    r.accept(uid, "paid", _sender("AKIA2", f"{secret}-2"), lambda _s: ACCOUNT)  # a rotation: a second version
    raw = _raw(stack, uid)
    assert secret not in json.dumps(raw)  # nowhere in the item, in no attribute
    assert "api_secret" not in raw
    assert [sorted(v) for v in _sealed_versions(stack, uid)] == [["account", "apiKey", "sealedSecret", "version"]] * 2
    # Another container (nothing cached) decrypts it, for this tenant.
    tenant = _registry(stack).get(uid, fresh=True)
    assert tenant.sender.api_secret is None  # the registry hands out no secret with the settings
    assert _registry(stack).secret_of(uid, tenant.sending_keys(1)) == f"{secret}-2"  # the account's newest
    assert _registry(stack).secret_of(uid, tenant.keys[0]) == secret


def test_a_ciphertext_copied_into_another_tenants_row_does_not_decrypt_there(stack, uid):
    victim, thief = f"victim-{uid}", f"thief-{uid}"
    r = _registry(stack)
    r.accept(victim, "paid", _sender("AKIAV", "victim-secret"), lambda _s: ACCOUNT)
    r.accept(thief, "paid", _sender("AKIAT", "thief-secret"), lambda _s: ACCOUNT)
    stolen = _raw(stack, victim)["key_versions"]
    stack.client("dynamodb").update_item(
        TableName=stack.settings.resources.tenants_table.name,
        Key={"user_id": {"S": thief}},
        UpdateExpression="SET key_versions = :k",
        ExpressionAttributeValues={":k": stolen},
    )
    fresh = _registry(stack)
    keys = fresh.get(thief, fresh=True).current_keys
    assert keys.api_key == "AKIAV"  # the row now names the victim's keys...
    with pytest.raises(SecretUnreadable, match=f"tenant {thief}: KMS does not decrypt"):
        fresh.secret_of(thief, keys)  # ...whose secret KMS decrypts for the victim alone
    assert fresh.secret_of(victim, keys) == "victim-secret"


def _legacy_row(stack, user, secret):
    """A row as the release before encryption wrote it: the secret in the clear, in both places."""
    versions = [{"version": 1, "apiKey": "AKIAOLD", "apiSecret": secret, "account": ACCOUNT}]
    item = {
        "user_id": {"S": user},
        "plan": {"S": "paid"},
        "email_address": {"S": "news@a.example"},
        "from_name": {"S": "News"},
        "region": {"S": "us-east-1"},
        "rate_per_second": {"N": "5"},
        "version": {"N": "1"},
        "key_versions": {"S": json.dumps(versions)},
        "api_key": {"S": "AKIAOLD"},
        "api_secret": {"S": secret},
        "ses_account_id": {"S": ACCOUNT},
    }
    stack.client("dynamodb").put_item(TableName=stack.settings.resources.tenants_table.name, Item=item)


def test_a_row_from_before_encryption_is_read_and_sealed_by_its_next_write(stack, uid):
    _legacy_row(stack, uid, "old-secret")
    r = _registry(stack)
    tenant = r.get(uid, fresh=True)
    assert r.secret_of(uid, tenant.current_keys) == "old-secret"  # read as it is: its email still goes out
    # The tenant's next message, with the same keys: nothing else changed, but the row is written, sealed.
    assert r.accept(uid, "paid", _sender("AKIAOLD", "old-secret"), lambda _s: ACCOUNT).version == 1
    raw = _raw(stack, uid)
    assert "old-secret" not in json.dumps(raw) and "api_secret" not in raw
    assert _registry(stack).secret_of(uid, _registry(stack).get(uid, fresh=True).current_keys) == "old-secret"


def test_moonsend_seal_keys_seals_every_row_still_in_the_clear_once(stack, uid, capsys):
    users = [f"old{i}-{uid}" for i in range(3)]
    for u in users:
        _legacy_row(stack, u, f"clear-{u}")
    assert moonsend(["seal-keys", "--endpoint", stack.endpoint, "--stage", "local"]) == 0
    assert "3 tenant(s) had SES secrets stored in the clear" in capsys.readouterr().out
    for u in users:
        assert f"clear-{u}" not in json.dumps(_raw(stack, u))
        assert _registry(stack).secret_of(u, _registry(stack).get(u, fresh=True).current_keys) == f"clear-{u}"
    assert moonsend(["seal-keys", "--endpoint", stack.endpoint, "--stage", "local"]) == 0
    assert "0 tenant(s)" in capsys.readouterr().out


def _decrypt_as(stack, handler, user, sealed):
    with as_function(stack, handler):
        return _secrets(stack).open(user, sealed)  # a new container's: nothing cached


def test_only_the_functions_that_send_or_check_keys_may_decrypt_a_tenants_secret(stack, uid):
    r = _registry(stack)
    r.accept(uid, "paid", _sender("AKIAX", "the-secret"), lambda _s: ACCOUNT)
    sealed = r.get(uid, fresh=True).current_keys.sealed
    assert _decrypt_as(stack, "send_emails", uid, sealed) == "the-secret"
    assert _decrypt_as(stack, "precompile_email", uid, sealed) == "the-secret"
    for handler in ("retire_idle_queues", "release_scheduled", "ses_events", "run_digest"):
        fn = stack.settings.resources.function_name(handler)
        with pytest.raises(ClientError) as refused:
            _decrypt_as(stack, handler, uid, sealed)
        assert refused.value.response["Error"]["Code"] == "AccessDeniedException", handler
        assert "is not authorized to perform: kms:Decrypt on resource: arn:aws:kms:" in str(refused.value)
        mine = [d for d in stack.access.denied if d[:2] == (fn, "kms:Decrypt")]
        assert mine, f"{handler} was not refused kms:Decrypt"
        for d in mine:  # deliberate: the session's end checks that nothing else was refused
            stack.access.denied.remove(d)


def test_sending_decrypts_a_tenants_secret_once_per_container_not_per_email(stack, uid):
    sender = _tenant(stack, uid, rate=10, ses_rate=20)
    user, r = f"tenant-{uid}", stack.settings.resources
    calls = stack.access.allowed_calls
    before = {
        k: calls[f"{r.function_name(f)} kms:{k}"]
        for f, k in (("send_emails", "Decrypt"), ("precompile_email", "Encrypt"))
    }
    spec = CampaignSpec(user, sender, "Hi", "<p>Hi</p>", "sealed")
    publish(
        stack.client("sns"),
        stack.topic_arns[r.precompile_topic.name],
        list(messages(spec, [{"email": f"r{i}@example.org"} for i in range(12)])),
    )
    assert stack.wait_until_drained(60)
    assert (
        len([s for s in read_sends(stack.config.outbox) if s.get("campaignId") == "sealed" and s.get("userId") == user])
        == 12
    )
    assert calls[f"{r.function_name('send_emails')} kms:Decrypt"] - before["Decrypt"] == 1
    assert calls[f"{r.function_name('precompile_email')} kms:Encrypt"] - before["Encrypt"] == 1  # registered once


def test_the_functions_roles_use_the_key_only_with_the_tenant_alone_in_the_encryption_context(stack, uid):
    # The roles' condition once asked only that a tenant be named: a call adding any other context key
    # (another tenant's id under another name, say) was allowed too (docs/operations.md, "Who can read").
    s = stack.settings
    alias, extra = s.resources.tenant_secrets_alias, {"moonsend:tenant": uid, "moonsend:also": f"other-{uid}"}
    blob = stack.client("kms").encrypt(KeyId=alias, Plaintext=b"s", EncryptionContext=extra)["CiphertextBlob"]
    for handler, call in (
        ("send_emails", lambda kms: kms.decrypt(CiphertextBlob=blob, EncryptionContext=extra)),
        ("precompile_email", lambda kms: kms.decrypt(CiphertextBlob=blob, EncryptionContext=extra)),
        ("precompile_email", lambda kms: kms.encrypt(KeyId=alias, Plaintext=b"s", EncryptionContext=extra)),
    ):
        fn = s.resources.function_name(handler)
        with as_function(stack, handler), pytest.raises(ClientError) as refused:
            call(aws.client("kms", s.region))  # the functions' client, signed as the role
        assert refused.value.response["Error"]["Code"] == "AccessDeniedException", handler
        mine = [d for d in stack.access.denied if d[0] == fn and d[1].startswith("kms:")]
        assert mine, f"{handler} was not refused"
        for d in mine:  # deliberate: the session's end checks that nothing else was refused
            stack.access.denied.remove(d)
    # The tenant alone, as the app calls it: allowed.
    r = _registry(stack)
    r.accept(uid, "paid", _sender("AKIAX", "the-secret"), lambda _s: ACCOUNT)
    assert _decrypt_as(stack, "send_emails", uid, r.get(uid, fresh=True).current_keys.sealed) == "the-secret"
