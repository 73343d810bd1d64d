"""The console's people and sign-in links over HTTP on the local stack: an admin invites, the invitation's
link (read from the outbox, as the person would read their email) signs in once; a link asked for on the
sign-in page says the same whether or not the address has an account; an agency's address picks its
tenant; an admin removes a person or signs one out everywhere, each holding at that person's next page; a
viewer or a sender cannot change people; link requests are slowed down per client and per mailbox."""

from __future__ import annotations

import email
import html
import http.client
import os
import re
import subprocess
import sys
import time
import urllib.parse
from email.message import Message
from email.policy import default
from pathlib import Path

import pytest

from chalicelib import wiring
from chalicelib.api.principal import Role
from chalicelib.console.guard import LINK_REQUESTS, LINKS_PER_MAILBOX
from tests.e2e.console_forms import csrf as _csrf
from tests.e2e.console_forms import signed_in_with_key as _admin
from tests.e2e.console_forms import tenant_with_key
from tests.e2e.test_console import FORM, Browser

pytestmark = pytest.mark.e2e

LINK = re.compile(r"(https?://[^\s\"<>]+)/console/link/([A-Za-z0-9_-]{43})")


def _tenant(uid: str, name: str) -> tuple[str, str]:
    return tenant_with_key(f"people-{name}-{uid}")


def _mails_to(outbox: Path, address: str) -> list[Message]:
    """The console's emails to `address`, oldest first, parsed as a mail program parses them."""
    found = []
    for path in sorted((outbox / "_console").glob("*/*.eml"), key=lambda p: p.stat().st_mtime_ns):
        message = email.message_from_bytes(path.read_bytes(), policy=default)
        if str(message["To"]) == address:
            found.append(message)
    return found


def _link_in(message: Message) -> tuple[str, str]:
    """The link's base and token from the mail's text part."""
    body = message.get_body(("plain",))
    assert body is not None
    found = LINK.search(body.get_content())
    assert found is not None
    return found.group(1), found.group(2)


