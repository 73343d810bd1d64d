"""Sending without code over HTTP on the local stack: a CSV uploaded straight to S3 by the presigned form,
read into a report, and a campaign sent to it with an Idempotency-Key, published by upload_jobs to
PrecompileEmail and sent; the report's counts match the ledger's, a retried request makes no second
campaign, and S3's POST policy refuses what it should."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import requests

from chalicelib import wiring
from chalicelib.core.contract import Sender
from tests.conftest import eventually, read_sends

pytestmark = pytest.mark.e2e


def _paid_tenant(stack: Any, uid: str, rate: float = 200.0) -> tuple[str, str]:
    """A paid tenant with registered SES keys and a verified From address; its id and an API key."""
    c = wiring.container()
    user, key = f"upl-{uid}", f"AKIAU{uid}".upper()
    stack.ses.configure(key, max_send_rate=rate)
    address = f"news@{uid}.example"
    stack.client("sesv2", access_key=key, secret_key=f"secret-{uid}").create_email_identity(EmailIdentity=address)
    c.tenants.accept(user, "paid", Sender(address, "News", "us-east-1", key, f"secret-{uid}", rate), c.ses.account_of)
    return user, c.api_keys.replace_all(user)


def _api(stack: Any, key: str, method: str, path: str, body: Any = None, **headers: str) -> requests.Response:
    h = {"Authorization": f"Bearer {key}", **headers}
    data = None if body is None else json.dumps(body)
    if data is not None:
        h["Content-Type"] = "application/json"
    return requests.request(method, f"{stack.api_url}{path}", data=data, headers=h, timeout=30)


def _upload(stack: Any, key: str, content: bytes, **given: Any) -> dict[str, Any]:
    made = _api(stack, key, "POST", "/uploads", {"filename": "people.csv", **given})
    assert made.status_code == 201, made.text
    form = made.json()["form"]
    sent = requests.post(form["url"], data=form["fields"], files={"file": ("people.csv", content)}, timeout=60)
    assert sent.status_code in (200, 204), sent.text
    upload_id = made.json()["id"]
    assert _api(stack, key, "POST", f"/uploads/{upload_id}/read").status_code == 202
    done: dict[str, Any] = {}

    def read() -> bool:
        done.update(_api(stack, key, "GET", f"/uploads/{upload_id}").json())
        return done["state"] in ("read", "refused")

    assert eventually(read, timeout=60)
    return done


def _csv(n: int, duplicates: int = 0, bad: int = 0) -> bytes:
    lines = ["email,name,city"]
    lines += [f"r{i}@example.org,Name {i},City" for i in range(n)]
    lines += [f"R{i}@EXAMPLE.org,Again {i},City" for i in range(duplicates)]
    lines += [f"not-an-address-{i},Bad,City" for i in range(bad)]
    return ("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8")


def test_an_uploaded_csv_is_read_sent_once_per_recipient_and_its_report_matches_the_ledger(stack, uid):
    user, key = _paid_tenant(stack, uid)
    upload = _upload(stack, key, _csv(400, duplicates=100, bad=7))
    assert upload["state"] == "read", upload
    report = upload["report"]
    assert (report["rows"], report["recipients"], report["duplicates"], report["refused"]) == (507, 400, 100, 7)
    assert report["columns"] == ["email", "name", "city"] and report["addressColumn"] == "email"
    assert report["refusedRows"][0] == {"line": 502, "reason": "email: not an email address"}
    refused = requests.get(upload["refusedRowsUrl"], timeout=30)
    assert refused.status_code == 200 and refused.text.count("not an email address") == 7

    body = {"subject": "Hi {{ name }}", "body": "<p>Dear {{ name }} of {{ city }}</p>", "uploadId": upload["id"]}
    request_key = str(uuid.uuid4())
    first = _api(stack, key, "POST", "/campaigns", body, **{"Idempotency-Key": request_key})
    assert first.status_code == 201, first.text
    campaign = first.json()["id"]
    again = _api(stack, key, "POST", "/campaigns", body, **{"Idempotency-Key": request_key})
    assert again.status_code == 201 and again.json()["id"] == campaign
    other = _api(stack, key, "POST", "/campaigns", {**body, "subject": "Other"}, **{"Idempotency-Key": request_key})
    assert other.status_code == 422 and other.json()["campaign"] == campaign

    def done() -> bool:
        shown = _api(stack, key, "GET", f"/campaigns/{campaign}").json()
        return shown["publication"]["state"] == "published" and shown["counts"]["sent"] == 400

    assert eventually(done, timeout=120)
    sends = [s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user]
    assert sorted(sends) == sorted(f"r{i}@example.org" for i in range(400))
    shown = _api(stack, key, "GET", f"/campaigns/{campaign}").json()
    assert shown["publication"]["published"] == report["recipients"] == shown["progress"]["accepted"]


def test_a_request_without_an_idempotency_key_or_over_the_free_cap_sends_nothing(stack, uid):
    c = wiring.container()
    user = f"free-{uid}"
    c.tenants.accept(user, "free", Sender(f"news@{user}.example", "N", None, None, None, 1.0), c.ses.account_of)
    key = c.api_keys.replace_all(user)
    recipients = [{"email": f"r{i}@example.org"} for i in range(2)]
    body = {"subject": "Hi", "body": "<p>Hi</p>", "recipients": recipients}
    missing = _api(stack, key, "POST", "/campaigns", body)
    assert missing.status_code == 400 and "Idempotency-Key" in missing.json()["detail"]
    upload = _upload(stack, key, _csv(301))
    over = _api(
        stack,
        key,
        "POST",
        "/campaigns",
        {**body, "recipients": None, "uploadId": upload["id"]} | {},
        **{"Idempotency-Key": "k1"},
    )
    assert over.status_code == 400  # recipients and uploadId both named
    del body["recipients"]
    over = _api(stack, key, "POST", "/campaigns", {**body, "uploadId": upload["id"]}, **{"Idempotency-Key": "k2"})
    assert over.status_code == 409, over.text
    assert (over.json()["recipients"], over.json()["dailyCap"], over.json()["usedToday"]) == (301, 300, 0)
    time.sleep(1)
    assert wiring.container().uploads.send(user, "anything") is None


def test_s3_refuses_an_upload_the_presigned_form_does_not_allow(stack, uid):
    _user, key = _paid_tenant(stack, uid)
    form = _api(stack, key, "POST", "/uploads", {"filename": "x.csv"}).json()["form"]
    other_type = {**form["fields"], "Content-Type": "text/html"}
    answer = requests.post(form["url"], data=other_type, files={"file": ("x.csv", b"email\n")}, timeout=30)
    assert answer.status_code == 403 and b"Policy Condition failed" in answer.content
    other_key = {**form["fields"], "key": form["fields"]["key"].replace("/file", "/other")}
    answer = requests.post(form["url"], data=other_key, files={"file": ("x.csv", b"email\n")}, timeout=30)
    assert answer.status_code == 403 and b"Policy Condition failed" in answer.content
    empty = requests.post(form["url"], data=form["fields"], files={"file": ("x.csv", b"")}, timeout=30)
    assert empty.status_code == 400 and b"EntityTooSmall" in empty.content


def test_a_preview_renders_an_uploads_row_as_precompile_would_and_shows_a_templates_error_where_it_is(stack, uid):
    _user, key = _paid_tenant(stack, uid)
    upload = _upload(stack, key, b"email,name\r\nann@example.org,<b>Ann</b>\r\nbob@example.org,Bob\r\n")
    given = {"subject": "Hi {{ name }}", "body": "<p>Dear {{ name }}</p>", "uploadId": upload["id"], "row": 0}
    shown = _api(stack, key, "POST", "/campaigns/preview", given).json()
    assert shown["subject"] == "Hi <b>Ann</b>" and shown["html"] == "<p>Dear &lt;b&gt;Ann&lt;/b&gt;</p>"
    assert shown["recipient"] == {"email": "ann@example.org", "metadata": {"name": "<b>Ann</b>"}}
    assert _api(stack, key, "POST", "/campaigns/preview", {**given, "row": 1}).json()["subject"] == "Hi Bob"
    broken = _api(stack, key, "POST", "/campaigns/preview", {**given, "body": "<p>\n{% if %}</p>"}).json()
    assert broken["html"] is None and broken["error"].startswith("body, line 2, column")
    past = _api(stack, key, "POST", "/campaigns/preview", {**given, "row": 2})
    assert past.status_code == 400 and "first 2 recipients" in past.json()["detail"]
    listed = _api(stack, key, "GET", "/uploads").json()["uploads"]
    assert [u["id"] for u in listed] == [upload["id"]] and listed[0]["report"]["recipients"] == 2


def test_inline_recipients_are_sent_and_a_bad_one_refuses_the_request_naming_it(stack, uid):
    user, key = _paid_tenant(stack, uid)
    bad = {"subject": "Hi", "body": "<p>Hi</p>", "recipients": [{"email": "ann@example.org"}, {"email": "nope"}]}
    refused = _api(stack, key, "POST", "/campaigns", bad, **{"Idempotency-Key": "bad-1"})
    assert refused.status_code == 400 and "recipients[1].email: not an email address" in refused.json()["detail"]
    broken = {**bad, "recipients": bad["recipients"][:1], "body": "{% if %}"}
    refused = _api(stack, key, "POST", "/campaigns", broken, **{"Idempotency-Key": "bad-2"})
    assert refused.status_code == 400 and refused.json()["detail"].startswith("template: body, line 1")
    good = {**bad, "recipients": [{"email": "ann@example.org"}, {"email": "ANN@example.org"}]}
    sent = _api(stack, key, "POST", "/campaigns", good, **{"Idempotency-Key": "good-1"})
    assert sent.status_code == 201 and sent.json()["publication"]["recipients"] == 1 and sent.json()["uploadId"] is None
    assert eventually(
        lambda: [s["to"] for s in read_sends(stack.config.outbox) if s["userId"] == user] == ["ann@example.org"],
        timeout=60,
    )


def test_refused_rows_download_with_formula_cells_made_text(stack, uid):
    _user, key = _paid_tenant(stack, uid)
    upload = _upload(stack, key, b'email,name\r\n=HYPERLINK("http://evil.example"),x\r\n+1@x,y\r\n')
    assert upload["report"]["refused"] == 2
    text = requests.get(upload["refusedRowsUrl"], timeout=30).text
    assert "'=HYPERLINK" in text and "'+1@x" in text and "\n=" not in text
