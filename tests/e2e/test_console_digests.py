"""The console's digests pages over HTTP on the local stack: the list as `GET /digests` gives it, a digest's
page with what its next run would mail, a run asked for from the page by a sender (mailed once, the page
then showing the run's campaign and what it did; asked again at once, a 429 page that says when), refused
to a viewer by the server; a digest of another tenant a 404; an item's hostile text never reaches a page
as markup."""

from __future__ import annotations

import html
import re
import time

import pytest

from chalicelib import wiring
from chalicelib.api.principal import Role
from tests.e2e.console_forms import csrf as _csrf
from tests.e2e.console_forms import person as _person
from tests.e2e.test_digests_e2e import _define, _item, _mail, _publish, _sender, _stored, _until

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=alert(1)>"


def _hours_ago(hours: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - hours * 3600))


def test_a_sender_sees_what_the_next_run_would_mail_and_runs_it_from_the_page_once(stack, uid):
    user, sender = f"console-digest-{uid}", _sender(stack, uid)
    _define(stack, user, sender)
    _publish(
        stack,
        _item(user, "ann@example.org", "one", _hours_ago(2), HOSTILE),
        _item(user, "bob@example.org", "two", _hours_ago(1), "Two", name=HOSTILE),
    )
    _until(lambda: set(_stored(user)) == {"ann@example.org", "bob@example.org"})
    browser = _person(stack, user, f"sam-{uid}@example.org", Role.SENDER)

    page = browser.ask("GET", "/console/digests")[2]
    assert '<a href="/console/digests/weekly">weekly</a>' in page and "cron(0 13 ? * WED *)" in page
    assert "never" in page
    status, _headers, page = browser.ask("GET", "/console/digests/weekly")
    assert status == 200 and "What the next run would mail" in page and "Not run yet." in page
    assert re.search(r"<dt>Recipients</dt><dd>2</dd>", page) and re.search(r"<dt>Items</dt><dd>2</dd>", page)
    assert "<img" not in page

    status, headers, _ = browser.ask("POST", "/console/digests/weekly/run", {"csrf": _csrf(page)})
    assert status == 303
    page = html.unescape(browser.ask("GET", headers["location"])[2])
    campaign = re.search(r"its emails are the campaign\s+<a href=\"/console/campaigns/([^\"]+)\"", page)
    assert campaign is not None
    mail: dict[str, list[str]] = {}
    _until(lambda: len(mail.update(_mail(stack, user, campaign.group(1))) or mail) == 2)
    assert all(len(bodies) == 1 for bodies in mail.values())  # each reader mailed once
    _until(lambda: "Items mailed" in browser.ask("GET", "/console/digests/weekly")[2])
    page = browser.ask("GET", "/console/digests/weekly")[2]
    assert re.search(r"<dt>Emails</dt><dd>2</dd>", page) and re.search(r"<dt>Recipients</dt><dd>0</dd>", page)

    status, _headers, page = browser.ask("POST", "/console/digests/weekly/run", {"csrf": _csrf(page)})
    assert status == 429 and "retry later (in about" in page


def test_a_viewer_reads_the_digest_and_cannot_run_it_and_another_tenant_finds_nothing(stack, uid):
    user, sender = f"console-digest-v-{uid}", _sender(stack, f"v{uid}")
    _define(stack, user, sender)
    viewer = _person(stack, user, f"vic-{uid}@example.org", Role.VIEWER)
    page = viewer.ask("GET", "/console/digests/weekly")[2]
    assert "weekly" in page and "Run now" not in page
    status, _headers, page = viewer.ask("POST", "/console/digests/weekly/run", {"csrf": _csrf(page)})
    assert status == 403 and "you are signed in as a viewer" in html.unescape(page)
    assert wiring.container().digests.state(user, "weekly").last_run_at is None

    other = _person(stack, f"console-digest-o-{uid}", f"olga-{uid}@example.org", Role.ADMIN)
    assert other.ask("GET", "/console/digests/weekly")[0] == 404
    page = other.ask("GET", "/console/digests")[2]
    assert "No digests yet" in page
    status, _headers, page = other.ask("POST", "/console/digests/weekly/run", {"csrf": _csrf(page)})
    assert status == 404 and "no such digest" in page
