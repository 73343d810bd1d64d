"""`moonsend upload` and `moonsend campaign send`: the operator's way to send without code, through the same
service the API's routes call (chalicelib.control.campaign_sends): the file goes to S3 by the presigned form,
as a browser's would, is read by upload_jobs, and a campaign is sent to its recipients."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from urllib3 import encode_multipart_formdata

from chalicelib.api.answers import answer_of
from infra.terminal import plain

READ_WAIT_S = 900.0


def post_form(form: dict[str, Any], filename: str, content: bytes) -> None:
    """The file POSTed to S3 with the form's fields first, as S3's browser-based upload takes it."""
    fields: list[tuple[str, Any]] = [*form["fields"].items(), ("file", (filename, content))]
    body, content_type = encode_multipart_formdata(fields)
    request = urllib.request.Request(form["url"], body, {"Content-Type": content_type}, method="POST")
    with urllib.request.urlopen(request, timeout=300) as answer:
        answer.read()


def upload(c: Any, user: str, path: Path, kind: str, column: str | None) -> int:
    """Upload `path`, read it, and print its report; 0 when it was read."""
    given = {"format": kind, "filename": path.name[:200], **({"addressColumn": column} if column else {})}
    made = answer_of(lambda: c.campaign_sends.new_upload(user, given), 201)
    if made.status >= 400:
        print(f"upload: {plain(made.body['error'])}", file=sys.stderr)
        return 2 if made.status == 400 else 1
    upload_id = made.body["id"]
    post_form(made.body["form"], path.name, path.read_bytes())
    c.campaign_sends.read_upload(user, upload_id, None)
    end = time.monotonic() + READ_WAIT_S
    shown = c.campaign_sends.show_upload(user, upload_id)
    while shown["state"] == "reading" and time.monotonic() < end:
        time.sleep(0.5)
        shown = c.campaign_sends.show_upload(user, upload_id)
    report = shown.get("report") or {}
    if shown["state"] != "read":
        print(f"upload {upload_id}: {shown['state']}: {plain(shown.get('problem') or '')}", file=sys.stderr)
        return 1
    print(
        f"upload {upload_id}: {report['rows']:,} rows, {report['recipients']:,} recipients, "
        f"{report['duplicates']:,} duplicates removed, {report['refused']:,} refused, "
        f"{report['suppressed']:,} on the suppression list"
    )
    for row in report.get("refusedRows", [])[:10]:
        print(f"  line {row['line']}: {plain(row['reason'])}", file=sys.stderr)
    if shown.get("refusedRowsUrl"):
        print(f"refused rows (CSV, 5 minutes): {shown['refusedRowsUrl']}", file=sys.stderr)
    return 0


def send(c: Any, user: str, given: dict[str, Any], key: str | None) -> int:
    """Send a campaign (`given` as POST /campaigns takes it) and print its id and publication."""
    answer = answer_of(lambda: c.campaign_sends.create(user, given, key or str(uuid.uuid4())), 201)
    if answer.status >= 400:
        print(f"campaign send: {plain(answer.body['error'])}", file=sys.stderr)
        return 2 if answer.status == 400 else 1
    body = answer.body
    print(json.dumps(body, indent=2))
    print(f"follow it: moonsend campaign show --user {user} --id {body['id']}", file=sys.stderr)
    return 0
