"""The operator's page in a real headless browser, over the local stack, as an operator meets trouble: a
tenant that paused itself, a queue whose drain died holding its lease, a message SQS gave up on and an
invocation Lambda gave up on, each made to happen here and each on the page within seconds, without a reload.
Then resume, cancel and replay from the page, each confirmed, each taking effect, each in the operator log.

`make screenshots` saves its screenshots (docs/screenshots/ops-*.png; docs/operations.md shows one).
"""

from __future__ import annotations

import json
import re
import time

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from chalicelib import wiring
from chalicelib.core.contract import Sender
from chalicelib.core.routing import tenant_queue_name
from infra.ops.build import ops_app
from infra.ops.overview import COUNTS_KEPT_S
from infra.ops.server import serve
from infra.producer import CampaignSpec, messages, publish
from tests.browser.looks import dark, look_at_every_size, shoot
from tests.conftest import canonical, container_of, eventually, free_tenant, read_sends

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

HOSTILE_REASON = "spam trap hits <script>alert(1)</script>"


def _rows(browser, selector: str) -> list[str]:
    """The text of each row the selector finds, read in one script: the page may replace its rows (its own
    refresh) between two of Selenium's calls."""
    return browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(r => r.innerText.replace(/\\s+/g, ' '))", selector
    )


def _row(browser, tenant: str) -> str:
    """The tenant's row of the page as read now ('' while it has none)."""
    return next((t for t in _rows(browser, "table.ops-tenants tbody tr") if t.split(" ", 1)[0] == tenant), "")


def _cell(browser, name: str) -> str:
    return next((t for t in _rows(browser, "#overview tbody tr") if t.startswith(name + " ")), "")


def _until(browser, check, timeout: float = 60.0):
    return WebDriverWait(browser, timeout, poll_frequency=0.5).until(lambda _d: check())


def _publish(stack, message: dict) -> None:
    r = stack.settings.resources
    stack.client("sns").publish(TopicArn=stack.topic_arns[r.precompile_topic.name], Message=json.dumps(message))


def _campaign(stack, user: str, campaign: str, n: int, rate: float = 10) -> list[dict]:
    recipients = [{"email": f"r{i}@{user}.example.org", "metadata": {"name": f"R{i}"}} for i in range(n)]
    message = canonical(userId=user, campaign={"id": campaign, "subject": "Hi", "body": "<p>Hi {{ name }}</p>"})
    message.pop("recipient")
    message["recipients"] = recipients
    message["sender"] = stack.paid_sender(user, rate=rate, ses_max_rate=rate * 2)
    _publish(stack, message)
    return recipients


def _follow(browser, selector: str) -> None:
    """Click a link of the overview, which the page's own refresh may replace between finding and clicking."""
    for _ in range(20):
        try:
            browser.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"the link {selector!r} kept being replaced")


def _confirm_and_act(browser, link: str | None = None) -> str:
    """On a confirmation page (after following the link `link` selects): the action's button; its answer.
    Links are chosen by what they do and to whom: the stack is shared, other tests' tenants are listed too."""
    if link is not None:
        _follow(browser, link)
    WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.CSS_SELECTOR, "form[action$='/act'] button"))
    shoot(browser, "ops-confirm")
    browser.find_element(By.CSS_SELECTOR, "form[action$='/act'] button[type='submit']").click()
    try:
        return WebDriverWait(browser, 30).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role='status']")).text
    except Exception as exc:
        raise AssertionError(
            f"no answer at {browser.current_url}: {browser.find_element(By.TAG_NAME, 'main').text}"
        ) from exc


