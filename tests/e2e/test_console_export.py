"""A campaign's recipients exported from the console as one CSV file over HTTP on the local stack: the file,
fetched by the page's link from S3 (not through the API's answer), read back by the standard library's csv
module, equals `GET /campaigns/{id}/recipients` row by row; a cell that a spreadsheet would run as a formula
starts with `'`; 2,500 rows are read in the API's pages; another tenant's campaign is a 404 page."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import urllib.request
from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.control.recipient_export import COLUMNS
from chalicelib.core.contract import Sender
from chalicelib.stores.ports.campaigns import SenderSnapshot
from tests.e2e.console_forms import csrf as _csrf
from tests.e2e.test_console import Browser

pytestmark = pytest.mark.e2e

FORMULAS = ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(A1:A2)"]


def _campaign(uid: str, name: str, recipients: int) -> tuple[str, str]:
    c = wiring.container()
    user = f"export-{name}-{uid}"
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "News", None, None, None, 1.0), c.ses.account_of)
    snapshot = SenderSnapshot("paid", f"news@{user}.example", "News", "us-east-1", 10.0, 1, "123456789012")
    c.campaign_senders.fix(user, "spring", snapshot, "Spring")
    c.ledger.record_queued(user, "spring", [f"r{i:05d}@example.org" for i in range(recipients)])
    c.ledger.record_rejected(
        user, "spring", [(f"{f[0]}{i}@example.org".replace("@@", "at@"), f) for i, f in enumerate(FORMULAS)]
    )
    c.ledger.record_rejected(user, "spring", [("-minus@example.org", "bounced: =cmd|' /C calc'!A0")])
    return user, c.api_keys.replace_all(user)


def _api_rows(stack: Any, key: str) -> list[dict[str, Any]]:
    rows, after = [], ""
    while True:
        url = f"{stack.api_url}/campaigns/spring/recipients?limit=1000" + (f"&after={after}" if after else "")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            page = json.loads(answer.read())
        rows += page["recipients"]
        after = page["next"] or ""
        if not after:
            return rows


def _exported(stack: Any, key: str) -> tuple[str, bytes]:
    browser = Browser(stack.api_url)
    assert browser.ask("POST", "/console/sign-in", {"key": key})[0] == 303
    page = browser.ask("GET", "/console/campaigns/spring")[2]
    status, _headers, page = browser.ask("POST", "/console/campaigns/spring/export", {"csrf": _csrf(page)})
    assert status == 200 and "Export ready" in page
    link = re.search(r'<a class="button" href="([^"]+)" download="spring-recipients.csv">', page)
    assert link is not None
    url = html.unescape(link.group(1))
    assert not url.startswith(stack.api_url)  # from S3, not through the API's answer
    with urllib.request.urlopen(url, timeout=30) as answer:
        return page, answer.read()


def test_the_exported_csv_equals_the_api_row_by_row_and_no_cell_runs_as_a_formula(stack, uid):
    _user, key = _campaign(uid, "rows", 2500)
    page, body = _exported(stack, key)
    assert "2,505 recipients" in page
    assert body.startswith(b"\xef\xbb\xbf")  # UTF-8's mark: a spreadsheet reads it as UTF-8
    rows = list(csv.DictReader(io.StringIO(body.decode("utf-8-sig"), newline="")))
    api = _api_rows(stack, key)
    assert len(rows) == len(api) == 2505 and list(rows[0]) == list(COLUMNS)
    for got, want in zip(rows, api, strict=True):
        for column in COLUMNS:
            value = "" if want[column] is None else str(want[column])
            expected = f"'{value}" if value[:1] in ("=", "+", "-", "@") else value
            assert got[column] == expected, (column, got, want)
    reasons = {r["reason"] for r in rows}
    assert {f"'{f}" for f in FORMULAS} <= reasons and "bounced: =cmd|' /C calc'!A0" in reasons  # not at the start
    assert not any(v[:1] in "=+-@" for r in rows for v in r.values() if v)  # nothing a spreadsheet runs


def test_another_tenants_campaign_exports_nothing(stack, uid):
    _user, _key = _campaign(uid, "owner", 3)
    c = wiring.container()
    other = f"export-other-{uid}"
    c.tenants.accept(other, "free", Sender(f"news@{other}.example", "News", None, None, None, 1.0), c.ses.account_of)
    browser = Browser(stack.api_url)
    assert browser.ask("POST", "/console/sign-in", {"key": c.api_keys.replace_all(other)})[0] == 303
    token = _csrf(browser.ask("GET", "/console")[2])
    status, _headers, page = browser.ask("POST", "/console/campaigns/spring/export", {"csrf": token})
    assert status == 404 and "no such campaign" in page
