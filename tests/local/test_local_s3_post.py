"""S3's browser-based upload on the local stack, held to its presigned policy as S3's documentation
(sigv4-HTTPPOSTConstructPolicy) says: each condition (exact, starts-with, content-length-range), every form
field covered by one, and the expiry; what passes is stored as S3 stores it, and read back whole (a HEAD's
answer has its object's length and no body)."""

from __future__ import annotations

import time

import pytest
import requests

pytestmark = pytest.mark.e2e


def _form(stack, key="uploads/t/x/file", conditions=None, expires=60):
    s3 = stack.client("s3")
    bucket = stack.settings.resources.payload_bucket.name
    given = conditions if conditions is not None else [["content-length-range", 1, 10], {"Content-Type": "text/csv"}]
    form = s3.generate_presigned_post(
        Bucket=bucket, Key=key, Fields={"Content-Type": "text/csv"}, Conditions=given, ExpiresIn=expires
    )
    return s3, bucket, form


def _post(form, content=b"email\n", **changed):
    return requests.post(form["url"], data={**form["fields"], **changed}, files={"file": ("f", content)}, timeout=30)


def test_a_form_within_its_policy_is_stored_and_read_back_whole(stack):
    s3, bucket, form = _form(stack)
    assert _post(form).status_code == 204
    assert s3.head_object(Bucket=bucket, Key="uploads/t/x/file")["ContentLength"] == 6
    assert s3.get_object(Bucket=bucket, Key="uploads/t/x/file")["Body"].read() == b"email\n"


def test_a_file_outside_the_size_range_is_refused_with_s3s_code(stack):
    _s3, _bucket, form = _form(stack)
    too_big = _post(form, b"x" * 11)
    assert too_big.status_code == 400 and b"<Code>EntityTooLarge</Code>" in too_big.content
    empty = _post(form, b"")
    assert empty.status_code == 400 and b"<Code>EntityTooSmall</Code>" in empty.content


def test_a_field_that_fails_its_condition_or_has_none_is_access_denied_naming_it(stack):
    _s3, _bucket, form = _form(stack, conditions=[["starts-with", "$Content-Type", "text/"]])
    assert _post(form, **{"Content-Type": "text/plain"}).status_code == 204  # within its prefix
    outside = _post(form, **{"Content-Type": "application/json"})
    assert outside.status_code == 403
    assert b'Policy Condition failed: ["starts-with", "$Content-Type", "text/"]' in outside.content
    moved = _post(form, key="uploads/t/other")  # boto3's policy names the key exactly
    assert moved.status_code == 403 and b'Policy Condition failed: ["eq", "$key", "uploads/t/x/file"]' in moved.content
    extra = _post(form, **{"x-amz-meta-note": "hi"})
    assert extra.status_code == 403 and b"Extra input fields: x-amz-meta-note" in extra.content
    assert _post(form, **{"x-ignore-note": "hi"}).status_code == 204


def test_an_expired_form_is_refused(stack):
    _s3, _bucket, form = _form(stack, expires=1)
    time.sleep(2.1)
    expired = _post(form)
    assert expired.status_code == 403 and b"Policy expired" in expired.content


def test_a_form_without_a_policy_is_an_anonymous_write_and_refused(stack):
    _s3, _bucket, form = _form(stack)
    unsigned = {"key": "uploads/t/x/other", "Content-Type": "text/csv"}
    answer = requests.post(form["url"], data=unsigned, files={"file": ("f", b"email\n")}, timeout=30)
    assert answer.status_code == 403 and b"<Code>AccessDenied</Code>" in answer.content
