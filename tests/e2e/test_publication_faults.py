"""A campaign's publication (upload_jobs) killed at every step on the local stack's tables and bucket, then
run again as Lambda's retry runs it: no recipient is skipped; killed at a step's boundary, no recipient is
published twice; killed between a publish and its record, only that one message is published again (and
precompile's ledger then queues none of its recipients twice: tests/e2e/test_send_from_upload.py)."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.produce import fanout
from chalicelib.produce.fanout import LEASE_S, Publication
from chalicelib.stores.upload_files import RECIPIENTS
from chalicelib.stores.uploads import PUBLISHED, PUBLISHING, Send

pytestmark = pytest.mark.e2e

RECIPIENT_COUNT = 40


class Killed(BaseException):
    """Lambda's kill: no `except Exception` sees it, no `finally` of ours is promised to finish."""


def _send(user: str, campaign: str) -> Send:
    c = wiring.container()
    upload_id = f"in_{campaign}"
    body = "".join(json.dumps({"email": f"r{i:02d}@example.org"}) + "\n" for i in range(RECIPIENT_COUNT))
    c.upload_files.keep(c.upload_files.key(user, upload_id, RECIPIENTS), body.encode(), "application/jsonl")
    envelope = {
        "userId": user,
        "userPlan": "free",
        "sender": {"emailAddress": "n@x.example"},
        "campaign": {"id": campaign},
    }
    now = time.time()
    send = Send(user, campaign, upload_id, PUBLISHING, envelope, 0, 0, RECIPIENT_COUNT, 0, now, now)
    assert c.uploads.start_send(send)
    return send


def _publication(published: list[list[str]], kill: Any, later_s: float = 0.0) -> Publication:
    """`later_s`: how much later than now its clock says it is (a retry comes after a killed one's lease)."""
    c = wiring.container()

    def publish(message: str) -> None:
        kill("before publish")
        published.append([r["email"] for r in json.loads(message)["recipients"]])
        kill("after publish")

    def control(_user: str, _campaign: str) -> None:
        kill("at a boundary")

    clock = lambda: time.time() + later_s  # noqa: E731
    return Publication(c.uploads, c.upload_files, control, publish, lambda *_: "proof", lambda *_: None, clock)


def _killer(where: str, at_step: int) -> Any:
    seen = Counter[str]()

    def kill(point: str) -> None:
        seen[point] += 1
        if point == where and seen[point] == at_step + 1:
            raise Killed(f"{where} of step {at_step}")

    return kill


@pytest.mark.parametrize("where", ["at a boundary", "before publish", "after publish"])
def test_a_publication_killed_at_each_step_and_run_again_publishes_every_recipient(stack, uid, monkeypatch, where):
    monkeypatch.setattr(fanout, "RECIPIENT_BYTES", 180)  # about 6 recipients a message: 7 steps
    everyone = [f"r{i:02d}@example.org" for i in range(RECIPIENT_COUNT)]
    steps = 0
    for step in range(12):
        user, campaign = f"pub-{uid}", f"c{step}-{where.replace(' ', '-')}"
        _send(user, campaign)
        published: list[list[str]] = []
        try:
            _publication(published, _killer(where, step)).run(user, campaign, "upload_jobs", lambda: 600_000)
            killed = False
        except Killed:
            killed = True
        if not killed:  # past the last step: nothing left to kill
            steps = step
            break
        before = len(published)
        # Lambda's retry: a minute or more later, past the killed invocation's lease.
        _publication(published, lambda _point: None, later_s=LEASE_S + 1).run(
            user, campaign, "upload_jobs", lambda: 600_000
        )
        counts = Counter(e for message in published for e in message)
        assert sorted(counts) == everyone, f"{where}, step {step}: a recipient skipped"
        twice = sorted(e for e, n in counts.items() if n > 1)
        if where == "after publish":  # that message's record was lost: it alone goes again
            assert twice == sorted(published[before - 1]) and published[before] == published[before - 1]
        else:
            assert twice == [], f"{where}, step {step}: published twice"
        final = wiring.container().uploads.send(user, campaign)
        assert final is not None and final.state == PUBLISHED and final.published >= RECIPIENT_COUNT
    assert steps >= 6  # every step of the publication was killed once


def test_a_publication_started_twice_is_published_by_one_invocation_at_a_time(stack, uid, monkeypatch):
    monkeypatch.setattr(fanout, "RECIPIENT_BYTES", 180)
    user, campaign = f"pub-{uid}", "started-twice"
    _send(user, campaign)
    published: list[list[str]] = []
    second: list[dict[str, Any]] = []

    def kill(point: str) -> None:  # the second invocation starts while the first publishes its first message
        if point == "before publish" and not second:
            second.append(_publication(published, lambda _p: None).run(user, campaign, "upload_jobs", lambda: 600_000))

    _publication(published, kill).run(user, campaign, "upload_jobs", lambda: 600_000)
    assert second == [{"ran": False, "held": True}]
    counts = Counter(e for message in published for e in message)
    assert sorted(counts) == [f"r{i:02d}@example.org" for i in range(RECIPIENT_COUNT)] and set(counts.values()) == {1}


def test_a_publication_out_of_time_hands_on_to_a_fresh_invocation_that_finishes_it(stack, uid, monkeypatch):
    monkeypatch.setattr(fanout, "RECIPIENT_BYTES", 180)
    user, campaign = f"pub-{uid}", "handed-on"
    _send(user, campaign)
    published: list[list[str]] = []
    invoked: list[tuple[str, dict[str, str]]] = []
    c = wiring.container()

    def publish(message: str) -> None:
        published.append([r["email"] for r in json.loads(message)["recipients"]])

    runner = Publication(
        c.uploads, c.upload_files, lambda *_: None, publish, lambda *_: "p", lambda *a: invoked.append(a)
    )
    time_left = iter([600_000, 600_000, 10_000])
    first = runner.run(user, campaign, "moonsend-local-upload_jobs", lambda: next(time_left))
    assert first["continued"] is True and len(published) == 2
    assert invoked == [("moonsend-local-upload_jobs", {"job": "publish", "userId": user, "campaignId": campaign})]
    second = runner.run(user, campaign, "moonsend-local-upload_jobs", lambda: 600_000)
    assert second["continued"] is False
    assert sorted(e for m in published for e in m) == [f"r{i:02d}@example.org" for i in range(RECIPIENT_COUNT)]
    assert runner.run(user, campaign, "moonsend-local-upload_jobs", lambda: 600_000) == {"ran": False}
