"""The console in a real headless browser (Debian's Chromium through Selenium), as a tenant's person meets
it: `/` leads to the sign-in page, the key signs in, the campaigns page shows each campaign's text as text
(no script runs, the Content-Security-Policy blocks nothing the page needs), axe-core finds nothing serious
in light and dark, on a phone and a wide screen; sign-out closes the pages.

`make screenshots` runs this with MOONSEND_SCREENSHOTS set: the screenshots land there (docs/screenshots).
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from chalicelib import wiring
from chalicelib.api.principal import Role
from chalicelib.core.contract import Sender
from chalicelib.stores.ports.campaigns import SenderSnapshot
from tests.browser.axe import serious_violations
from tests.browser.looks import SIZES, dark, look_at_every_size, shoot

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

HOSTILE = '<img src=x onerror=alert(1)>"><script>alert(2)</script>'


def tenant_with_campaigns(uid: str) -> tuple[str, str]:
    c = wiring.container()
    user = f"console-ui-{uid}"
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "Acme News", None, None, None, 1.0), c.ses.account_of)
    snapshot = SenderSnapshot("paid", f"news@{user}.example", "Acme News", "us-east-1", 14.0, 1, "123456789012")
    for campaign, subject, counts in (
        ("autumn-sale", "Autumn sale: 20% off everything", {"queued": 1200, "sent": 1200, "delivered": 1180}),
        ("weekly-digest", "Your weekly digest, {{ name }}", {"queued": 5000, "sent": 2150, "delivered": 2100}),
        ("probe", HOSTILE, {"queued": 3, "sent": 1}),
    ):
        c.campaign_senders.fix(user, campaign, snapshot, subject)
        c.stats.add_counts(user, campaign, counts)
        time.sleep(0.01)
    return user, c.api_keys.replace_all(user)


def sign_in_with_key(browser, key: str) -> None:
    """On the sign-in page: the key's form is behind its disclosure, under the emailed link's."""
    browser.find_element(By.CSS_SELECTOR, "details.key-sign-in summary").click()
    browser.find_element(By.ID, "key").send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "form[action$='/console/sign-in'] button").click()


def test_a_person_signs_in_with_the_key_reads_the_campaigns_and_signs_out(stack, uid, browser):
    user, key = tenant_with_campaigns(uid)
    browser.get(f"{stack.api_url}/")
    WebDriverWait(browser, 15).until(ec.title_contains("Sign in"))
    assert serious_violations(browser) == []
    shoot(browser, "console-sign-in")

    sign_in_with_key(browser, key)
    WebDriverWait(browser, 15).until(ec.title_contains("Campaigns"))
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Autumn sale: 20% off everything" in body and HOSTILE in body  # the probe shown as its text
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main script") == []
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: the page cannot read it
    assert user in body
    look_at_every_size(browser, "console-campaigns")
    refused = [e for e in browser.get_log("browser") if "Content Security Policy" in e.get("message", "")]
    assert refused == []  # the page needs nothing its policy refuses

    from tests.e2e.test_console_events import _keep

    _keep(
        user,
        [
            ("delivered", "autumn-sale", f"reader{i}@example.org", {"reason": "250 2.6.0 Message received"})
            for i in range(3)
        ]
        + [("bounced", "probe", HOSTILE, {"reason": HOSTILE})],
    )
    browser.find_element(By.LINK_TEXT, "Events").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Events"))
    shown = browser.find_element(By.TAG_NAME, "main").text
    assert "reader0@example.org" in shown and HOSTILE in shown
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main script") == []
    look_at_every_size(browser, "console-events")
    dark(browser, False)

    browser.find_element(By.LINK_TEXT, "Settings").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Settings"))
    assert "Acme News" in browser.find_element(By.TAG_NAME, "main").text
    look_at_every_size(browser, "console-settings")
    dark(browser, False)
    browser.find_element(By.ID, "pause-reason").send_keys("end-of-year freeze")
    browser.find_element(By.CSS_SELECTOR, "form[action$='/settings/pause'] button").click()
    settled(browser).until(lambda b: "Paused" in _notice(b))
    assert "end-of-year freeze" in browser.find_element(By.TAG_NAME, "main").text
    browser.find_element(By.CSS_SELECTOR, "form[action$='/settings/resume'] button").click()
    settled(browser).until(lambda b: "lifted" in _notice(b))

    browser.find_element(By.CSS_SELECTOR, "form[action$='/console/sign-out'] button").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Sign in"))
    browser.get(f"{stack.api_url}/console")
    assert "Sign in" in browser.title  # the pages are closed again


def settled(browser, seconds: float = 15) -> WebDriverWait:
    """A wait across a navigation: an element of the page being left goes stale, and is looked for again."""
    return WebDriverWait(browser, seconds, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))


def _notice(browser) -> str:
    """The page's notice, read in one script: across the navigation after a form, Chrome may answer an element of
    the page being left with "Node ... does not belong to the document" rather than a stale element."""
    text = browser.execute_script("const n = document.querySelector('.notice'); return n ? n.textContent : ''")
    return " ".join(str(text).split())  # as the rendered text reads


def _progress(browser) -> float:
    # Read in one script: the live part may be swapped between finding an element and reading it.
    return float(browser.execute_script("return document.querySelector('#live progress').value"))


def _done_of(browser) -> tuple[int, int]:
    """The live part's "N of M done": N only grows; M grows too while the producer's messages come in, so
    the bar's fraction may step back, and `done` may be said while more are still to come."""
    said = browser.execute_script("return document.querySelector('#live .progress span').textContent")
    done, _, rest = said.partition(" of ")
    return int(done), int(rest.split()[0])