def _wait_for_mail(outbox: Path, address: str, count: int) -> list[Message]:
    deadline = time.monotonic() + 10
    while len(mails := _mails_to(outbox, address)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return mails


def test_an_invitations_link_signs_the_person_in_once_with_their_role(stack, uid):
    user, key = _tenant(uid, "a")
    admin, ann = _admin(stack, key), f"ann-{uid}@example.org"
    token = _csrf(admin.ask("GET", "/console/people")[2])
    status, headers, _ = admin.ask("POST", "/console/people", {"csrf": token, "address": ann.upper(), "role": "sender"})
    assert status == 303 and headers["location"].startswith("/console/people?done=invited")
    page = admin.ask("GET", headers["location"])[2]
    assert f"{ann} is invited, and an email with a sign-in link is on its way." in page
    (invitation,) = _wait_for_mail(stack.config.outbox, ann, 1)
    assert str(invitation["Subject"]) == f"You are invited to {user}'s moonsend console"
    assert str(invitation["From"]) == wiring.container().settings.console_from
    base, link = _link_in(invitation)
    assert base == stack.api_url  # the stage's own address
    person = Browser(stack.api_url)
    for _ in range(2):  # opening the link (a mail scanner, a preview) does not use it
        status, _headers, page = person.ask("GET", f"/console/link/{link}")
        assert status == 200 and ann in page and user in page and "as its sender" in page
    status, headers, _ = person.ask("POST", f"/console/link/{link}", {"tenant": user})
    assert status == 303 and headers["location"] == "/console" and person.cookie
    page = person.ask("GET", "/console")[2]
    assert ann in page and ">sender<" in page
    stranger = Browser(stack.api_url)
    assert stranger.ask("POST", f"/console/link/{link}", {"tenant": user})[0] == 410  # used
    assert stranger.ask("GET", f"/console/link/{link}")[0] == 410 and stranger.cookie is None


def test_a_link_asked_for_comes_by_email_and_an_unknown_address_gets_the_same_answer(stack, uid):
    user, _key = _tenant(uid, "b")
    bob, nobody = f"bob-{uid}@example.org", f"nobody-{uid}@example.org"
    wiring.container().people.invite(user, bob, Role.VIEWER, "operator")
    answers = []
    for address in (bob, nobody):
        status, _headers, page = Browser(stack.api_url).ask("POST", "/console/sign-in/link", {"address": address})
        answers.append((status, page.replace(address, "ADDRESS")))
    assert answers[0] == answers[1] and answers[0][0] == 200 and "Check your email" in answers[0][1]
    (mail,) = _wait_for_mail(stack.config.outbox, bob, 1)
    assert _mails_to(stack.config.outbox, nobody) == []
    assert str(mail["Subject"]) == "Your moonsend sign-in link" and mail["Auto-Submitted"] == "auto-generated"
    _base, link = _link_in(mail)
    browser = Browser(stack.api_url)
    assert browser.ask("POST", f"/console/link/{link}", {"tenant": user})[0] == 303
    assert ">viewer<" in browser.ask("GET", "/console")[2]


def test_an_agencys_address_picks_which_of_its_tenants_to_sign_in_to(stack, uid):
    (one, _), (two, _) = _tenant(uid, "c1"), _tenant(uid, "c2")
    agency = f"agency-{uid}@example.org"
    c = wiring.container()
    c.people.invite(one, agency, Role.VIEWER, "operator")
    c.people.invite(two, agency, Role.ADMIN, "operator")
    link = c.sign_in_links.mint(agency)
    browser = Browser(stack.api_url)
    _status, headers, page = browser.ask("GET", f"/console/link/{link}")
    assert "belongs to several tenants" in page and one in page and two in page
    assert headers["referrer-policy"] == "strict-origin" and headers["cache-control"] == "no-store"
    assert browser.ask("POST", f"/console/link/{link}", {"tenant": "someone-else"})[0] == 410  # not theirs
    assert browser.ask("POST", f"/console/link/{link}", {"tenant": two})[0] == 303  # still unused: signs in
    page = browser.ask("GET", "/console")[2]
    assert two in page and ">admin<" in page
    expired = c.sign_in_links.mint(agency, lifetime_s=0)
    assert browser.ask("GET", f"/console/link/{expired}")[0] == 410
    assert Browser(stack.api_url).ask("POST", f"/console/link/{expired}", {"tenant": one})[0] == 410


def test_a_link_points_at_the_stage_whatever_host_the_request_named(stack, uid):
    user, _key = _tenant(uid, "d")
    dan = f"dan-{uid}@example.org"
    wiring.container().people.invite(user, dan, Role.VIEWER, "operator")
    browser = Browser(stack.api_url)
    status, _h, _p = browser.ask(
        "POST", "/console/sign-in/link", {"address": dan}, {"Host": "evil.example", "Origin": "http://evil.example"}
    )
    assert status == 200
    (mail,) = _wait_for_mail(stack.config.outbox, dan, 1)
    assert _link_in(mail)[0] == stack.api_url


def test_an_admin_removes_a_person_and_signs_one_out_everywhere_each_at_their_next_page(stack, uid):
    user, key = _tenant(uid, "e")
    c = wiring.container()
    browsers = {}
    for name, role in (("vic", Role.VIEWER), ("sam", Role.SENDER)):
        address = f"{name}-{uid}@example.org"
        c.people.invite(user, address, role, "operator")
        browsers[name] = Browser(stack.api_url)
        link = c.sign_in_links.mint(address)
        assert browsers[name].ask("POST", f"/console/link/{link}", {"tenant": user})[0] == 303
        assert browsers[name].ask("GET", "/console")[0] == 200
    admin = _admin(stack, key)
    token = _csrf(admin.ask("GET", "/console/people")[2])
    status, headers, _ = admin.ask(
        "POST", "/console/people/remove", {"csrf": token, "address": f"vic-{uid}@example.org"}
    )
    assert status == 303 and "is removed" in admin.ask("GET", headers["location"])[2]
    assert browsers["vic"].ask("GET", "/console")[1]["location"] == "/console/sign-in"
    address = f"sam-{uid}@example.org"
    status, headers, _ = admin.ask("POST", "/console/people/sign-out", {"csrf": token, "address": address})
    assert status == 303 and "signed out everywhere" in admin.ask("GET", headers["location"])[2]
    assert browsers["sam"].ask("GET", "/console")[1]["location"] == "/console/sign-in"
    assert c.people_store.get(user, address) is not None  # still one of the tenant's people
    missing = {"csrf": token, "address": f"ghost-{uid}@example.org"}
    assert admin.ask("POST", "/console/people/remove", missing)[0] == 404


def test_a_viewer_or_a_sender_reads_the_people_but_the_server_refuses_them_every_change(stack, uid):
    user, _key = _tenant(uid, "f")
    c = wiring.container()
    for name, role in (("vera", Role.VIEWER), ("sid", Role.SENDER)):
        address = f"{name}-{uid}@example.org"
        c.people.invite(user, address, role, "operator")
        browser = Browser(stack.api_url)
        assert browser.ask("POST", f"/console/link/{c.sign_in_links.mint(address)}", {"tenant": user})[0] == 303
        status, _headers, page = browser.ask("GET", "/console/people")
        assert status == 200 and address in page and "Invite someone" not in page and "/people/remove" not in page
        token = _csrf(page)
        for path, fields in (
            ("/console/people", {"address": f"new-{uid}@example.org", "role": "admin"}),
            ("/console/people", {"address": address, "role": "admin"}),
            ("/console/people/remove", {"address": f"vera-{uid}@example.org"}),
            ("/console/people/sign-out", {"address": f"vera-{uid}@example.org"}),
        ):
            status, _headers, page = browser.ask("POST", path, {"csrf": token, **fields})
            assert status == 403 and "Only a tenant's admins can" in html.unescape(page), (name, path)
    assert [p.address for p in c.people.of_tenant(user)] == [f"sid-{uid}@example.org", f"vera-{uid}@example.org"]


def test_an_admins_invitation_of_what_is_no_address_or_of_themselves_is_refused_on_the_page(stack, uid):
    user, _key = _tenant(uid, "g")
    c = wiring.container()
    boss = f"boss-{uid}@example.org"
    c.people.invite(user, boss, Role.ADMIN, "operator")
    browser = Browser(stack.api_url)
    assert browser.ask("POST", f"/console/link/{c.sign_in_links.mint(boss)}", {"tenant": user})[0] == 303
    token = _csrf(browser.ask("GET", "/console/people")[2])
    for fields, said in (
        ({"address": "<img src=x onerror=alert(1)>", "role": "viewer"}, "is not an email address"),
        ({"address": f"x-{uid}@example.org", "role": "owner"}, "is not a role"),
        ({"address": boss, "role": "viewer"}, "you cannot change your own role"),
    ):
        status, _headers, page = browser.ask("POST", "/console/people", {"csrf": token, **fields})
        assert status == 400 and said in page and "<img src=x" not in page, fields
    status, _headers, page = browser.ask("POST", "/console/people/remove", {"csrf": token, "address": boss})
    assert status == 400 and "you cannot remove yourself" in page
    assert browser.ask("POST", "/console/people", {"address": "a@b.org", "role": "admin"})[0] == 403  # no token


def test_link_requests_are_slowed_per_client_and_mail_one_mailbox_a_few_times_only(stack, uid):
    """From 127.0.0.10, so that the other tests' address is not held up."""
    user, _key = _tenant(uid, "h")
    eve = f"eve-{uid}@example.org"
    wiring.container().people.invite(user, eve, Role.VIEWER, "operator")

    def ask(address: str) -> tuple[int, dict[str, str]]:
        port = Browser(stack.api_url).port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.10", 0))
        try:
            conn.request(
                "POST", "/console/sign-in/link", body=urllib.parse.urlencode({"address": address}), headers=FORM
            )
            r = conn.getresponse()
            r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}
        finally:
            conn.close()

    for _ in range(LINK_REQUESTS):
        assert ask(eve)[0] == 200
    status, headers = ask(eve)
    assert status == 429 and int(headers["retry-after"]) > 0
    assert len(_wait_for_mail(stack.config.outbox, eve, LINKS_PER_MAILBOX)) == LINKS_PER_MAILBOX
    time.sleep(1)
    assert len(_mails_to(stack.config.outbox, eve)) == LINKS_PER_MAILBOX  # the mailbox had its few
    assert Browser(stack.api_url).ask("POST", "/console/sign-in/link", {"address": eve})[0] == 200  # others go on


