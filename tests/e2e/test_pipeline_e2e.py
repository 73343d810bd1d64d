"""End to end through the local stack over HTTP on loopback: SNS in, emails in the outbox."""

import json
import time
from email import message_from_bytes
from email.policy import default

import pytest
from botocore.exceptions import ClientError

from chalicelib import wiring
from infra.producer import CampaignSpec, messages, publish
from tests.conftest import canonical, read_sends

pytestmark = pytest.mark.e2e


def _tenant(stack, uid, rate, ses_rate):
    key = f"AKIAE{uid}".upper()
    stack.ses.configure(key, max_send_rate=ses_rate)
    sender = {
        "region": "us-east-1",
        "apiKey": key,
        "apiSecret": f"secret-{uid}",
        "ratePerSecond": str(rate),
        "emailAddress": f"news@{uid}.example",
        "fromName": "News",
    }
    stack.client("sesv2", access_key=key, secret_key=sender["apiSecret"]).create_email_identity(
        EmailIdentity=sender["emailAddress"]
    )
    return sender


def test_campaign_is_rendered_queued_and_sent_once_per_recipient(stack, uid):
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    spec = CampaignSpec(user, sender, "Hi {{ name }}", "<p>Dear {{ name }} {{ surname }}</p>", "launch")
    recipients = [{"email": f"r{i}@example.org", "metadata": {"name": f"N{i}", "surname": "S"}} for i in range(25)] + [
        {"email": "broken"}
    ]
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, recipients, per_message=10),
    )
    assert stack.wait_until_drained(60)

    sends = [s for s in read_sends(stack.config.outbox) if s["userId"] == user]
    assert sorted(s["to"] for s in sends) == sorted(f"r{i}@example.org" for i in range(25))
    for eml in (stack.config.outbox / user / "launch").glob("*.eml"):
        msg = message_from_bytes(eml.read_bytes(), policy=default)
        n = msg["To"].split("@")[0][1:]
        assert msg["Subject"] == f"Hi N{n}"
        assert f"Dear N{n} S" in msg.get_body(("html",)).get_content()
        assert str(msg["From"]) == f"News <news@{uid}.example>"
    counts = wiring.container().stats.get(user, "launch")
    assert (counts["queued"], counts["sent"], counts["rejected"], counts["failed"]) == (25, 25, 1, 0)
    assert "recipients[5].email: not an email address" in (counts.last_error or "")


def test_the_rate_is_capped_by_the_ses_accounts_own_max_rate(stack, uid):
    sender = _tenant(stack, uid, rate=50, ses_rate=4)  # the tenant asks for more than SES allows
    user = f"tenant-{uid}"
    spec = CampaignSpec(user, sender, "s", "b", "c1")
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, [{"email": f"r{i}@example.org"} for i in range(10)]),
    )
    assert stack.wait_until_drained(60)
    counts = wiring.container().stats.get(user, "c1")
    assert counts["sent"] == 10
    ts = sorted(s["ts"] for s in read_sends(stack.config.outbox) if s["userId"] == user)
    from infra.status import max_in_window

    assert max_in_window(ts, 1000) <= 4


def test_bad_messages_on_the_topic_never_crash_the_handler(stack, uid):
    sns = stack.client("sns")
    topic = stack.topic_arns["moonsend-local-PrecompileEmail"]
    failed_before = len(stack.runner.stats.failed_events)
    for body in (
        "{not json",
        "[]",
        json.dumps(canonical(userId="../etc")),
        json.dumps(canonical(userId=f"u-{uid}", sender={"emailAddress": "x"})),
    ):
        sns.publish(TopicArn=topic, Message=body)
    assert stack.wait_until_drained(30)
    assert len(stack.runner.stats.failed_events) == failed_before
    counts = wiring.container().stats.get(f"u-{uid}", "camp-1")
    assert counts["rejected"] == 1 and "sender.ratePerSecond: is required" in counts.last_error


def test_an_email_larger_than_a_queue_message_travels_through_s3(stack, uid):
    sender = _tenant(stack, uid, rate=10, ses_rate=14)
    user = f"tenant-{uid}"
    body = "<p>Hello {{ name }}</p><p>{% for i in (1..30000) %}lorem ipsum {% endfor %}</p>"  # ~360 KB
    spec = CampaignSpec(user, sender, "Big", body, "big")
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, [{"email": "big@example.org", "metadata": {"name": "Ann"}}]),
    )
    assert stack.wait_until_drained(60)
    emls = list((stack.config.outbox / user / "big").glob("*.eml"))
    assert len(emls) == 1
    html = message_from_bytes(emls[0].read_bytes(), policy=default).get_body(("html",)).get_content()
    assert html.startswith("<p>Hello Ann</p>") and len(html) > 250_000
    s3 = stack.client("s3")
    left = s3.list_objects_v2(Bucket=stack.settings.resources.payload_bucket.name, Prefix=f"{user}/")
    assert left.get("KeyCount", 0) == 0  # deleted once sent


