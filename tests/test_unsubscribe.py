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
from chalicelib.core.links import LinkSigner
from chalicelib.core.mime import OutgoingEmail, build_mime

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
    from tests.test_pipeline_e2e import _tenant

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
