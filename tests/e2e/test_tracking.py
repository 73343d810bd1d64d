"""Open and click tracking: links rewritten after rendering, signed redirects, no open redirect."""

import time
import urllib.error
import urllib.request
from email import message_from_bytes
from email.policy import default

import pytest

from chalicelib.core.links import LinkSigner
from chalicelib.ingest.machines import Hit
from chalicelib.ingest.tracking import Tracking, add_tracking
from chalicelib.stores.ports.ledger import HitContext
from chalicelib.stores.recorder import Recorder
from tests.conftest import eventually
from tests.fakes import FakeLedger, FakeStats

LINKS = LinkSigner(b"t" * 32, "https://api.example.com/api")
# A person's browser (chalicelib.ingest.machines: a machine's hits are tested in tests/unit/test_machine_hits.py).
BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
PERSON = Hit("GET", {"user-agent": BROWSER}, 0)


def _tracking(links: LinkSigner) -> Tracking:
    ledger = FakeLedger()
    return Tracking(links, Recorder(ledger, FakeStats()), ledger)


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
    t = Tracking(LINKS, Recorder(ledger, stats), ledger)
    token = LINKS.click_url("acme", "spring", "ann@x.io", "https://shop.example/p/42").rsplit("/", 1)[1]
    assert t.clicked(token, PERSON).location == "https://shop.example/p/42"
    assert t.clicked(token, PERSON).status == 302 and stats.total("clicked") == 1  # unique clicks
    evil = LinkSigner(b"e" * 32, "x").click_url("acme", "spring", "ann@x.io", "https://evil.example").rsplit("/", 1)[1]
    assert t.clicked(evil, PERSON).status == 404 and t.clicked(evil, PERSON).location is None  # no open redirect
    assert t.clicked(token[:-4] + "AAAA", PERSON).status == 404


def test_an_uppercase_scheme_is_tracked_and_its_click_redirects():
    out = _track('<a href="HTTPS://Shop.example/P">Buy</a>')
    token = out.split("/c/", 1)[1].split('"', 1)[0]
    r = _tracking(LINKS).clicked(token, PERSON)
    assert (r.status, r.location) == (302, "HTTPS://Shop.example/P")


def test_a_url_that_cannot_be_a_location_header_is_left_untracked_and_never_redirected():
    body = '<a href="https://shop.example/a&#13;&#10;Set-Cookie: x=1">A</a> <a href="https://shop.example/b c">B</a>'
    assert _track(body).startswith(body)  # both links as they were, only the pixel added
    # A token signed for such a URL (by an older version) answers 404, never a broken header.
    token = LINKS.click_url("acme", "spring", "ann@x.io", "https://shop.example/\r\nSet-Cookie: x=1").rsplit("/", 1)[1]
    assert _tracking(LINKS).clicked(token, PERSON).status == 404


def test_opens_are_unique_per_recipient_and_a_bad_pixel_records_nothing():
    ledger, stats = FakeLedger(), FakeStats()
    t = Tracking(LINKS, Recorder(ledger, stats), ledger)
    token = LINKS.open_url("acme", "spring", "ann@x.io").rsplit("/", 1)[1]
    assert t.opened(token, PERSON) and t.opened(token, PERSON)
    assert stats.total("opened") == 1
    assert not t.opened("forged.token", PERSON)


def test_tracking_links_signed_under_a_rotated_key_redirect_and_a_dropped_key_is_a_404():
    from chalicelib.core.links import LinkKeys

    keys = LinkKeys.parse("t" * 32)
    old = LinkSigner(keys, "https://x").click_url("acme", "spring", "ann@x.io", "https://shop.example/a")
    rotated = keys.rotated(1_800_000_000)
    new = LinkSigner(rotated, "https://x").click_url("acme", "spring", "ann@x.io", "https://shop.example/b")
    assert new.rsplit("/", 1)[1].startswith(f"{rotated.current}.")
    t = _tracking(LinkSigner(rotated, "https://x"))
    assert [t.clicked(u.rsplit("/", 1)[1], PERSON).location for u in (old, new)] == [
        "https://shop.example/a",
        "https://shop.example/b",
    ]
    dropped = _tracking(LinkSigner(rotated.without("k0"), "https://x"))
    assert dropped.clicked(old.rsplit("/", 1)[1], PERSON) == t.clicked("forged.token", PERSON)  # a 404, nothing more
    assert not dropped.opened(LinkSigner(keys, "https://x").open_url("acme", "s", "ann@x.io").rsplit("/", 1)[1], PERSON)


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

    def follow(agent: str, method: str = "GET") -> urllib.error.HTTPError:
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(urllib.request.Request(click, headers={"User-Agent": agent}, method=method), timeout=10)
        return redirect.value

    def fetch_pixel(agent: str) -> None:
        headers = {"User-Agent": agent, "Accept": "image/webp,image/apng,image/*,*/*;q=0.8"}
        with urllib.request.urlopen(urllib.request.Request(pixel, headers=headers), timeout=10) as resp:
            assert resp.headers["Content-Type"] == "image/gif" and resp.read().startswith(b"GIF89a")

    # A scanner at delivery: a link checker's HEAD, Apple's proxy fetching the images. Answered as anyone is,
    # and counted apart, as machines'.
    scanned = follow(BROWSER, method="HEAD")
    assert scanned.code == 302 and scanned.headers["Location"] == "https://shop.example/ann"
    fetch_pixel("Mozilla/5.0")
    c = wiring.container()
    counts = c.stats.get(user, "tracked")
    assert counts is not None
    assert [counts[k] for k in ("machine_clicked", "machine_opened", "clicked", "opened")] == [1, 1, 0, 0]
    # The person, an hour later: the ledger's send and SES's delivery moved back an hour, as if it were.
    assert eventually(lambda: (c.ledger.hit_context(user, "tracked", "ann@example.org") or HitContext()).delivered_at)
    ledger, an_hour_ago = c.ledger._model, int(time.time() * 1000) - 3_600_000
    row = ledger(f"{user}#tracked", "ann@example.org")
    moved = [ledger.sent_at.set(an_hour_ago), ledger.ses_delivered_at.set(an_hour_ago + 2000)]
    row.update(actions=[*moved, ledger.delivered_at.set(an_hour_ago + 5000)])
    person = follow(BROWSER)
    assert person.code == 302 and person.headers["Location"] == "https://shop.example/ann"
    fetch_pixel(BROWSER)
    counts = c.stats.get(user, "tracked")
    assert counts is not None
    assert [counts[k] for k in ("machine_clicked", "machine_opened", "clicked", "opened")] == [1, 1, 1, 1]

    # Each told as an event, a machine's marked with its evidence.
    def told() -> list[tuple[str, bool, str]]:
        got = c.event_log.page(user, campaign="tracked").events
        return sorted((e["type"], e["machine"], e.get("evidence", "")[:20]) for e in got if "machine" in e)

    assert eventually(lambda: len(told()) == 4, 60), told()
    assert told() == [
        ("clicked", False, ""),
        ("clicked", True, "a HEAD request: a li"),
        ("opened", False, ""),
        ("opened", True, "Apple Mail Privacy P"),
    ]

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
