"""The demo's digest tenant: items from two producers through the week, one email per reader.

Hooli (a paid tenant, its own SES account) defines a weekly digest; a "shows" producer and an "artworks"
producer publish items for its readers (one item sent by both, one retracted), batched as a producer
would. Then the digest's EventBridge schedule fires (the demo fires it for the current minute, as
Scheduler would on Wednesday at 13:00 UTC); every reader with items gets one email with all of theirs,
and a second firing for the same period mails nothing more.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chalicelib import wiring
from chalicelib.digest.assembly import campaign_id, period_of
from infra.local.stack import LocalStack
from infra.producer import publish

USER, DIGEST, READERS = "hooli", "weekly-shows", 12
ACCESS_KEY = "AKIADEMOHOOLI000001"
DEFINITION = {
    "id": DIGEST,
    "subject": "{{ name }}, {{ items_total }} new this week",
    "body": (
        "<html><body><h1>Hi {{ name }},</h1><p>{{ items_total }} new near you:</p><ul>"
        "{% for item in items %}<li>{{ item.data.title }} ({{ item.type }}, {{ item.at | slice: 0, 10 }})</li>"
        "{% endfor %}</ul></body></html>"
    ),
    "schedule": "cron(0 13 ? * WED *)",
    "window": "P7D",
    "maxItems": 20,
}


@dataclass(frozen=True)
class DigestDemo:
    readers: int
    items_published: int
    emails: int
    items_mailed: int
    second_run_emails: int
    ok: bool


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _items(now: float) -> list[dict[str, Any]]:
    """Each reader's items of both producers: reader i has i % 3 + 1 shows and one artwork."""
    out = []
    for i in range(READERS):
        email, name = f"reader.{i}@hooli-readers.example", f"Reader {i}"
        items = [
            {
                "id": f"show-{i}-{k}",
                "type": "NearbyShow",
                "at": _iso(now - (k + 1) * 3600),
                "data": {"title": f"Show {k}"},
            }
            for k in range(i % 3 + 1)
        ]
        items.append({"id": f"art-{i}", "type": "NewArtwork", "at": _iso(now - 1800), "data": {"title": "An artwork"}})
        out.append({"email": email, "metadata": {"name": name}, "items": items})
    return out


def run_digest_demo(stack: LocalStack, timeout_s: float = 60.0) -> DigestDemo:
    assert stack.ses is not None and stack.settings is not None and stack.schedules is not None
    secret = f"demo-secret-{USER}"
    stack.ses.configure(ACCESS_KEY, max_send_rate=20)
    sender = {
        "region": "us-east-1",
        "apiKey": ACCESS_KEY,
        "apiSecret": secret,
        "ratePerSecond": "10",
        "emailAddress": f"digest@{USER}.example",
        "fromName": "Hooli Weekly",
    }
    ses = stack.client("sesv2", access_key=ACCESS_KEY, secret_key=secret)
    ses.create_email_identity(EmailIdentity=sender["emailAddress"])
    sns, topic = stack.client("sns"), stack.topic_arns[stack.settings.resources.precompile_topic.name]
    c = wiring.container()
    publish(sns, topic, [json.dumps({"userId": USER, "sender": sender, "digest": DEFINITION})])
    _until(lambda: (s := c.digests.state(USER, DIGEST)) is not None and s.scheduled is not None, timeout_s)

    now = time.time()
    readers = _items(now)
    shows = [{**r, "items": [i for i in r["items"] if i["type"] == "NearbyShow"]} for r in readers]
    art = [{**r, "items": [i for i in r["items"] if i["type"] == "NewArtwork"]} for r in readers]
    art[0]["items"].append(shows[0]["items"][0])  # the same item from the other producer: stored once
    envelope = {"userId": USER, "digest": {"id": DIGEST}}
    publish(sns, topic, [json.dumps({**envelope, "recipients": part}) for part in (shows, art)])
    publish(sns, topic, [json.dumps({**envelope, "retract": "art-1"})])  # withdrawn before the run
    published = sum(len(r["items"]) for r in readers)
    _until(lambda: sum(len(r.items) for r in c.digests.recipients(USER, DIGEST)) == published, timeout_s)
    _until(lambda: "art-1" in c.digests.retracted(USER, DIGEST), timeout_s)

    schedule = c.digest_schedules.get(USER, DIGEST)
    assert schedule is not None
    minute = float(int(time.time()) // 60 * 60)
    stack.schedules.fire(schedule, minute)  # as Scheduler does at the schedule's time
    stack.runner.wait_idle(timeout_s) if stack.runner else None
    stack.wait_until_drained(timeout_s)
    cid = campaign_id(DIGEST, period_of(minute))
    counts = c.stats.get(USER, cid)
    first = c.digests.state(USER, DIGEST)
    stack.schedules.fire(schedule, minute)  # a second firing for the same period (a retry): nothing more
    stack.runner.wait_idle(timeout_s) if stack.runner else None
    stack.wait_until_drained(timeout_s)
    second = c.digests.state(USER, DIGEST)
    emails = sorted((stack.config.outbox / USER / cid).glob("*.eml"))
    last_first = (first.last_run or {}) if first else {}
    last_second = (second.last_run or {}) if second else {}
    mailed = int(last_first.get("items_mailed", 0))
    ok = (
        len(emails) == READERS
        and counts is not None
        and counts["sent"] == READERS
        and mailed == published - 1  # all but the retracted one
        and last_second.get("emails") == 0
    )
    return DigestDemo(READERS, published, len(emails), mailed, int(last_second.get("emails", -1)), ok)


def _until(condition: Any, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("the digest demo timed out")
        time.sleep(0.1)
