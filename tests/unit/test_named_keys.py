"""A message moonsend publishes itself names the paid tenant's registered key version, with moonsend's proof,
instead of carrying keys (docs/contract.md): it is sent with that version's keys; without the proof, with
another tenant's, campaign's or version's, or naming a version the tenant does not have, every recipient is
rejected with why, and a producer's own messages work as before."""

from __future__ import annotations

import json

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.errors import MessageInvalid
from chalicelib.core.links import LinkSigner
from chalicelib.core.message_parser import parse_precompile_message
from tests.conftest import canonical
from tests.fakes import parts
from tests.fakes.sqs import FakeSqs
from tests.fakes.stats import FakeStats
from tests.fakes.tenants import FakeTenants


def _registered() -> tuple[object, FakeSqs, FakeTenants, FakeStats]:
    sqs, tenants, stats = FakeSqs(), FakeTenants(), FakeStats()
    p = parts.precompiler(Settings.from_env({"MOONSEND_STAGE": "test"}), sqs, tenants=tenants, stats=stats)
    assert p.handle(json.dumps(canonical())).queued == 1  # the tenant's own first message registers its keys
    return p, sqs, tenants, stats


def _named(version: int, proof: str, campaign: str = "camp-2", user: str = "user-1") -> str:
    msg = canonical(userId=user)
    sender = {k: v for k, v in msg["sender"].items() if k not in ("apiKey", "apiSecret")}
    msg["sender"] = {**sender, "keyVersion": version, "keyProof": proof}
    msg["campaign"] = {**msg["campaign"], "id": campaign}
    msg["recipient"] = {"email": "bob@example.org", "metadata": {"name": "Bob"}}
    return json.dumps(msg)


def test_a_message_with_moonsends_proof_is_sent_on_the_tenants_own_account_with_the_named_keys():
    p, sqs, tenants, _stats = _registered()
    proof = parts.links().sender_proof("user-1", "camp-2", 1)
    result = p.handle(_named(1, proof))
    assert result.queued == 1 and result.queue == "moonsend-test-t-user-1"
    body = json.loads(sqs.batches[-1][1][0]["MessageBody"])
    assert body["userPlan"] == "paid" and body["sender"]["keyVersion"] == 1
    assert "keyProof" not in body["sender"] and "apiKey" not in body["sender"]
    assert len(tenants.remembered) == 1  # nothing registered by it


@pytest.mark.parametrize(
    ("proof_for", "why"),
    [
        (None, "sender.keyProof: not moonsend's proof"),
        (("user-2", "camp-2", 1), "sender.keyProof: not moonsend's proof"),
        (("user-1", "camp-9", 1), "sender.keyProof: not moonsend's proof"),
        (("user-1", "camp-2", 2), "sender.keyProof: not moonsend's proof"),
        ("other-key", "sender.keyProof: not moonsend's proof"),
    ],
    ids=["forged", "another-tenant", "another-campaign", "another-version", "another-stage"],
)
def test_a_key_version_without_moonsends_proof_for_it_rejects_every_recipient(proof_for, why):
    p, sqs, _tenants, _stats = _registered()
    if proof_for is None:
        proof = "k1.eyJ1IjoidXNlci0xIn0.AAAAAAAAAAAAAAAAAAAAAA"
    elif proof_for == "other-key":
        proof = LinkSigner(b"another-stage-secret", "https://x.test").sender_proof("user-1", "camp-2", 1)
    else:
        proof = parts.links().sender_proof(*proof_for)
    before = len(sqs.batches)
    result = p.handle(_named(1, proof))
    assert result.queued == 0 and len(sqs.batches) == before
    assert [(r.email, r.reason[: len(why)]) for r in result.rejected] == [("bob@example.org", why)]


def test_a_key_version_the_tenant_does_not_have_is_refused_with_why():
    p, _sqs, _tenants, _stats = _registered()
    result = p.handle(_named(7, parts.links().sender_proof("user-1", "camp-2", 7)))
    assert result.queued == 0
    assert [r.reason for r in result.rejected] == ["sender.keyVersion: tenant user-1 has no key version 7 registered"]


@pytest.mark.parametrize(
    ("sender", "error"),
    [
        ({"keyVersion": 1, "keyProof": "p", "apiKey": "AK", "apiSecret": "s"}, "not both"),
        ({"keyVersion": True, "keyProof": "p"}, "sender.keyVersion: must be a positive whole number"),
        ({"keyVersion": 0, "keyProof": "p"}, "sender.keyVersion: must be a positive whole number"),
        ({"keyVersion": 1}, "sender.keyProof: is required with keyVersion"),
        ({"keyProof": "p"}, "sender.keyVersion: must be a positive whole number"),
    ],
)
def test_a_named_key_version_is_checked_as_the_contract_says(sender, error):
    msg = canonical()
    base = {k: v for k, v in msg["sender"].items() if k not in ("apiKey", "apiSecret")}
    msg["sender"] = {**base, **sender}
    with pytest.raises(MessageInvalid) as exc:
        parse_precompile_message(json.dumps(msg))
    assert error in str(exc.value)


def test_a_producers_message_without_keys_is_on_the_free_plan_as_before():
    msg = canonical()
    msg["sender"] = {k: v for k, v in msg["sender"].items() if k not in ("apiKey", "apiSecret")}
    request = parse_precompile_message(json.dumps(msg))
    assert request.plan == "free" and request.sender.key_version is None
