"""What the console's HTTP tests do alike: a free tenant with a key, a browser signed in with a key or as an
invited person, and the CSRF token a page's forms carry."""

from __future__ import annotations

import re
from typing import Any

from chalicelib import wiring
from chalicelib.api.principal import Role
from chalicelib.core.contract import Sender
from tests.e2e.test_console import Browser


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def tenant_with_key(user: str) -> tuple[str, str]:
    """A free tenant registered as its first message would, and a key of its own."""
    c = wiring.container()
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "News", None, None, None, 1.0), c.ses.account_of)
    return user, c.api_keys.replace_all(user)


def signed_in_with_key(stack: Any, key: str) -> Browser:
    browser = Browser(stack.api_url)
    assert browser.ask("POST", "/console/sign-in", {"key": key})[0] == 303
    return browser


def person(stack: Any, user: str, address: str, role: Role) -> Browser:
    """A browser signed in as a person the operator invited, by a sign-in link made for them."""
    c = wiring.container()
    c.people.invite(user, address, role, "operator")
    browser = Browser(stack.api_url)
    assert browser.ask("POST", f"/console/link/{c.sign_in_links.mint(address)}", {"tenant": user})[0] == 303
    return browser
