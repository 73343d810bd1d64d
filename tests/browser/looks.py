"""How a page is looked at in every test: light and dark, a phone and a wide screen, axe-core's serious
findings, no sideways scroll, and a screenshot of each when `make screenshots` asks (MOONSEND_SCREENSHOTS)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.browser.axe import serious_violations

SIZES = {"desktop": (1280, 900), "phone": (390, 844)}


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


def look_at_every_size(browser, name: str) -> None:
    """The page light and dark, on a phone and a wide screen: nothing serious for axe, no sideways scroll,
    and a screenshot of each (when `make screenshots` asks)."""
    for dark_mode in (False, True):
        dark(browser, dark_mode)
        for size, (width, height) in SIZES.items():
            browser.set_window_size(width, height)
            assert serious_violations(browser) == [], (size, dark_mode)
            overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{size}: the page is {overflow}px wider than the screen"
            shoot(browser, f"{name}-{'dark' if dark_mode else 'light'}-{size}")
