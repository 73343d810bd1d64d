"""Unsubscribe: signed links, RFC 8058 headers, the page and one-click, end to end through the local API."""

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from email import message_from_bytes
from email.policy import default

import pytest

from chalicelib.core.errors import LinkInvalid
from chalicelib.core.links import (
    LEGACY_KID,
    REFRESH_S,
    RETIRE_AFTER_S,
    UNKNOWN_KID_REREAD_S,
    LinkKeys,
    LinkSigner,
)
from chalicelib.core.mime import OutgoingEmail, build_mime
from chalicelib.stores.recorder import Recorder

SIGNER = LinkSigner(b"k" * 32, "https://api.example.com/api")


def test_a_link_verifies_to_what_it_was_made_for():
    token = SIGNER.token("unsubscribe", "acme", "spring", "Ann@x.io", 60)
    claims = SIGNER.verify("unsubscribe", token)
    assert (claims.user_id, claims.campaign_id, claims.email) == ("acme", "spring", "Ann@x.io")


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-2] + ("AA" if t[-2:] != "AA" else "BB"),  # altered signature
        lambda t: _swap_payload(t, {"u": "other-tenant"}),  # altered tenant, signature kept
        lambda t: LinkSigner(b"x" * 32, "https://api.example.com").token("unsubscribe", "acme", "c", "a@x.io", 60),
        lambda t: "not-a-token",
        lambda t: t + ".extra",
    ],
)
def test_a_forged_or_altered_link_is_refused(tamper):
    token = SIGNER.token("unsubscribe", "acme", "spring", "ann@x.io", 60)
    with pytest.raises(LinkInvalid):
        SIGNER.verify("unsubscribe", tamper(token))


def _swap_payload(token, changes):
    import base64

    payload, sig = token.split(".")
    d = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    d.update(changes)
    new = base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
    return f"{new}.{sig}"


def test_an_expired_link_and_a_link_for_another_purpose_are_refused():
    token = SIGNER.token("unsubscribe", "acme", "spring", "ann@x.io", 60, now=time.time() - 120)
    with pytest.raises(LinkInvalid):
        SIGNER.verify("unsubscribe", token)
    with pytest.raises(LinkInvalid):
        SIGNER.verify("click", SIGNER.token("unsubscribe", "acme", "spring", "ann@x.io", 60))


def test_every_campaign_email_carries_rfc_8058_one_click_headers():
    url = SIGNER.unsubscribe_url("acme", "spring", "ann@x.io")
    raw = build_mime(OutgoingEmail("news@acme.io", "Acme", "ann@x.io", "Hi", "<p>Hi</p>", "acme", "spring", url))
    msg = message_from_bytes(raw, policy=default)
    assert msg["List-Unsubscribe"] == f"<{url}>"
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert url.startswith("https://api.example.com/api/unsubscribe/")


# --- key ids and rotation: links outlive the key that signed them ---------------------------------------

OLD_SECRET = "0123456789abcdef" * 4  # a stage's secret as it always was: one plain string
NOW = 1_800_000_000.0


def _pre_kid_token(secret: str, purpose: str, claims: dict) -> str:
    """A token as moonsend signed them before key ids (`<payload>.<signature>`), made here by hand."""
    import base64
    import hashlib
    import hmac

    def b64(b):
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

    payload = b64(json.dumps(claims, separators=(",", ":")).encode())
    sig = hmac.new(secret.encode(), f"{purpose}.{payload}".encode(), hashlib.sha256).digest()[:16]
    return f"{payload}.{b64(sig)}"


