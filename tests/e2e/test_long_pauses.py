"""A pause has no time limit: parked email outlives the payload bucket's lifecycle, whatever the pause's length.

Parked email was stored under `scheduled/`, whose objects the bucket's lifecycle deletes after 45 days (the
longest a campaign can be scheduled ahead, and a margin); a campaign paused longer lost its parked email, and
every resume of it failed. Parked bodies now go under `parked/`, which no rule expires.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest

from chalicelib import wiring
from chalicelib.core.contract import QueuedEmail
from chalicelib.core.resources import PARKED_PREFIX, SCHEDULED_PREFIX
from chalicelib.core.routing import queue_for
from chalicelib.queueing.parked_email import ParkedEmail, keep_parked, parked_bucket
from chalicelib.stores.schedule import ScheduleStore
from infra.cfn import merge_template
from tests.e2e.test_scheduling import _store
from tests.fakes import parts

pytestmark = pytest.mark.e2e


def _emails(user: str, campaign: str, n: int = 3) -> list[tuple[str, str]]:
    return [
        (e, QueuedEmail(user, "paid", {}, campaign, "S", "B", e).to_json())
        for e in (f"r{i}@{campaign}.example" for i in range(n))
    ]


def _park(store: ScheduleStore, user: str, campaign: str, n: int = 3):
    c = wiring.container()
    queue = queue_for(c.settings.resources, user, "paid")
    parked = ParkedEmail(store, c.email_queue, parts.Starts())
    return parked.park(user, campaign, "paid", queue, _emails(user, campaign, n))


def _expire(stack, key: str) -> None:
    """What the bucket's lifecycle does to an object past its days."""
    stack.client("s3").delete_object(Bucket=wiring.container().settings.resources.payload_bucket.name, Key=key)


def _purge(stack, user: str) -> None:
    sqs = stack.client("sqs")
    name = queue_for(wiring.container().settings.resources, user, "paid")
    with contextlib.suppress(sqs.exceptions.QueueDoesNotExist):
        sqs.purge_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])


def test_parked_email_is_kept_where_no_lifecycle_rule_expires_it(stack, uid):
    store, user = _store(stack, uid), f"p-{uid}"
    batch = _park(store, user, "paused")
    assert batch.body_key.startswith(PARKED_PREFIX)
    # The payload bucket's lifecycle rules as the stage's packaged app stack gives them to CloudFormation.
    template = merge_template("dev")
    bucket = template["Resources"][wiring.container().settings.resources.payload_bucket.logical_id]
    prefixes = [rule["Prefix"] for rule in bucket["Properties"]["LifecycleConfiguration"]["Rules"]]
    assert SCHEDULED_PREFIX in prefixes and not any(batch.body_key.startswith(p) for p in prefixes)


def test_a_resume_after_a_parked_body_expired_puts_back_the_rest_and_removes_the_lost_batch(stack, uid):
    # Parked before parked email had its own prefix, and paused past scheduled/'s 45 days: its body is gone.
    store, user = _store(stack, uid), f"p-{uid}"
    c = wiring.container()
    lost, kept = _park(store, user, "long", n=2), _park(store, user, "long", n=3)
    _expire(stack, lost.body_key)
    starts = parts.Starts()
    back = ParkedEmail(store, c.email_queue, starts).unpark(user, "long")
    assert back == 3  # the batch with a body went back; the other did not fail the resume
    assert store.parked(parked_bucket(user, "long")) == []  # neither is read again at the next resume
    assert [q for q, *_ in starts] == [kept.queue]  # and its drain started
    _purge(stack, user)


def test_keep_parked_moves_bodies_parked_under_the_lifecycle_and_a_resume_then_finds_them(stack, uid):
    store, user = _store(stack, uid), f"p-{uid}"
    c = wiring.container()
    emails = _emails(user, "old")
    # As parked before: the body under scheduled/, in a partition of parked email.
    old = store.put(
        user_id=user,
        campaign_id="old",
        plan="paid",
        queue=queue_for(c.settings.resources, user, "paid"),
        due_ms=0,
        deadline_ms=None,
        emails=emails,
        bucket=parked_bucket(user, "old"),
    )
    legacy = old.body_key.replace(PARKED_PREFIX, SCHEDULED_PREFIX, 1)
    s3, bucket = stack.client("s3"), c.settings.resources.payload_bucket.name
    s3.copy_object(Bucket=bucket, Key=legacy, CopySource={"Bucket": bucket, "Key": old.body_key})
    s3.delete_object(Bucket=bucket, Key=old.body_key)
    store._row(dataclasses.replace(old, body_key=legacy)).save()  # the row as it was written then

    kept, gone = keep_parked(store)
    assert (kept, gone) == (1, 0)
    (batch,) = store.parked(parked_bucket(user, "old"))
    assert batch.body_key.startswith(PARKED_PREFIX) and store.emails(batch) == emails
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=legacy)  # the old body is gone
    assert keep_parked(store) == (0, 0)  # safe to run again
    assert ParkedEmail(store, c.email_queue, parts.Starts()).unpark(user, "old") == 3
    _purge(stack, user)
