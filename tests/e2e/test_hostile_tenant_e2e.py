"""One tenant's data at and past AWS's limits, on the stack that enforces them, holds up no other tenant.

The hostile tenant's campaign carries what the local stack now refuses as AWS does (issue 37): addresses
too long to be a DynamoDB key (in bytes and in characters), code points SQS refuses in its subject and in
its recipients' data, metadata at the size a key may not have, and a strict template whose rejection
reason quotes U+FFFF. While it goes through, another tenant's campaign is sent, its SES events recorded and
its webhooks delivered, as if nothing happened; and every recipient of both ends in a recorded state.
"""

from __future__ import annotations

import json

import pytest

from chalicelib import wiring
from infra.producer import CampaignSpec, messages, publish
from infra.webhook_receiver import WebhookReceiver as Receiver
from tests.conftest import eventually, read_sends
from tests.e2e.test_webhooks_e2e import _add, _sender, _simulated, _simulator

pytestmark = pytest.mark.e2e


def _hostile_recipients(uid: str) -> tuple[list[dict[str, object]], list[str], list[str]]:
    """(recipients, the addresses that must be sent, the addresses that must be rejected)."""
    ok = [f"success+h{i}{uid}@simulator.amazonses.com" for i in range(3)]
    too_long = ["a" * 1090 + "@x.example", "é" * 600 + "@example.org", "a" * 64 + "@" + "b" * 250 + ".example"]
    recipients: list[dict[str, object]] = [
        {"email": ok[0], "metadata": {"name": "\uffff\x01" + "€" * 700}},  # SQS-refused code points, 2 KB
        {"email": ok[1], "metadata": {"name": "a" * 2049}},  # longer than any key may be: data, not a key
        {"email": ok[2], "metadata": {"name": "Ann"}},
        *({"email": address, "metadata": {"name": "X"}} for address in too_long),
    ]
    return recipients, ok, too_long


def test_a_tenants_data_at_and_past_aws_limits_holds_up_no_other_tenant(stack, uid):
    hostile, bystander = f"hostile-{uid}", f"bystander-{uid}"
    hostile_sender, _ = _sender(stack, hostile)
    bystander_sender, bystander_key = _sender(stack, bystander)
    receiver = Receiver()
    receiver.secret = _add(stack, bystander_key, receiver.url)["secret"]
    topic = stack.topic_arns["moonsend-local-PrecompileEmail"]
    sns = stack.client("sns")
    try:
        recipients, ok, too_long = _hostile_recipients(uid)
        loose = CampaignSpec(
            hostile, hostile_sender, "Hi \uffff{{ name | truncate: 20 }}", "<p>{{ name }}</p>", "loose"
        )
        strict = CampaignSpec(
            hostile, hostile_sender, "Hi", '<p>{{ x["\uffff"] }}</p>', "strict", options={"strict": True}
        )
        # As any SDK writes JSON (ASCII, escapes), so the messages reach SNS as producers send them.
        bodies = [json.dumps(json.loads(m)) for m in messages(loose, recipients)]
        bodies += [json.dumps(json.loads(m)) for m in messages(strict, [{"email": ok[0], "metadata": {"x": {}}}])]
        publish(sns, topic, bodies)
        bounce, complaint, success = _simulator(f"by{uid}")
        spec = CampaignSpec(bystander, bystander_sender, "Hello", "<p>Hello</p>", "calm")
        publish(sns, topic, messages(spec, [{"email": a} for a in (bounce, complaint, success)]))

        # The bystander: sent, its SES events recorded, every webhook event delivered once.
        assert eventually(lambda: receiver.events("calm") == _simulated(bounce, complaint, success), 90), (
            receiver.events()
        )
        c = wiring.container()
        assert {e.state for e in c.ledger.entries(bystander, "calm")} == {"sent"}

        # The hostile tenant: its valid recipients sent, the rest recorded rejected with a reason; none lost.
        assert eventually(
            lambda: (
                sorted(s["to"] for s in read_sends(stack.config.outbox) if s.get("campaignId") == "loose") == sorted(ok)
            ),
            60,
        )
        assert stack.wait_until_drained(60)
        loose_entries = {e.email: e for e in c.ledger.entries(hostile, "loose")}
        assert {a: loose_entries[a].state for a in ok} == dict.fromkeys(ok, "sent")
        rejected = [e for e in loose_entries.values() if e.state == "rejected"]
        assert len(rejected) == len(too_long) and all("not an email address" in (e.reason or "") for e in rejected)
        (strict_entry,) = c.ledger.entries(hostile, "strict")
        assert strict_entry.state == "rejected" and "is undefined" in (strict_entry.reason or "")
        # Nothing of it ended in the on-failure queue: no invocation failed for good.
        assert [f for f in stack.runner.stats.failed_events if hostile in json.dumps(f.event)] == []
    finally:
        receiver.close()