def test_an_operator_sees_trouble_within_seconds_and_resumes_cancels_and_replays_from_the_page(
    stack, uid, browser, monkeypatch
):
    c = wiring.container()
    r = stack.settings.resources
    paused, stuck, failing = f"ops-paused-{uid}", f"ops-stuck-{uid}", f"ops-fail-{uid}"
    app = ops_app(c, stack.settings, 0)
    server, _thread = serve(app, 0)
    app.port = server.server_port
    base = f"http://127.0.0.1:{app.port}"
    try:
        # A tenant that paused itself, with a reason that is markup.
        c.tenants.accept(paused, "paid", Sender(f"news@{paused}.example", "P", None, None, None, 5.0), c.ses.account_of)
        assert c.actions.pause_tenant(paused, HOSTILE_REASON, by_tenant=True).ok
        # A queue whose drain died holding the lease: its email waits, and ages.
        queue = tenant_queue_name(r, stuck)
        dead_drain = c.leases.acquire(queue, 180_000)
        assert dead_drain is not None
        _campaign(stack, stuck, "stuck-camp", 4)
        # A precompile failing every try: Lambda gives the event up to the on-failure queue.
        precompiler = container_of(stack, "precompile_email").precompiler
        real = precompiler.handle
        monkeypatch.setattr(
            precompiler,
            "handle",
            lambda raw: (_ for _ in ()).throw(RuntimeError("injected")) if "fail-camp" in raw else real(raw),
        )
        failed_queue = r.failed_invocations_queue.name
        failed_before = sum(stack.queue_depths().get(failed_queue, (0, 0, 0)))  # other tests' records, if any
        failed_recipients = _campaign(stack, failing, "fail-camp", 3)

        browser.get(base + "/")
        assert "Sign in with the link" in browser.page_source  # nothing without the key
        browser.get(base + app.sign_in_path)
        WebDriverWait(browser, 15).until(lambda d: "The stage at a glance" in d.title or "stage" in d.title)
        assert browser.execute_script("return document.cookie") == ""  # HttpOnly
        page = browser.current_url  # the session's own path: the key is off the address bar
        assert page.startswith(base + "/s/") and app.key not in page

        # Each appears within seconds, by the page's own refresh (no reload from here on).
        row = _until(browser, lambda: _row(browser, paused), 20)
        assert "the tenant" in row and HOSTILE_REASON in row  # the reason shown as text
        sqs = stack.client("sqs")
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        _until(browser, lambda: "4, 0, 0" in _row(browser, stuck), 30)
        # Its oldest email's age (from CloudWatch), then the dead drain's lease counted as a drain; nothing sent
        # yet to count bounces of, and its SES account its own (SES's view is not read for it).
        shown = re.compile(r"4, 0, 0 (-|\d+ s|\d+ min \d+ s) 1 none sent its own SES account Pause")
        assert shown.search(_row(browser, stuck)), _row(browser, stuck)
        # The failed invocation: its record on the on-failure queue, counted on the page, with Replay… beside it.
        _until(browser, lambda: int(_cell(browser, failed_queue).split()[1] or 0) > failed_before, 90)
        assert browser.find_elements(By.CSS_SELECTOR, "a[href*='action=replay']")
        browser.set_window_size(1280, 2200)  # the whole page, for docs/operations.md
        shoot(browser, "ops-page")
        # A consumer that receives the queue's email and never deletes it: after its fifth receive SQS gives
        # each message up to the dead-letter queue (the redrive policy's maxReceiveCount).
        before = int(_cell(browser, r.dead_letter_queue.name).split()[1])
        for _ in range(6):
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0, WaitTimeSeconds=0)
        _until(browser, lambda: int(_cell(browser, r.dead_letter_queue.name).split()[1]) == before + 4, 30)
        assert browser.find_elements(By.CSS_SELECTOR, "main img, main script") == []
        look_at_every_size(browser, "ops-overview")
        dark(browser, False)
        refused = [e for e in browser.get_log("browser") if "Content Security Policy" in e.get("message", "")]
        assert refused == []

        # Resume the tenant that paused itself.
        said = _confirm_and_act(browser, f"a[href*='action=resume'][href$='tenant={paused}']")
        assert "Done" in said and paused in said, said
        assert not c.tenants.get(paused, fresh=True).pauses

        # Cancel the stuck campaign, then let its queue go: nothing of it is sent.
        browser.find_element(By.ID, "cancel-tenant").send_keys(stuck)
        browser.find_element(By.ID, "cancel-campaign").send_keys("stuck-camp")
        browser.find_element(By.XPATH, "//button[contains(., 'Cancel the campaign')]").click()
        said = _confirm_and_act(browser)
        assert "Done" in said and "stuck-camp" in said, said
        assert c.campaign_control.state(stuck, "stuck-camp", fresh=True) == "cancelled"
        c.leases.drop(dead_drain)
        c.start_drain(queue)  # what the sweeper does within a minute of a lease that ended

        # The fault is fixed; replay what Lambda gave up on: each recipient is sent once.
        monkeypatch.setattr(precompiler, "handle", real)
        said = _confirm_and_act(browser, "a[href*='action=replay']")
        assert "failed invocation(s) replayed" in said, said
        assert stack.wait_until_drained(90)
        sent = [
            s["to"]
            for s in read_sends(stack.config.outbox)
            if s.get("campaignId") == "fail-camp" and s.get("userId") == failing
        ]
        assert sorted(sent) == sorted(x["email"] for x in failed_recipients)
        assert not [s for s in read_sends(stack.config.outbox) if s.get("userId") == stuck]

        # Every action is in the operator log, with who did it.
        browser.get(page)
        log = browser.find_element(By.CSS_SELECTOR, "section[aria-labelledby='log-h']").text
        who = app.who
        for what in ("resume a tenant", "cancel a campaign", "replay failed invocations"):
            assert what in log, log
        assert who in log and "this page" in log
        dark(browser, False)
        browser.set_window_size(1280, 2200)
        shoot(browser, "ops-after")
    finally:
        server.shutdown()
        server.server_close()
        _take_back_dead_letters(stack, stuck)


