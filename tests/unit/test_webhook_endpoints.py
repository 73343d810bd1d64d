"""Webhook endpoints: what a tenant may register, where we will connect, and how we sign."""

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from chalicelib.core.webhook_contract import EVENT_TYPES, parse_endpoint
from chalicelib.webhooks import url_policy
from chalicelib.webhooks.signing import new_secret, signed_headers


def test_a_registration_takes_a_url_event_types_and_a_batch_size_and_names_what_is_wrong():
    r = parse_endpoint({"url": " https://hooks.example.com/x ", "eventTypes": ["complained", "bounced", "bounced"]})
    assert (r.url, r.event_types, r.max_events) == ("https://hooks.example.com/x", ("bounced", "complained"), 1)
    assert parse_endpoint({"url": "https://h.example.com"}).event_types == EVENT_TYPES
    for body, says in (
        (None, "JSON object"),
        ({}, "url:"),
        ({"url": "https://h.example.com/" + "a" * 2048}, "url:"),
        ({"url": "https://h.example.com", "eventTypes": ["bounced", "nope"]}, "eventTypes: unknown nope"),
        ({"url": "https://h.example.com", "eventTypes": []}, "eventTypes:"),
        ({"url": "https://h.example.com", "maxEventsPerRequest": 101}, "maxEventsPerRequest"),
        ({"url": "https://h.example.com", "maxEventsPerRequest": True}, "maxEventsPerRequest"),
    ):
        with pytest.raises(ValueError, match=says):
            parse_endpoint(body)


def test_loopback_receivers_are_a_setting_of_their_own_not_a_stage_name():
    from chalicelib.core.config import Settings

    assert Settings.from_env({"MOONSEND_STAGE": "dev"}).webhook_allow_loopback is False
    assert Settings.from_env({"MOONSEND_STAGE": "local"}).webhook_allow_loopback is False
    allowed = {"MOONSEND_STAGE": "dev", "MOONSEND_WEBHOOK_ALLOW_LOOPBACK": "true"}
    assert Settings.from_env(allowed).webhook_allow_loopback is True
    assert Settings.from_env({**allowed, "MOONSEND_WEBHOOK_ALLOW_LOOPBACK": "false"}).webhook_allow_loopback is False


def _resolves_to(*addresses):
    return lambda host, port: list(addresses)


@pytest.mark.parametrize(
    ("url", "addresses", "says"),
    [
        ("http://hooks.example.com/x", ["93.184.216.34"], "must be https"),
        ("ftp://hooks.example.com/x", ["93.184.216.34"], "must be an https:// URL"),
        ("https://user:pw@hooks.example.com/x", ["93.184.216.34"], "credentials"),
        ("https://hooks.example.com:99999/x", ["93.184.216.34"], "url:"),
        ("https://hooks.example.com/x#frag", ["93.184.216.34"], "fragment"),
        ("https://localhost/x", ["127.0.0.1"], "not a public address"),
        ("https://internal.example.com/x", ["10.1.2.3"], "not a public address"),
        ("https://metadata.example.com/x", ["169.254.169.254"], "not a public address"),  # the instance metadata
        ("https://cgnat.example.com/x", ["100.64.0.1"], "not a public address"),
        ("https://zero.example.com/x", ["0.0.0.0"], "not a public address"),
        ("https://v6.example.com/x", ["::1"], "not a public address"),
        ("https://mapped.example.com/x", ["::ffff:127.0.0.1"], "not a public address"),
        ("https://link.example.com/x", ["fe80::1%eth0"], "not a public address"),
        ("https://ula.example.com/x", ["fd00::1"], "not a public address"),
        ("https://multi.example.com/x", ["224.0.0.1"], "not a public address"),
        # IPv4 inside IPv6: a route through these reaches the IPv4 address they carry.
        ("https://nat64.example.com/x", ["64:ff9b::a00:5"], "not a public address"),
        ("https://sixtofour.example.com/x", ["2002:a9fe:a9fe::1"], "not a public address"),
        ("https://compat.example.com/x", ["::7f00:1"], "not a public address"),
        # IPv4-translated (RFC 2765, ::ffff:0:0:0/96) carries 10.0.0.1; the rest of ::/8 is no unicast space.
        ("https://translated.example.com/x", ["::ffff:0:a00:1"], "not a public address"),
        ("https://translated.example.com/x", ["::ffff:0:0:a00:1"], "not a public address"),
        ("https://unallocated.example.com/x", ["4000::1"], "not a public address"),  # outside 2000::/3
        ("https://site.example.com/x", ["fec0::1"], "not a public address"),
        ("https://hooks.example.com/é", ["93.184.216.34"], "only printable ASCII"),
        ("https://hooks.example.com/a b", ["93.184.216.34"], "only printable ASCII"),
        ("https://hooks.example.com/a\r\nX-Injected: 1", ["93.184.216.34"], "only printable ASCII"),
        ("https://hooks.example.com:0/x", ["93.184.216.34"], "port"),
        # One address of several is enough to refuse: the connection could go to it.
        ("https://split.example.com/x", ["93.184.216.34", "192.168.0.10"], "192.168.0.10"),
        ("https://none.example.com/x", [], "does not resolve"),
    ],
)
def test_a_url_that_is_not_a_public_https_endpoint_is_refused_on_a_deployed_stage(url, addresses, says):
    with pytest.raises(ValueError, match=says):
        url_policy.check(url, allow_loopback=False, resolver=_resolves_to(*addresses))