# In one script, as _progress: a part may be swapped between finding its elements and reading them.
READ_STATES = (
    "return [...document.querySelectorAll('#recipient-rows td .state')].map(e => e.textContent.trim().toLowerCase())"
)


def _live_state(browser) -> str:
    return browser.execute_script("return document.querySelector('#live .state').textContent").strip().lower()


def test_a_person_watches_a_campaign_send_pauses_resumes_and_finds_a_recipient(stack, uid, browser):
    """A campaign of 400 at 10 a second, followed from its page without a reload: the bar moves, a pause
    holds it, a resume finishes it, each recipient mailed once; times read in the viewer's own zone."""
    from infra.producer import CampaignSpec, messages, publish
    from tests.conftest import read_sends

    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    user = f"console-live-{uid}"
    c = wiring.container()
    c.tenants.accept(user, "free", Sender(f"news@{uid}.example", "Acme News", None, None, None, 1.0), c.ses.account_of)
    sender = stack.paid_sender(f"w{uid}", rate=10, ses_max_rate=50)
    recipients = [{"email": f"r{i:03d}@example.org", "metadata": {"name": f"N{i}"}} for i in range(400)]
    spec = CampaignSpec(user, sender, "Winter launch, {{ name }}", "<p>Hello {{ name }}</p>", "winter-launch")
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], messages(spec, recipients))

    browser.get(f"{stack.api_url}/console/sign-in")
    sign_in_with_key(browser, c.api_keys.replace_all(user))
    WebDriverWait(browser, 15).until(ec.title_contains("Campaigns"))
    WebDriverWait(browser, 30, poll_frequency=1).until(
        lambda b: b.refresh() or b.find_elements(By.CSS_SELECTOR, "a[href$='/console/campaigns/winter-launch']")
    )
    browser.find_element(By.CSS_SELECTOR, "a[href$='/console/campaigns/winter-launch']").click()
    WebDriverWait(browser, 15).until(ec.presence_of_element_located((By.ID, "live")))

    browser.find_element(By.CSS_SELECTOR, "form[action$='/pause'] button").click()
    settled(browser).until(lambda b: "Paused" in _notice(b))
    assert _live_state(browser) == "paused" and c.campaign_control.state(user, "winter-launch", fresh=True) == "paused"
    held = len([s for s in read_sends(stack.config.outbox) if s["userId"] == user])
    assert held < 300  # paused with at least 100 to go: the bar has a while to move after the resume
    browser.find_element(By.CSS_SELECTOR, "form[action$='/resume'] button").click()
    settled(browser).until(lambda b: "Resumed" in _notice(b))

    browser.execute_script("window.kept = 'this page, not a reload'")
    seen: list[int] = []

    def finished(b) -> bool:
        done, of = _done_of(b)
        seen.append(done)
        return _live_state(b) == "done" and (done, of) == (400, 400)

    WebDriverWait(browser, 90, poll_frequency=0.5).until(finished)
    assert browser.execute_script("return window.kept") == "this page, not a reload"  # swapped in, not reloaded
    assert len(set(seen)) >= 3 and seen == sorted(seen) and _progress(browser) == 1.0  # the bar moved on
    WebDriverWait(browser, 15).until(  # the recipients part's last refresh, once the page went quiet
        lambda b: set(b.execute_script(READ_STATES)) == {"sent"}
    )
    sends = [s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user]
    assert len(sends) == len(set(sends)) == 400

    created = browser.find_element(By.CSS_SELECTOR, "p.meta time")
    assert created.get_attribute("title").endswith("Z") and "UTC" not in created.text  # the viewer's zone
    assert browser.find_elements(By.CSS_SELECTOR, "#live svg rect.sent")

    look_at_every_size(browser, "console-campaign")
    dark(browser, False)
    browser.set_window_size(1280, 2000)  # the whole page: chart, actions and recipients
    shoot(browser, "console-campaign-whole")
    browser.set_window_size(*SIZES["desktop"])

    field = browser.find_element(By.ID, "r-address")
    field.send_keys("R123@")
    field.submit()
    WebDriverWait(browser, 15).until(ec.url_contains("address="))
    rows = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "td.address")]
    assert rows == ["r123@example.org"]
    refused = [e for e in browser.get_log("browser") if "Content Security Policy" in e.get("message", "")]
    assert refused == []


