"""Open and click tracking: links rewritten after rendering, signed redirects, no open redirect."""

import urllib.error
import urllib.request
from email import message_from_bytes
from email.policy import default

import pytest

from chalicelib.core.links import LinkSigner
from chalicelib.ingest.tracking import Tracking, add_tracking
from chalicelib.stores.recorder import Recorder
from tests.fakes import FakeLedger, FakeStats

LINKS = LinkSigner(b"t" * 32, "https://api.example.com/api")


def _track(body):
    return add_tracking(body, LINKS, "acme", "spring", "ann@x.io")


def test_http_links_are_rewritten_others_are_left_and_the_pixel_goes_before_body_end():
    unsub = LINKS.unsubscribe_url("acme", "spring", "ann@x.io")
    body = (
        '<html><body><a href="https://shop.example/p/42?a=1&amp;b=2">Buy</a> <a href="mailto:x@y.io">Mail</a> '
        f"<a href='#top'>Top</a> <a href=\"{unsub}\">Unsubscribe</a></body></html>"
    )
    out = _track(body)
    assert 'href="https://api.example.com/api/c/' in out and "shop.example" not in out.split("/c/")[0]
    assert 'href="mailto:x@y.io"' in out and "href='#top'" in out and f'href="{unsub}"' in out
    assert out.index('src="https://api.example.com/api/o/') < out.index("</body>")
    token = out.split("/c/", 1)[1].split('"', 1)[0]
    assert LINKS.verify("click", token).url == "https://shop.example/p/42?a=1&b=2"  # unescaped, as clicked


def test_a_click_redirects_only_to_the_url_its_token_was_signed_for_and_counts_once():
    ledger, stats = FakeLedger(), FakeStats()
    t = Tracking(LINKS, Recorder(ledger, stats))
    token = LINKS.click_url("acme", "spring", "ann@x.io", "https://shop.example/p/42").rsplit("/", 1)[1]
    assert t.clicked(token).location == "https://shop.example/p/42"
    assert t.clicked(token).status == 302 and stats.total("clicked") == 1  # unique clicks
    evil = LinkSigner(b"e" * 32, "x").click_url("acme", "spring", "ann@x.io", "https://evil.example").rsplit("/", 1)[1]
    assert t.clicked(evil).status == 404 and t.clicked(evil).location is None  # no open redirect
    assert t.clicked(token[:-4] + "AAAA").status == 404


def test_an_uppercase_scheme_is_tracked_and_its_click_redirects():
    out = _track('<a href="HTTPS://Shop.example/P">Buy</a>')
    token = out.split("/c/", 1)[1].split('"', 1)[0]
    r = Tracking(LINKS, Recorder(FakeLedger(), FakeStats())).clicked(token)
    assert (r.status, r.location) == (302, "HTTPS://Shop.example/P")


def test_a_url_that_cannot_be_a_location_header_is_left_untracked_and_never_redirected():
    body = '<a href="https://shop.example/a&#13;&#10;Set-Cookie: x=1">A</a> <a href="https://shop.example/b c">B</a>'
    assert _track(body).startswith(body)  # both links as they were, only the pixel added
    # A token signed for such a URL (by an older version) answers 404, never a broken header.
    token = LINKS.click_url("acme", "spring", "ann@x.io", "https://shop.example/\r\nSet-Cookie: x=1").rsplit("/", 1)[1]
    assert Tracking(LINKS, Recorder(FakeLedger(), FakeStats())).clicked(token).status == 404


def test_opens_are_unique_per_recipient_and_a_bad_pixel_records_nothing():
    ledger, stats = FakeLedger(), FakeStats()
    t = Tracking(LINKS, Recorder(ledger, stats))
    token = LINKS.open_url("acme", "spring", "ann@x.io").rsplit("/", 1)[1]
    assert t.opened(token) and t.opened(token)
    assert stats.total("opened") == 1
    assert not t.opened("forged.token")