def _take_back_dead_letters(stack, user: str) -> None:
    """The dead letters this test made, deleted: the stack is shared, and other tests hold its dead-letter
    queue empty (a dead letter there is a defect they look for)."""
    sqs = stack.client("sqs")
    dlq = sqs.get_queue_url(QueueName=stack.settings.resources.dead_letter_queue.name)["QueueUrl"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, VisibilityTimeout=30, WaitTimeSeconds=1)
        mine = [m for m in got.get("Messages", []) if user in m["Body"]]
        for m in got.get("Messages", []):
            if m in mine:
                sqs.delete_message(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"])
            else:  # another test's: left as it was
                sqs.change_message_visibility(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
        if not mine:
            return


def test_reputation_is_shown_as_ses_sees_it_beside_moonsends_counts(stack, uid, browser):
    """A free tenant whose email bounces: SES (the stand-in's standard policy) pauses its SES tenant; the page
    shows SES's status of it and moonsend's counts on its row, and the account's rates as SES publishes them
    (CloudWatch, AWS/SES) beside moonsend's count of the free tenants' email."""
    c = wiring.container()
    user = f"ops-bouncy-{uid}"
    sender = free_tenant(stack, user)
    people = [{"email": f"bounce+{uid}{i}@simulator.amazonses.com"} for i in range(10)]
    people += [{"email": f"success+{uid}{i}@simulator.amazonses.com"} for i in range(30)]
    topic = stack.topic_arns[stack.settings.resources.precompile_topic.name]
    publish(stack.client("sns"), topic, messages(CampaignSpec(user, sender, "Hi", "<p>Hi</p>", "bouncy"), people))
    assert eventually(lambda: any(p.owner == "ses" for p in c.tenants.get(user, fresh=True).pauses), 120)
    app = ops_app(c, stack.settings, 0)
    server, _thread = serve(app, 0)
    app.port = server.server_port
    try:
        browser.get(f"http://127.0.0.1:{app.port}{app.sign_in_path}")
        row = _until(browser, lambda: (r := _row(browser, user)) and "SES: disabled" in r and r, 30)
        assert "The bounce rate exceeded" in row and "SES paused sending for SES tenant" in row
        # moonsend's counts of it: its bounces as SES's events reported them, over the emails it sent. SES may
        # pause the tenant before ses_events has counted the bounces (a batch gathers for a few seconds), and the
        # page keeps a tenant's counts COUNTS_KEPT_S: the first read may be from before them.
        row = _until(
            browser,
            lambda: (r := _row(browser, user)) and re.search(r"[1-9]\d*\.\d\d%, 0\.00% of \d+ sent", r) and r,
            COUNTS_KEPT_S + 30,
        )

        def account() -> str:
            return browser.execute_script(
                "const s = document.querySelector(\"section[aria-labelledby='reputation-h']\");"
                "return s ? s.innerText.replace(/\\s+/g, ' ') : ''"
            )

        # SES's own rates, once the stand-in's SES has published its minute (the whole account's: every
        # test's email), beside moonsend's count of the free tenants'.
        text = _until(browser, lambda: "none published yet" not in (a := account()) and a, 60)
        assert "sending enabled" in text
        assert re.search(r"Bounce rate \d+\.\d\d% \d+\.\d\d% \([1-9]\d* of \d+\) 5\.00%", text), text
        assert re.search(r"Complaint rate \d+\.\d\d% \d+\.\d\d% \(\d+ of \d+\) 0\.10%", text), text
        browser.set_window_size(1280, 2200)
        shoot(browser, "ops-reputation")
    finally:
        server.shutdown()
        server.server_close()