def _mailed_link(outbox: Path, address: str, subject: str) -> str:
    """The link of the newest console email to `address` with `subject`, read as its person reads mail."""
    import email
    import re
    from email.policy import default

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for path in sorted((outbox / "_console").glob("*/*.eml"), key=lambda p: -p.stat().st_mtime_ns):
            message = email.message_from_bytes(path.read_bytes(), policy=default)
            if str(message["To"]) == address and str(message["Subject"]) == subject:
                found = re.search(r"http\S+/console/link/\S+", message.get_body(("plain",)).get_content())
                assert found is not None
                return found.group(0)
        time.sleep(0.2)
    raise AssertionError(f"no email {subject!r} to {address}")


def test_an_admin_invites_a_viewer_who_signs_in_by_the_emailed_link_and_may_only_read(stack, uid, browser):
    """The admin (by the key) invites from the people page; the viewer reads the invitation in the outbox,
    opens its link, signs in, finds every action refused, asks for a new link on the sign-in page, and signs
    out: every page is closed again."""
    user, key = tenant_with_campaigns(uid)
    viewer = f"viewer-{uid}@example.org"
    browser.get(f"{stack.api_url}/console/sign-in")
    sign_in_with_key(browser, key)
    WebDriverWait(browser, 15).until(ec.title_contains("Campaigns"))
    browser.find_element(By.LINK_TEXT, "People").click()
    WebDriverWait(browser, 15).until(ec.title_contains("People"))
    browser.find_element(By.ID, "invite-address").send_keys(viewer)
    browser.find_element(By.CSS_SELECTOR, "#invite-role option[value=viewer]").click()
    browser.find_element(By.CSS_SELECTOR, "form.invite button").click()
    settled(browser).until(lambda b: "is invited" in _notice(b))
    assert viewer in browser.find_element(By.CSS_SELECTOR, "table").text
    look_at_every_size(browser, "console-people")
    dark(browser, False)
    browser.delete_all_cookies()  # the viewer's own browser

    link = _mailed_link(stack.config.outbox, viewer, f"You are invited to {user}'s moonsend console")
    browser.get(link)
    WebDriverWait(browser, 15).until(ec.title_contains("Sign in"))
    assert viewer in browser.find_element(By.TAG_NAME, "main").text and user in browser.page_source
    look_at_every_size(browser, "console-link")
    dark(browser, False)
    browser.find_element(By.CSS_SELECTOR, "main form button").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Campaigns"))
    assert viewer in browser.find_element(By.CSS_SELECTOR, ".who").text

    browser.get(f"{stack.api_url}/console/campaigns/weekly-digest")
    WebDriverWait(browser, 15).until(ec.presence_of_element_located((By.ID, "live")))
    assert "You can read this campaign" in browser.find_element(By.CSS_SELECTOR, ".actions").text
    assert browser.find_elements(By.CSS_SELECTOR, ".actions form, .actions a.button") == []
    browser.get(f"{stack.api_url}/console/campaigns/weekly-digest/cancel")
    assert "Not allowed" in browser.title and "viewer" in browser.find_element(By.TAG_NAME, "main").text
    browser.get(f"{stack.api_url}/console/people")
    assert browser.find_elements(By.CSS_SELECTOR, "form.invite, form[action$='/people/remove']") == []
    browser.get(link)  # used: the link signs in no more
    assert "does not sign in" in browser.find_element(By.TAG_NAME, "main").text

    browser.get(f"{stack.api_url}/console")
    browser.find_element(By.CSS_SELECTOR, "form[action$='/console/sign-out'] button").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Sign in"))
    for page in ("/console", "/console/people", "/console/campaigns/weekly-digest"):
        browser.get(f"{stack.api_url}{page}")
        assert "Sign in" in browser.title, page

    browser.find_element(By.ID, "address").send_keys(viewer)
    browser.find_element(By.CSS_SELECTOR, "form[action$='/sign-in/link'] button").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Check your email"))
    look_at_every_size(browser, "console-link-sent")
    dark(browser, False)
    browser.get(_mailed_link(stack.config.outbox, viewer, "Your moonsend sign-in link"))
    browser.find_element(By.CSS_SELECTOR, "main form button").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Campaigns"))
    refused = [e for e in browser.get_log("browser") if "Content Security Policy" in e.get("message", "")]
    assert refused == []