def test_the_secret_is_a_plain_string_of_old_or_a_key_document():
    old = LinkKeys.parse(OLD_SECRET + " ")
    assert (old.current, [k.kid for k in old.keys]) == (LEGACY_KID, [LEGACY_KID])
    assert old.get("k0").secret == OLD_SECRET + " "  # as it is: its bytes were always the key
    doc = LinkKeys.parse(
        json.dumps(
            {
                "current": "k1",
                "keys": {"k0": {"key": OLD_SECRET, "retired": 1700000000}, "k1": {"key": "b" * 64, "created": 17e8}},
            }
        )
    )
    assert doc.current == "k1" and doc.get("k0").retired == 1700000000 and doc.get("k1").created == 1700000000
    assert LinkKeys.parse(doc.dumps()) == doc
    by_hand = LinkKeys.parse(json.dumps({"current": "k1", "keys": {"k0": OLD_SECRET, "k1": "c" * 32}}))
    assert by_hand.get("k1").secret == "c" * 32 and by_hand.get("k1").created is None
    assert "0123456789abcdef" not in repr(doc)  # a key's value is never in a repr (nor in a log line)


@pytest.mark.parametrize(
    "value",
    [
        '{"current": "k1", "keys": {"k0": "' + OLD_SECRET + '"}}',  # the current key is not listed
        '{"current": "k0", "keys": {"k0": "short"}}',
        '{"current": "k0", "keys": {"k0": {"secret": "' + OLD_SECRET + '"}}}',
        '{"current": "k0", "keys": {"k 0": "' + OLD_SECRET + '"}}',
        '{"current": "k0", "keys": ["' + OLD_SECRET + '"]}',
        '{"current": "k0", "keys": {"k0": "' + OLD_SECRET + '"}',  # not JSON
        "too short",
    ],
)
def test_a_secret_that_is_no_key_document_is_refused_without_quoting_it(value):
    with pytest.raises(ValueError) as refused:
        LinkKeys.parse(value)
    assert OLD_SECRET not in str(refused.value) and "short" not in str(refused.value).replace("shorter", "")


def test_a_link_signed_under_an_old_key_verifies_after_each_rotation():
    keys = LinkKeys.parse(OLD_SECRET)
    before = LinkSigner(keys, "https://links.example.com").token("unsubscribe", "acme", "spring", "ann@x.io", 60)
    assert before.count(".") == 1  # k0 signs as before key ids: a stage never rotated sends what old code reads
    once = keys.rotated(NOW)
    assert once.current == "k1" and once.get("k0").retired == NOW and once.get("k1").created == NOW
    after_one = LinkSigner(once, "https://links.example.com").token("unsubscribe", "acme", "spring", "bob@x.io", 60)
    assert after_one.startswith("k1.")
    twice = once.rotated(NOW + 60)
    signer = LinkSigner(twice, "https://links.example.com")
    assert signer.token("unsubscribe", "acme", "spring", "cy@x.io", 60).startswith("k2.")
    assert [signer.verify("unsubscribe", t).email for t in (before, after_one)] == ["ann@x.io", "bob@x.io"]
    assert len({k.secret for k in twice.keys}) == 3  # each rotation a new random key


def test_a_token_from_before_key_ids_verifies_with_k0_whatever_key_is_current():
    claims = {"u": "acme", "c": "spring", "e": "ann@x.io", "x": int(time.time()) + 3600}
    token = _pre_kid_token(OLD_SECRET, "unsubscribe", claims)
    for keys in (LinkKeys.parse(OLD_SECRET), LinkKeys.parse(OLD_SECRET).rotated(NOW)):
        assert LinkSigner(keys, "https://x").verify("unsubscribe", token).email == "ann@x.io"
    assert LinkSigner(OLD_SECRET.encode(), "https://x").verify("unsubscribe", token).user_id == "acme"


def test_a_token_naming_an_unknown_or_dropped_key_fails_like_any_bad_token():
    from chalicelib.feedback.unsubscribe import NOT_FOUND, Unsubscribes
    from tests.fakes import FakeLedger, FakeStats, FakeSuppressions

    rotated = LinkKeys.parse(OLD_SECRET).rotated(NOW)
    k1_token = LinkSigner(rotated, "https://x").token("unsubscribe", "acme", "spring", "ann@x.io", 60)
    payload_sig = k1_token.split(".", 1)[1]
    dropped = LinkSigner(LinkKeys.parse(OLD_SECRET), "https://x")  # a signer that has no k1
    for token in (k1_token, f"k9.{payload_sig}", f"k0.{payload_sig}", f"{'k' * 17}.{payload_sig}"):
        with pytest.raises(LinkInvalid):
            dropped.verify("unsubscribe", token)
        page = Unsubscribes(dropped, FakeSuppressions(), Recorder(FakeLedger(), FakeStats())).unsubscribe(token)
        assert page == NOT_FOUND  # the same page as a forged token: nothing said about keys


