"""The console in a real headless browser (Debian's Chromium through Selenium), as a tenant's person meets
it: `/` leads to the sign-in page, the key signs in, the campaigns page shows each campaign's text as text
(no script runs, the Content-Security-Policy blocks nothing the page needs), axe-core finds nothing serious
in light and dark, on a phone and a wide screen; sign-out closes the pages.

`make screenshots` runs this with MOONSEND_SCREENSHOTS set: the screenshots land there (docs/screenshots).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from chalicelib import wiring
from chalicelib.core.contract import Sender
from chalicelib.stores.campaign_sender import SenderSnapshot
from tests.browser.axe import serious_violations

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

HOSTILE = '<img src=x onerror=alert(1)>"><script>alert(2)</script>'
SIZES = {"desktop": (1280, 900), "phone": (390, 844)}


@pytest.fixture
def browser():
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


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
    return user, c.reports.issue_key(user)


def shoot(driver, name: str) -> None:
    folder = os.environ.get("MOONSEND_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def dark(driver, on: bool) -> None:
    value = "dark" if on else "light"
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": value}]}
    )


def test_a_person_signs_in_with_the_key_reads_the_campaigns_and_signs_out(stack, uid, browser):
    user, key = tenant_with_campaigns(uid)
    browser.get(f"{stack.api_url}/")
    WebDriverWait(browser, 15).until(ec.title_contains("Sign in"))
    assert serious_violations(browser) == []
    shoot(browser, "console-sign-in")

    browser.find_element(By.ID, "key").send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Campaigns"))
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Autumn sale: 20% off everything" in body and HOSTILE in body  # the probe shown as its text
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main script") == []
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: the page cannot read it
    assert user in body
    for dark_mode in (False, True):
        dark(browser, dark_mode)
        for size, (width, height) in SIZES.items():
            browser.set_window_size(width, height)
            assert serious_violations(browser) == [], (size, dark_mode)
            overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{size}: the page is {overflow}px wider than the screen"
            shoot(browser, f"console-campaigns-{'dark' if dark_mode else 'light'}-{size}")
    refused = [e for e in browser.get_log("browser") if "Content Security Policy" in e.get("message", "")]
    assert refused == []  # the page needs nothing its policy refuses

    browser.find_element(By.CSS_SELECTOR, "form[action$='/console/sign-out'] button").click()
    WebDriverWait(browser, 15).until(ec.title_contains("Sign in"))
    browser.get(f"{stack.api_url}/console")
    assert "Sign in" in browser.title  # the pages are closed again