def test_an_admin_keeps_webhooks_suppressions_digests_and_keys_from_their_pages(stack, uid, browser):
    """Each page of the console's second part as an admin uses it: add a webhook (its secret shown once),
    test it and see the answer, remove it; paste suppressions and lift one; run a digest; make a key and
    revoke it. Every page axe-clean, light and dark, phone and desktop, tenant text as text."""
    from infra.webhook_receiver import WebhookReceiver
    from tests.e2e.test_digests_e2e import _define, _sender

    user, key = tenant_with_campaigns(uid)
    c = wiring.container()
    c.suppressions.add(user, f"angry-{uid}@example.org", "complaint", HOSTILE)
    _define(stack, user, _sender(stack, f"b{uid}"), digest="weekly-news")
    broken = c.webhook_registration.add(user, {"url": "http://127.0.0.1:9/hooks", "eventTypes": ["bounced"]})
    assert c.webhook_endpoints.disable(user, broken["id"], f"HTTP 503 {HOSTILE}", time.time() - 3600)
    receiver = WebhookReceiver()
    try:
        browser.get(f"{stack.api_url}/console/sign-in")
        sign_in_with_key(browser, key)
        WebDriverWait(browser, 15).until(ec.title_contains("Campaigns"))

        c.ledger.record_rejected(user, "probe", [("=formula@example.org", HOSTILE), ("ann@example.org", "-2+3")])
        browser.get(f"{stack.api_url}/console/campaigns/probe")
        browser.find_element(By.CSS_SELECTOR, "form.export button").click()
        WebDriverWait(browser, 15).until(ec.title_contains("Export ready"))
        link = browser.find_element(By.PARTIAL_LINK_TEXT, "Download probe-recipients.csv").get_attribute("href") or ""
        with urllib.request.urlopen(link, timeout=30) as answer:
            exported = answer.read().decode("utf-8-sig")
        assert "'=formula@example.org" in exported and "'-2+3" in exported
        look_at_every_size(browser, "console-export")
        dark(browser, False)

        browser.find_element(By.LINK_TEXT, "Webhooks").click()
        WebDriverWait(browser, 15).until(ec.title_contains("Webhooks"))
        browser.find_element(By.ID, "w-url").send_keys(receiver.url)
        for unwanted in ("opened", "clicked"):
            browser.find_element(By.CSS_SELECTOR, f"input[name=eventTypes][value={unwanted}]").click()
        browser.find_element(By.CSS_SELECTOR, "form[action$='/console/webhooks'] button[type=submit]").click()
        WebDriverWait(browser, 15).until(ec.title_contains("Webhook added"))
        secret = browser.find_element(By.ID, "secret").get_attribute("value") or ""
        assert secret.startswith("whsec_")
        copy = browser.find_element(By.CSS_SELECTOR, "button[data-copy=secret]")
        copy.click()  # headless Chromium may refuse the clipboard: the page then says so and selects it
        settled(browser).until(lambda b: b.find_element(By.CSS_SELECTOR, "[data-copied-for=secret]").text != "")
        look_at_every_size(browser, "console-webhook-added")
        dark(browser, False)
        browser.find_element(By.LINK_TEXT, "Done: back to the webhooks").click()
        WebDriverWait(browser, 15).until(ec.title_contains("Webhooks"))
        assert secret not in browser.page_source and HOSTILE in browser.find_element(By.TAG_NAME, "main").text
        (added,) = [e for e in c.webhook_registration.list(user)["endpoints"] if e["url"] == receiver.url]
        assert "opened" not in added["eventTypes"] and "bounced" in added["eventTypes"]
        browser.find_element(By.CSS_SELECTOR, f"form[action$='/{added['id']}/test'] button").click()
        settled(browser).until(lambda b: "It answered 200" in b.find_element(By.CSS_SELECTOR, ".test-result").text)
        assert len(receiver.requests) == 1
        look_at_every_size(browser, "console-webhooks")
        dark(browser, False)
        browser.find_element(By.CSS_SELECTOR, f"#remove-{broken['id']} summary").click()
        browser.find_element(By.CSS_SELECTOR, f"form[action$='/{broken['id']}/remove'] button").click()
        settled(browser).until(lambda b: "Removed" in _notice(b))
        assert [e["id"] for e in c.webhook_registration.list(user)["endpoints"]] == [added["id"]]

        browser.find_element(By.LINK_TEXT, "Suppressions").click()
        WebDriverWait(browser, 15).until(ec.title_contains("Suppressions"))
        pasted = f"left-1-{uid}@example.org\nleft-2-{uid}@example.org, left-3-{uid}@example.org"
        browser.find_element(By.ID, "s-addresses").send_keys(pasted)
        browser.find_element(By.ID, "s-why").send_keys("left the company")
        browser.find_element(By.CSS_SELECTOR, "form[action$='/console/suppressions'][method=post] button").click()
        settled(browser).until(lambda b: "Added 3" in _notice(b))
        assert HOSTILE in browser.find_element(By.TAG_NAME, "main").text
        look_at_every_size(browser, "console-suppressions")
        dark(browser, False)
        browser.find_element(By.CSS_SELECTOR, "form[action$='/suppressions/lift'] button").click()
        settled(browser).until(lambda b: "may mail it again" in _notice(b))

        browser.find_element(By.LINK_TEXT, "Digests").click()
        WebDriverWait(browser, 15).until(ec.title_contains("Digests"))
        look_at_every_size(browser, "console-digests")
        dark(browser, False)
        browser.find_element(By.LINK_TEXT, "weekly-news").click()
        WebDriverWait(browser, 15).until(ec.title_contains("weekly-news"))
        browser.find_element(By.CSS_SELECTOR, "form[action$='/run'] button").click()
        settled(browser).until(lambda b: "A run for the period" in _notice(b))
        look_at_every_size(browser, "console-digest")
        dark(browser, False)

        browser.find_element(By.LINK_TEXT, "People").click()
        WebDriverWait(browser, 15).until(ec.title_contains("People"))
        browser.find_element(By.ID, "key-label").send_keys("the CI's deploy job")
        browser.find_element(By.CSS_SELECTOR, "form[action$='/people/keys'] button").click()
        WebDriverWait(browser, 15).until(ec.title_contains("Key made"))
        made = browser.find_element(By.ID, "new-key").get_attribute("value") or ""
        assert made.startswith("msk_") and made != key
        look_at_every_size(browser, "console-key-made")
        dark(browser, False)
        browser.find_element(By.LINK_TEXT, "Done: back to people and keys").click()
        WebDriverWait(browser, 15).until(ec.title_contains("People"))
        assert (
            made not in browser.page_source and "the CI's deploy job" in browser.find_element(By.TAG_NAME, "main").text
        )
        browser.execute_script("document.getElementById('keys-h').scrollIntoView()")
        look_at_every_size(browser, "console-people-keys")
        dark(browser, False)
        (listed,) = [k for k in c.api_keys.listed(user) if k["label"] == "the CI's deploy job"]
        browser.find_element(By.CSS_SELECTOR, f"#revoke-{listed['id']} summary").click()
        browser.find_element(By.CSS_SELECTOR, f"#revoke-{listed['id']} button").click()
        settled(browser).until(lambda b: "is revoked" in _notice(b))
        assert c.api_keys.authenticate(f"Bearer {made}") is None and c.api_keys.authenticate(f"Bearer {key}") == user
        refused = [e for e in browser.get_log("browser") if "Content Security Policy" in e.get("message", "")]
        assert refused == []
    finally:
        receiver.close()