def _store(keys):
    """A secret that an operator rotates, and the signer's reads of it."""
    store = {"value": keys.dumps(), "reads": 0}

    def read():
        store["reads"] += 1
        return LinkKeys.parse(store["value"])

    return store, read


def test_a_freshly_rotated_key_verifies_at_once_and_signs_within_the_refresh():
    keys = LinkKeys.parse(OLD_SECRET)
    store, read = _store(keys)
    clock = [1000.0]
    signer = LinkSigner(read(), "https://x", reread=read, clock=lambda: clock[0])
    rotated = keys.rotated(NOW)
    store["value"] = rotated.dumps()  # `moonsend link-key rotate`, in another container's eyes
    fresh = LinkSigner(rotated, "https://x").token("unsubscribe", "acme", "spring", "ann@x.io", 60)
    assert signer.token("unsubscribe", "acme", "spring", "bob@x.io", 60).count(".") == 1  # still k0 here
    assert signer.verify("unsubscribe", fresh).email == "ann@x.io"  # unknown k1: read again at once
    assert store["reads"] == 2 and signer.current_kid == "k1"

    # Unknown ids read again at most every few seconds, whatever a prober sends.
    for kid in ("k7", "k8", "k9"):
        with pytest.raises(LinkInvalid):
            signer.verify("unsubscribe", f"{kid}.{fresh.split('.', 1)[1]}")
    assert store["reads"] == 2
    clock[0] += UNKNOWN_KID_REREAD_S
    for kid in ("k7", "k8"):
        with pytest.raises(LinkInvalid):
            signer.verify("unsubscribe", f"{kid}.{fresh.split('.', 1)[1]}")
    assert store["reads"] == 3


def test_the_keys_are_read_again_every_few_minutes_and_a_failed_read_keeps_them():
    keys = LinkKeys.parse(OLD_SECRET)
    store, read = _store(keys)
    clock = [0.0]
    signer = LinkSigner(read(), "https://x", reread=read, clock=lambda: clock[0])
    store["value"] = keys.rotated(NOW).dumps()
    clock[0] += REFRESH_S - 1
    assert signer.token("open", "acme", "spring", "ann@x.io", 60).count(".") == 1 and store["reads"] == 1
    clock[0] += 1
    assert signer.token("open", "acme", "spring", "ann@x.io", 60).startswith("k1.") and store["reads"] == 2

    def broken():
        raise ConnectionError("secrets manager unreachable")

    held = LinkSigner(keys.rotated(NOW), "https://x", reread=broken, clock=lambda: clock[0])
    clock[0] += REFRESH_S
    assert held.token("open", "acme", "spring", "ann@x.io", 60).startswith("k1.")  # signs on with what it has


def test_a_key_may_be_retired_only_once_every_link_it_signed_has_expired():
    once = LinkKeys.parse(OLD_SECRET).rotated(NOW)
    assert "current" in once.retire_refusal("k1", NOW)
    assert "no key" in once.retire_refusal("k5", NOW)
    assert "live until" in once.retire_refusal("k0", NOW + RETIRE_AFTER_S - 1)
    assert once.retire_refusal("k0", NOW + RETIRE_AFTER_S) is None
    assert [k.kid for k in once.without("k0").keys] == ["k1"]
    assert RETIRE_AFTER_S > 400 * 86400  # the unsubscribe link's lifetime, and its expiry's rounding up
    with pytest.raises(ValueError):
        once.without("k1")


class FakeSecrets:
    """Secrets Manager's two calls the command makes."""

    def __init__(self, value):
        self.value, self.puts = value, 0

    def get_secret_value(self, SecretId):
        return {"SecretString": self.value}

    def put_secret_value(self, SecretId, SecretString):
        self.value, self.puts = SecretString, self.puts + 1