def test_every_kind_of_bad_input_is_recorded_with_its_reason_and_the_good_still_go_out(stack, uid):
    """The bad-input table of the precompile issue, through SNS, read back from the ledger and status."""
    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    big_body = "<p>" + "x" * (300 * 1024) + "</p>"

    def msg(campaign, **over):
        m = canonical(userId=user, sender=dict(sender), **over)
        m["campaign"] = {"id": campaign, "subject": "Hi {{ name }}", "body": "<p>Hi {{ name }}</p>"}
        m["recipient"] = {"email": f"{campaign}@example.org", "metadata": {"name": "Ann"}}
        return m

    no_subject = msg("no-subject")
    del no_subject["campaign"]["subject"]
    bad_rate = msg("bad-rate")
    bad_rate["sender"]["ratePerSecond"] = "fast"
    bad_address = msg("bad-address")
    bad_address["recipient"] = {"email": "not-an-address"}
    too_big = msg("too-big")
    too_big["campaign"]["body"] = big_body  # over the contract's limit, and over SNS's too
    mixed = msg("mixed")
    del mixed["recipient"]
    mixed["recipients"] = [
        {"email": "good1@example.org", "metadata": {"name": "A"}},
        {"email": "@nobody"},
        {"email": "good2@example.org", "metadata": "not an object"},
        {"email": "good3@example.org", "metadata": {"name": "C"}},
    ]
    bodies = [f"{{not json {uid}", *(json.dumps(m) for m in (no_subject, bad_rate, bad_address, mixed))]
    for hostile in (f"../{uid}", f"{uid}{'a' * 300}", f"tenänt-{uid}"):
        bodies.append(json.dumps(canonical(userId=hostile)))
    sns = stack.client("sns")
    with pytest.raises(ClientError, match="Message too long"):  # refused where it is sent
        sns.publish(TopicArn=stack.topic_arns["moonsend-local-PrecompileEmail"], Message=json.dumps(too_big))
    failed_before = len(stack.runner.stats.failed_events)
    for body in bodies:
        sns.publish(TopicArn=stack.topic_arns["moonsend-local-PrecompileEmail"], Message=body)
    assert stack.wait_until_drained(60)
    assert len(stack.runner.stats.failed_events) == failed_before  # no handler crashed

    ledger = wiring.container().ledger

    def reasons(campaign, user_id=user):
        return {e.email: (e.state, e.reason) for e in ledger.entries(user_id, campaign)}

    assert reasons("no-subject") == {"no-subject@example.org": ("rejected", "campaign.subject: is required")}
    assert reasons("bad-rate")["bad-rate@example.org"][1].startswith("sender.ratePerSecond:")
    assert reasons("bad-address") == {"not-an-address": ("rejected", "recipient.email: not an email address")}
    mixed_seen = reasons("mixed")
    assert mixed_seen["good1@example.org"][0] == mixed_seen["good3@example.org"][0] == "sent"
    assert mixed_seen["@nobody"] == ("rejected", "recipients[1].email: not an email address")
    assert mixed_seen["good2@example.org"] == ("rejected", "recipients[2].metadata: must be an object")
    sent_to = {s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user}
    assert sent_to == {"good1@example.org", "good3@example.org"}

    # No usable tenant id: recorded under `_unattributed` and the day, keyed by the message's digest,
    # with the reason and the ids that were given.
    from chalicelib.stores.ledger_model import UNATTRIBUTED, message_key
    from infra.status import snapshot

    day = time.strftime("%Y-%m-%d", time.gmtime())
    json_error, dotdot, long_id, non_ascii = (
        ledger.get(UNATTRIBUTED, day, message_key(b)) for b in (bodies[0], *bodies[-3:])
    )
    assert json_error.state == "rejected" and json_error.reason.startswith("message: not valid JSON")
    assert dotdot.reason.startswith("userId: may only hold") and f"'../{uid}'" in dotdot.reason
    assert long_id.reason.startswith("userId: longer than 128 characters") and uid in long_id.reason
    assert non_ascii.reason.startswith("userId: may only hold") and f"'tenänt-{uid}'" in non_ascii.reason
    rows = {(c.user_id, c.campaign_id): c for c in snapshot(stack.settings, stack.client("sqs")).campaigns}
    assert rows[(UNATTRIBUTED, day)]["rejected"] >= 4
    assert rows[(user, "mixed")]["rejected"] == 2 and rows[(user, "mixed")]["sent"] == 2