def test_a_sender_uploads_a_csv_writes_with_a_preview_tests_and_watches_the_campaign_go(stack, uid, browser, tmp_path):
    """A person of the role of sender uploads 2,000 rows from the send page (straight to S3, its progress
    shown), reads the report (duplicates removed, refused rows, suppressed), writes the campaign with its
    preview beside it, sends a test to themselves, reviews and sends, and lands on the campaign's page,
    which follows it to done; the upload's counts are the ledger's. Every page axe-clean, phone and desktop."""
    c = wiring.container()
    user, key, me = f"send-ui-{uid}", f"AKIAB{uid}".upper(), f"me@{uid}.example"
    stack.ses.configure(key, max_send_rate=400)
    address = f"news@{uid}.example"
    stack.client("sesv2", access_key=key, secret_key=f"s-{uid}").create_email_identity(EmailIdentity=address)
    c.tenants.accept(user, "paid", Sender(address, "Acme News", "us-east-1", key, f"s-{uid}", 400.0), c.ses.account_of)
    # Most of the upload is on the tenant's list: 2,000 rows read and reported, 490 sent (the local stack's
    # drainers are slow on a shared machine), each of the rest recorded suppressed.
    c.suppressions.add_many(user, [f"r{i:04d}@example.org" for i in range(8, 1508)], "asked by phone")
    rows = [f"r{i:04d}@example.org,Person {i},{HOSTILE if i == 7 else 'Oslo'}" for i in range(1990)]
    rows += [f"R{i:04d}@EXAMPLE.ORG,Again,Oslo" for i in range(8)] + ["not-an-address,x,y", "=cmd|' /C calc'!A0,x,y"]
    people = tmp_path / "customers.csv"
    people.write_bytes(("\ufeffemail,name,city\r\n" + "\r\n".join(rows) + "\r\n").encode())
    c.people.invite(user, me, Role.SENDER, "operator")
    browser.get(f"{stack.api_url}/console/link/{c.sign_in_links.mint(me)}")
    WebDriverWait(browser, 15).until(ec.title_contains("Sign in"))
    browser.find_element(By.CSS_SELECTOR, "main form button").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Campaigns"))

    browser.find_element(By.LINK_TEXT, "Send").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Send a campaign"))
    look_at_every_size(browser, "console-send")
    dark(browser, False)
    browser.set_window_size(*SIZES["desktop"])
    browser.find_element(By.ID, "u-file").send_keys(str(people))
    browser.find_element(By.CSS_SELECTOR, "form[data-upload] button").click()
    settled(browser, 60).until(lambda b: "Duplicates removed" in b.find_element(By.ID, "upload-state").text)
    figures = {
        e.find_element(By.TAG_NAME, "dt").text: int(e.find_element(By.TAG_NAME, "dd").text.replace(",", ""))
        for e in browser.find_elements(By.CSS_SELECTOR, ".figures div")
    }
    assert figures == {
        "Rows": 2000,
        "Recipients": 1990,
        "Duplicates removed": 8,
        "Refused rows": 2,
        "On your suppression list": 1500,
    }
    look_at_every_size(browser, "console-upload")
    dark(browser, False)
    browser.set_window_size(*SIZES["desktop"])

    browser.find_element(By.ID, "c-subject").send_keys("Hello {{ name }}")
    browser.find_element(By.ID, "c-body").send_keys("<p>Dear {{ name }} of {{ city }}</p>")
    row = browser.find_element(By.ID, "c-row")
    row.clear()
    row.send_keys("8")  # the recipient whose city is hostile markup
    browser.find_element(By.CSS_SELECTOR, "button[value=preview]").click()
    settled(browser).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".preview iframe"))
    assert "Hello Person 7" in browser.find_element(By.CSS_SELECTOR, ".preview .subject").text
    frame = browser.find_element(By.CSS_SELECTOR, ".preview iframe")
    assert frame.get_attribute("sandbox") == ""
    browser.switch_to.frame(frame)
    assert browser.find_element(By.TAG_NAME, "p").text == f"Dear Person 7 of {HOSTILE}"  # text, never markup
    assert browser.find_elements(By.TAG_NAME, "img") == []
    browser.switch_to.default_content()
    look_at_every_size(browser, "console-compose")
    dark(browser, False)
    browser.set_window_size(*SIZES["desktop"])

    browser.find_element(By.CSS_SELECTOR, "button[value=test]").click()
    settled(browser).until(lambda b: f"A test is on its way to {me}" in _notice(b))
    browser.find_element(By.CSS_SELECTOR, "button[value=review]").click()
    settled(browser).until(ec.title_contains("Review and send"))
    assert "1,990 recipients" in browser.find_element(By.TAG_NAME, "main").text
    look_at_every_size(browser, "console-review")
    dark(browser, False)
    browser.set_window_size(*SIZES["desktop"])
    browser.find_element(By.CSS_SELECTOR, "form[action$='/send'] button").click()
    settled(browser).until(lambda b: "/console/campaigns/c" in b.current_url)
    campaign = browser.current_url.rsplit("/", 1)[1]
    live = "return document.querySelector('#live .state')?.textContent.trim() ?? document.title"
    settled(browser, 180).until(lambda b: b.execute_script(live) == "done")
    counts = c.stats.get(user, campaign)
    assert counts is not None and (counts["sent"], counts["suppressed"]) == (490, 1500)  # the report's 1,990
    test_sent = [s for s in read_sends_of(stack, user) if s["to"] == me]
    assert len(test_sent) == 1 and len(read_sends_of(stack, user)) == 491


def read_sends_of(stack, user: str) -> list[dict]:
    import json

    path = stack.config.outbox / "sends.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [s for s in (json.loads(line) for line in lines if line.strip()) if s["userId"] == user]