def test_link_key_list_rotate_and_retire_never_print_a_key(tmp_path, capsys):
    from infra.cli import _link_key
    from infra.local.stack import _link_secret

    def run(action, kid=None, force=False, now=NOW):
        code = _link_key(sm, "moonsend-local/link-signing-key", action, kid, force, tmp_path, now)
        out = capsys.readouterr()
        for k in LinkKeys.parse(sm.value).keys:
            assert k.secret not in out.out + out.err
        assert OLD_SECRET not in out.out + out.err
        return code, out.out, out.err

    (tmp_path / ".link-secret").write_text(OLD_SECRET + "\n")  # the local stack's key, as older stacks kept it
    sm = FakeSecrets(_link_secret(tmp_path))
    code, out, _ = run("list")
    assert code == 0 and out.startswith("k0\t") and "current" in out
    code, out, _ = run("rotate")
    assert code == 0 and "k1 is now the current key" in out and sm.puts == 1
    kept = LinkKeys.parse(_link_secret(tmp_path))  # kept beside the outbox, for the stack's next start
    assert kept == LinkKeys.parse(sm.value) and kept.current == "k1" and kept.get("k0").secret == OLD_SECRET
    assert (tmp_path / ".link-secret").stat().st_mode & 0o077 == 0
    code, out, _ = run("list")
    assert "k0\t" in out and "k1\t" in out and "may be retired from" in out

    assert run("retire", "k0")[0] == 1 and run("retire", "k1", force=True)[0] == 1 and sm.puts == 1
    code, _, err = run("retire", "k0")
    assert "--force" in err
    assert run("retire", "k0", now=NOW + RETIRE_AFTER_S)[0] == 0
    assert [k.kid for k in LinkKeys.parse(sm.value).keys] == ["k1"]

    sm.value = LinkKeys.parse(sm.value).rotated(NOW + 1).dumps()  # the file no longer holds this secret's keys
    code, _, err = run("retire", "k1", force=True)
    assert code == 0 and "does not hold this stack's key" in err
    assert LinkKeys.parse(_link_secret(tmp_path)).current == "k1"  # another stack's file left alone


# --- end to end: a campaign through the local stack, its link opened and posted ----------------------


def _http(url, data=None, method=None):
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.e2e
def test_one_click_unsubscribes_and_the_tenants_next_campaign_skips_the_address(stack, uid):
    from chalicelib import wiring
    from infra.producer import CampaignSpec, messages, publish
    from tests.conftest import read_sends
    from tests.e2e.test_pipeline_e2e import _tenant

    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    body = '<p>Hi</p><p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'
    for campaign in ("news-1",):
        publish(
            stack.client("sns"),
            stack.topic_arns["moonsend-local-PrecompileEmail"],
            messages(CampaignSpec(user, sender, "News", body, campaign), [{"email": "ann@example.org"}]),
        )
    assert stack.wait_until_drained(60)
    (eml,) = (stack.config.outbox / user / "news-1").glob("*.eml")
    msg = message_from_bytes(eml.read_bytes(), policy=default)
    header_url = str(msg["List-Unsubscribe"]).strip("<>")
    assert header_url.startswith(f"{stack.api_url}/unsubscribe/")
    html = msg.get_body(("html",)).get_content()
    body_url = html.split('href="', 1)[1].split('"', 1)[0]
    signer = wiring.container().links
    same = [signer.verify("unsubscribe", u.rsplit("/", 1)[1]) for u in (header_url, body_url)]
    assert [(x.user_id, x.campaign_id, x.email) for x in same] == [(user, "news-1", "ann@example.org")] * 2

    status, page = _http(header_url)  # what a person sees: a confirmation page, nothing done yet
    assert status == 200 and "ann@example.org" in page and "<form" in page and "<script" not in page
    assert wiring.container().suppressions.check(user, ["ann@example.org"]) == {}

    status, page = _http(header_url, data=b"List-Unsubscribe=One-Click", method="POST")  # RFC 8058
    assert status == 200 and "no more" in page
    assert "unsubscribe" in wiring.container().suppressions.check(user, ["ann@example.org"])["ann@example.org"]
    assert wiring.container().stats.get(user, "news-1")["unsubscribed"] == 1

    forged = header_url[:-3] + ("abc" if not header_url.endswith("abc") else "xyz")
    status, page = _http(forged, data=b"List-Unsubscribe=One-Click", method="POST")
    assert status == 404 and "ann@example.org" not in page and "signature" not in page

    before = len(read_sends(stack.config.outbox))
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(CampaignSpec(user, sender, "News", body, "news-2"), [{"email": "ann@example.org"}]),
    )
    assert stack.wait_until_drained(60)
    assert [s for s in read_sends(stack.config.outbox)[before:] if s["userId"] == user] == []
    entry = wiring.container().ledger.get(user, "news-2", "ann@example.org")
    assert entry.state == "suppressed" and "unsubscribe" in entry.reason