def test_a_public_endpoint_is_taken_with_its_addresses_and_the_local_stack_allows_loopback():
    t = url_policy.check(
        "https://hooks.example.com:8443/in?x=1", allow_loopback=False, resolver=_resolves_to("93.184.216.34")
    )
    assert (t.scheme, t.host, t.port, t.path, t.addresses) == (
        "https",
        "hooks.example.com",
        8443,
        "/in?x=1",
        ("93.184.216.34",),
    )
    assert url_policy.check("https://v6.example.com/", allow_loopback=False, resolver=_resolves_to("2606:4700::1"))
    assert url_policy.check("https://n.example.com/", allow_loopback=False, resolver=_resolves_to("64:ff9b::5db8:d822"))
    local = url_policy.check("http://127.0.0.1:9000/hook", allow_loopback=True)  # resolved for real
    assert local.addresses == ("127.0.0.1",)
    with pytest.raises(ValueError, match="not a public address"):  # loopback, but not private networks
        url_policy.check("https://10.0.0.1/hook", allow_loopback=True)
    with pytest.raises(ValueError, match="does not resolve"):
        url_policy.check("https://no-such-host.invalid/x", allow_loopback=False)


def test_signatures_are_the_specifications_hmac_and_verify_with_its_own_library():
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = '{"test": 2432232314}'
    headers = signed_headers(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    # The specification's construction, written out: HMAC-SHA256 of "<id>.<timestamp>.<body>" with the
    # secret's bytes (base64 after `whsec_`), base64, after `v1,`.
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, b"msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330." + body.encode(), hashlib.sha256).digest()
    assert headers["webhook-signature"] == "v1," + base64.b64encode(mac).decode()
    assert headers["webhook-signature"] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="  # the spec's example
    fresh = new_secret()
    now = int(datetime.now(UTC).timestamp())
    signed = signed_headers(fresh, "msg_1", now, json.dumps({"a": 1}))
    assert Webhook(fresh).verify(json.dumps({"a": 1}), signed) == {"a": 1}
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(json.dumps({"a": 1}), signed)  # another endpoint's secret
    assert len(base64.b64decode(fresh.removeprefix("whsec_"))) == 32 and fresh != new_secret()


