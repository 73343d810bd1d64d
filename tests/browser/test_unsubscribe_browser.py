"""The unsubscribe page in a real headless browser (Debian's Chromium, driven by Selenium).

`make test` installs chromium and chromium-driver from Debian's packages when they are missing; this test
does not skip without them: the page a person sees is part of what the product promises.
"""

from email import message_from_bytes
from email.policy import default

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


@pytest.fixture
def browser():
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def test_a_person_opens_the_link_from_a_sent_email_confirms_and_is_unsubscribed(stack, uid, browser):
    from chalicelib import wiring
    from infra.producer import CampaignSpec, messages, publish
    from tests.e2e.test_pipeline_e2e import _tenant

    sender = _tenant(stack, uid, rate=20, ses_rate=20)
    user = f"tenant-{uid}"
    body = '<p>Our news</p><p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'
    spec = CampaignSpec(user, sender, "News", body, "weekly")
    msgs = messages(spec, [{"email": "reader@example.org"}])
    publish(stack.client("sns"), stack.topic_arns["moonsend-local-PrecompileEmail"], msgs)
    assert stack.wait_until_drained(60)
    (eml,) = (stack.config.outbox / user / "weekly").glob("*.eml")
    link = str(message_from_bytes(eml.read_bytes(), policy=default)["List-Unsubscribe"]).strip(" <>")

    browser.get(link)
    assert "reader@example.org" in browser.find_element(By.TAG_NAME, "body").text
    assert wiring.container().suppressions.check(user, ["reader@example.org"]) == {}  # opening changes nothing

    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(browser, 15).until(ec.title_is("Unsubscribed"))
    assert "will get no more of these emails" in browser.find_element(By.TAG_NAME, "body").text
    why = wiring.container().suppressions.check(user, ["reader@example.org"])["reader@example.org"]
    assert why.startswith("suppressed for this tenant: unsubscribe")
    assert wiring.container().stats.get(user, "weekly")["unsubscribed"] == 1