def _send_one(stack, user, sender, campaign, email):
    from infra.producer import CampaignSpec, messages, publish

    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(CampaignSpec(user, sender, "News", "<p>Hi</p>", campaign), [{"email": email}]),
    )
    assert stack.wait_until_drained(60)
    (eml,) = (stack.config.outbox / user / campaign).glob("*.eml")
    return str(message_from_bytes(eml.read_bytes(), policy=default)["List-Unsubscribe"]).strip("<>")


def _link_key_command(stack, *args):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    where = ["--stage", "local", "--endpoint", stack.endpoint, "--outbox", str(stack.config.outbox)]
    return subprocess.run(
        [sys.executable, "-m", "infra", "link-key", *args, *where], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.mark.e2e
def test_links_sent_before_a_rotation_still_unsubscribe_and_the_new_key_works_at_once(stack, uid):
    from chalicelib import wiring
    from infra.local.stack import _link_secret
    from tests.e2e.test_pipeline_e2e import _tenant

    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    before_url = _send_one(stack, user, sender, "before", "ann@example.org")
    name = wiring.container().settings.resources.link_secret_name
    secrets = stack.client("secretsmanager")
    before = LinkKeys.parse(secrets.get_secret_value(SecretId=name)["SecretString"])

    rotate = _link_key_command(stack, "rotate")
    listed = _link_key_command(stack, "list")
    assert rotate.returncode == 0 and listed.returncode == 0, rotate.stderr + listed.stderr
    after = LinkKeys.parse(secrets.get_secret_value(SecretId=name)["SecretString"])
    assert after.current != before.current and {k.kid for k in before.keys} < {k.kid for k in after.keys}
    said = rotate.stdout + rotate.stderr + listed.stdout + listed.stderr
    assert not [k.kid for k in after.keys if k.secret in said]  # ids and ages, never a key
    assert all(f"{k.kid}\t" in listed.stdout for k in after.keys)
    assert LinkKeys.parse(_link_secret(stack.config.outbox)) == after  # the stack's next start makes it again

    # A link signed with the new key, by a container that has read it, works at once on the API, which has
    # not read it yet.
    fresh_url = LinkSigner(after, stack.api_url).unsubscribe_url(user, "before", "bob@example.org")
    assert _http(fresh_url, data=b"List-Unsubscribe=One-Click", method="POST")[0] == 200
    # Every container reads the keys again within minutes; here they are made anew: the next email's link
    # names the new key, and the link sent before the rotation still unsubscribes.
    wiring.reset()
    after_url = _send_one(stack, user, sender, "after", "cy@example.org")
    assert after_url.rsplit("/", 1)[1].startswith(f"{after.current}.")
    for url in (before_url, after_url):
        assert _http(url, data=b"List-Unsubscribe=One-Click", method="POST")[0] == 200
    suppressed = wiring.container().suppressions.check(user, ["ann@example.org", "bob@example.org", "cy@example.org"])
    assert sorted(suppressed) == ["ann@example.org", "bob@example.org", "cy@example.org"]
    refused = _link_key_command(stack, "retire", "--kid", before.current)  # its links live 400 days more
    assert refused.returncode == 1 and "--force" in refused.stderr