def test_the_api_reads_a_body_only_once_the_tenant_is_known_and_looks_up_no_endpoint_id_none_can_have(monkeypatch):
    """Through the whole edge (chalice.test's client: the middleware, the blueprints, the seam), with stores
    the request must not reach."""
    from types import SimpleNamespace

    from chalice.test import Client

    import app
    from chalicelib.control.webhook_registration import NO_ENDPOINT, BackgroundJobs, WebhookRegistration

    class Keys:
        def authenticate(self, authorization):
            return "acme" if authorization == "Bearer good" else None

    class Untouched:  # a store the request must not reach
        def __getattr__(self, name):
            raise AssertionError(f"reached: {name}")

    jobs = BackgroundJobs(Untouched(), lambda job: None)
    registration = WebhookRegistration(Untouched(), Untouched(), Untouched(), jobs, Untouched())
    container = SimpleNamespace(api_keys=Keys(), webhook_registration=registration)
    monkeypatch.setattr(app.wiring, "container", lambda: container)
    deep = b"[" * 100_000 + b"]" * 100_000
    with Client(app.app) as client:
        post = lambda key: client.http.post(  # noqa: E731
            "/webhooks", headers={"Content-Type": "application/json", **key}, body=deep
        )
        assert post({}).status_code == 401
        assert post({"Authorization": "Bearer msk__x"}).status_code == 404  # the body never parsed
        refused = post({"Authorization": "Bearer good"})
        assert refused.status_code == 400
        assert json.loads(refused.body)["detail"] == "body: nested too deeply to read"
        for endpoint_id in ("w" * 3000, "%C3%A9" * 600, "..x", "a%23b"):
            for method, path in (("DELETE", ""), ("POST", "/test"), ("POST", "/replay")):
                answer = client.http.request(
                    method, f"/webhooks/{endpoint_id}{path}", headers={"Authorization": "Bearer good"}
                )
                assert (answer.status_code, json.loads(answer.body)["detail"]) == (404, NO_ENDPOINT)


# Issue 38, finding 5: IANA's special-purpose registries, as the snapshot in the repository lists them.
from chalicelib.webhooks import special_addresses  # noqa: E402

_NOT_GLOBAL = [b for b in special_addresses.blocks() if not b.globally_reachable]


def _inside_a_reachable_block(ip, block):
    """Whether a more specific block that is globally reachable holds `ip` (192.0.0.9 inside 192.0.0.0/24)."""
    return any(
        ip in b.network and b.network.prefixlen > block.network.prefixlen and b.globally_reachable
        for b in special_addresses.blocks()
        if b.network.version == ip.version
    )


@pytest.mark.parametrize("block", _NOT_GLOBAL, ids=lambda b: str(b.network))
def test_every_block_ianas_registries_say_is_not_globally_reachable_is_refused(block):
    tried = 0
    for ip in (block.network[0], block.network[block.network.num_addresses // 2], block.network[-1]):
        if _inside_a_reachable_block(ip, block):
            continue
        tried += 1
        with pytest.raises(ValueError, match="not a public address"):
            url_policy.check("https://hook.example.com/", allow_loopback=False, resolver=_resolves_to(str(ip)))
    assert tried


def test_the_blocks_python_311_took_for_global_are_refused_and_the_snapshot_says_where_it_is_from():
    refused = ("192.0.0.8", "192.88.99.1", "192.88.99.2", "3fff::1", "3fff:fff:ffff::1", "5f00::1", "100:0:0:1::1")
    for address in refused:
        with pytest.raises(ValueError, match="not a public address"):
            url_policy.check("https://hook.example.com/", allow_loopback=False, resolver=_resolves_to(address))
    listed = {str(b.network) for b in _NOT_GLOBAL}
    assert {"192.0.0.8/32", "192.88.99.0/24", "3fff::/20", "5f00::/16", "2002::/16", "2001::/32"} <= listed
    assert len(_NOT_GLOBAL) >= 35  # every row of both registries that is not globally reachable
    for name in special_addresses.FILES:
        text = (special_addresses.SNAPSHOT_DIR / name).read_text()
        assert f"# source: https://www.iana.org/assignments/{name.removesuffix('-1.csv')}/{name}" in text
    assert set(special_addresses.snapshot_dates().values()) == {"2026-07-18"}
    # What the registries say is reachable stays so, where Python agrees: a more specific reservation
    # (PCP anycast inside 192.0.0.0/24), the global NAT64 prefix carrying a public address, a public one.
    for address in ("192.0.0.9", "64:ff9b::5db8:d822", "93.184.216.34", "2606:4700::1"):
        assert url_policy.check("https://hook.example.com/", allow_loopback=False, resolver=_resolves_to(address))