def test_tracking_links_signed_under_a_rotated_key_redirect_and_a_dropped_key_is_a_404():
    from chalicelib.core.links import LinkKeys

    keys = LinkKeys.parse("t" * 32)
    old = LinkSigner(keys, "https://x").click_url("acme", "spring", "ann@x.io", "https://shop.example/a")
    rotated = keys.rotated(1_800_000_000)
    new = LinkSigner(rotated, "https://x").click_url("acme", "spring", "ann@x.io", "https://shop.example/b")
    assert new.rsplit("/", 1)[1].startswith(f"{rotated.current}.")
    t = Tracking(LinkSigner(rotated, "https://x"), Recorder(FakeLedger(), FakeStats()))
    assert [t.clicked(u.rsplit("/", 1)[1]).location for u in (old, new)] == [
        "https://shop.example/a",
        "https://shop.example/b",
    ]
    dropped = Tracking(LinkSigner(rotated.without("k0"), "https://x"), Recorder(FakeLedger(), FakeStats()))
    assert dropped.clicked(old.rsplit("/", 1)[1]) == t.clicked("forged.token")  # a 404, nothing more
    assert not dropped.opened(LinkSigner(keys, "https://x").open_url("acme", "s", "ann@x.io").rsplit("/", 1)[1])


def test_links_point_at_the_custom_domain_when_one_is_set():
    from chalicelib.core.config import Settings
    from chalicelib.wiring import Container

    api = "https://abc123.execute-api.us-east-1.amazonaws.com/api"
    env = {"MOONSEND_API_URL": api, "MOONSEND_LINK_SECRET": "s" * 32}
    assert Container(Settings.from_env(env)).links.base_url == env["MOONSEND_API_URL"]
    custom = Container(Settings.from_env({**env, "MOONSEND_LINK_BASE_URL": "https://links.acme-mail.com/"})).links
    assert custom.unsubscribe_url("acme", "spring", "ann@x.io").startswith("https://links.acme-mail.com/unsubscribe/")
    assert _track_with(custom).count("https://links.acme-mail.com/c/") == 1


def _track_with(links):
    return add_tracking('<a href="https://shop.example/p">Buy</a>', links, "acme", "spring", "ann@x.io")


@pytest.mark.e2e
def test_tracked_email_through_the_local_api_redirects_and_counts_and_tracking_false_leaves_links(stack, uid):
    from chalicelib import wiring
    from infra.producer import CampaignSpec, messages, publish
    from tests.e2e.test_pipeline_e2e import _tenant

    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    body = '<html><body><p>Hi</p><a href="https://shop.example/{{ name }}">Shop</a></body></html>'
    spec = CampaignSpec(user, sender, "Hi", body, "tracked")
    publish(
        stack.client("sns"),
        stack.topic_arns["moonsend-local-PrecompileEmail"],
        messages(spec, [{"email": "ann@example.org", "metadata": {"name": "ann"}}]),
    )
    assert stack.wait_until_drained(60)
    (eml,) = (stack.config.outbox / user / "tracked").glob("*.eml")
    html = message_from_bytes(eml.read_bytes(), policy=default).get_body(("html",)).get_content()
    click = html.split('href="', 1)[1].split('"', 1)[0]
    pixel = html.split('src="', 1)[1].split('"', 1)[0]
    assert click.startswith(f"{stack.api_url}/c/") and pixel.startswith(f"{stack.api_url}/o/")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(click, timeout=10)
    assert redirect.value.code == 302 and redirect.value.headers["Location"] == "https://shop.example/ann"
    as_a_mail_client = urllib.request.Request(pixel, headers={"Accept": "image/webp,image/apng,image/*,*/*;q=0.8"})
    with urllib.request.urlopen(as_a_mail_client, timeout=10) as resp:
        assert resp.headers["Content-Type"] == "image/gif" and resp.read().startswith(b"GIF89a")
    counts = wiring.container().stats.get(user, "tracked")
    assert (counts["clicked"], counts["opened"]) == (1, 1)

    msg = spec.__class__(user, sender, "Hi", body, "untracked")
    plain = next(messages(msg, [{"email": "bob@example.org", "metadata": {"name": "bob"}}]))
    import json

    d = json.loads(plain)
    d["campaign"]["tracking"] = False
    stack.client("sns").publish(TopicArn=stack.topic_arns["moonsend-local-PrecompileEmail"], Message=json.dumps(d))
    assert stack.wait_until_drained(60)
    (eml,) = (stack.config.outbox / user / "untracked").glob("*.eml")
    html = message_from_bytes(eml.read_bytes(), policy=default).get_body(("html",)).get_content()
    assert 'href="https://shop.example/bob"' in html and "/o/" not in html