def test_the_operator_invites_a_first_admin_who_signs_in_by_the_mailed_or_the_printed_link(stack, uid):
    user, _key = _tenant(uid, "i")
    first = f"First-{uid}@Example.org"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    command = [sys.executable, "-m", "infra", "tenant", "invite", "--user", user, "--address", first, "--link"]
    done = subprocess.run(
        [*command, "--endpoint", stack.endpoint], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    address = first.lower()
    assert f"{user}: {address} is now its admin" in done.stdout and "was emailed" in done.stdout
    printed = LINK.search(done.stdout)
    assert printed is not None and printed.group(1) == stack.api_url
    (mail,) = _wait_for_mail(stack.config.outbox, address, 1)
    assert "The operator invited you" in mail.get_body(("plain",)).get_content()
    for link in (printed.group(2), _link_in(mail)[1]):  # each its own, each once
        browser = Browser(stack.api_url)
        assert browser.ask("POST", f"/console/link/{link}", {"tenant": user})[0] == 303
        assert ">admin<" in browser.ask("GET", "/console")[2]
    refused = subprocess.run(
        [*command[:-2], "not-an-address", "--endpoint", stack.endpoint], capture_output=True, text=True, env=env
    )
    assert refused.returncode == 2 and "is not an email address" in refused.stderr


def test_an_admin_cannot_turn_invitations_into_a_mailer(stack, uid):
    """Invite, remove, invite again: the address gets its few emails, then none (the page says so)."""
    _user, key = _tenant(uid, "j")
    admin, target = _admin(stack, key), f"target-{uid}@example.org"
    token = _csrf(admin.ask("GET", "/console/people")[2])
    said = []
    for _ in range(LINKS_PER_MAILBOX + 1):
        status, headers, _ = admin.ask("POST", "/console/people", {"csrf": token, "address": target, "role": "viewer"})
        assert status == 303
        said.append(html.unescape(admin.ask("GET", headers["location"])[2]))
        assert admin.ask("POST", "/console/people/remove", {"csrf": token, "address": target})[0] == 303
    assert all("an email with a sign-in link is on its way" in page for page in said[:LINKS_PER_MAILBOX])
    assert "too many invitation emails lately" in said[-1]
    assert len(_wait_for_mail(stack.config.outbox, target, LINKS_PER_MAILBOX)) == LINKS_PER_MAILBOX
    time.sleep(0.5)
    assert len(_mails_to(stack.config.outbox, target)) == LINKS_PER_MAILBOX
