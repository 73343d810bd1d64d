"""The soak's scenarios: the background jobs and the actions that a campaign's sending alone never exercises,
run on the first stack beside its campaigns, under the same faults, each with its own checks.

- **A digest**, one run killed without its `finally`: readers with items from two producers (one item sent by
  both, one retracted), its schedule fired twice for one period (Scheduler's at-least-once); the fault plan
  kills run_digest at one of its enqueues (`digest_kill`). Every reader gets one email carrying each of its
  items once, the retracted one in none.
- **A double reschedule**: a scheduled campaign moved twice at once (a double click, a retried request) to
  two later times, and another tenant's campaign scheduled after both. Every recipient is mailed once, none
  at the time the tenant moved away from, and the later campaign goes out (the releaser is not pinned).
- **A retry-failed during a backlog**: a tenant's SES account fails every send until its first campaign's
  recipients are recorded failed and dead-lettered; then a second campaign is published, retry-failed asked
  over the API while that backlog drains, and the dead-letter reconciler run as it would run an hour on. The
  reconciler records none of the retried recipients failed, and each is mailed once.
"""

from __future__ import annotations

import email
import email.policy
import json
import re
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from infra.status import max_in_window


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _until(condition: Any, timeout_s: float, poll_s: float = 1.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(poll_s)
    return bool(condition())


@dataclass
class Outcome:
    """A scenario's report: its figures, the promises it found broken, and what was unfinished in time."""

    report: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)


class Scenario:
    name = ""
    recipients = 0  # emails it expects to send, for the soak's progress line

    def prepare(self, stack: Any) -> None:
        """Before the faults and the campaigns: identities, definitions."""

    def install(self, stack: Any) -> None:
        """After the fault plan is installed: faults of its own."""

    def script(self, stack: Any) -> None:
        """Run in a thread started just before the campaigns are published; returns when its part is done."""

    def check(self, stack: Any, sends: list[dict[str, Any]]) -> Outcome:
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------------------------------
    def __init__(self) -> None:
        self.errors: list[str] = []  # what its script raised: a failure of the soak
        self._thread: threading.Thread | None = None

    def start(self, stack: Any) -> None:
        def run() -> None:
            try:
                self.script(stack)
            except Exception as exc:  # reported by check: a scenario that could not play is a failed soak
                self.errors.append(f"{type(exc).__name__}: {exc}")

        self._thread = threading.Thread(target=run, name=f"scenario-{self.name}", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        if self._thread is not None:
            self._thread.join(max(0.0, timeout_s))
            return not self._thread.is_alive()
        return True


def _paid(stack: Any, user: str, rate: float) -> dict[str, Any]:
    return stack.paid_sender(user, rate=rate, ses_max_rate=rate * 2 + 10)


def _once_each(sends: list[dict[str, Any]], user: str, campaign: str) -> Counter[str]:
    return Counter(str(s["to"]).lower() for s in sends if s["userId"] == user and s["campaignId"] == campaign)


def _rate_failures(sends: list[dict[str, Any]], user: str, rate: float) -> list[str]:
    ts = [int(s["ts"]) for s in sends if s["userId"] == user]
    peak = max_in_window(ts, 1000) if len(ts) > 1 else len(ts)
    return [f"{user}: {peak} sends in one second, above its rate of {rate:g}"] if peak > rate else []


def _failed_or_dead_lettered(stack: Any, user: str, campaign: str, n: int) -> bool:
    """Whether each of the campaign's `n` recipients is recorded failed, or its message is in the stage's
    dead-letter queue (moved there by SQS with no outcome recorded, as when its drain died at that receive)."""
    states = _states(user, campaign)
    dead = _dead_lettered(stack, user, campaign)
    return len(states) >= n and all(state == "failed" or address in dead for address, state in states.items())


def _dead_lettered(stack: Any, user: str, campaign: str) -> set[str]:
    """The campaign's recipients whose message is in the stage's dead-letter queue (read off the stand-in's
    queue, without receiving: a receive would hide them from the reconciler)."""
    from moto.sqs.models import sqs_backends

    dlq = stack.settings.resources.dead_letter_queue.name
    queue = sqs_backends[stack.config.account_id][stack.config.region].queues.get(dlq)
    dead = set()
    for m in list(queue._messages) if queue is not None else []:
        try:
            d = json.loads(m.body)
            if d.get("userId") == user and d.get("campaign", {}).get("id") == campaign:
                dead.add(str(d.get("recipient", {}).get("email", "")).lower())
        except (ValueError, AttributeError):
            continue
    return dead


def _counted(user: str, campaign: str, state: str, n: int) -> bool:
    """Whether at least `n` of the campaign's recipients are recorded in `state`."""
    return list(_states(user, campaign).values()).count(state) >= n


def _states(user: str, campaign: str) -> dict[str, str]:
    from chalicelib import wiring

    return {e.email: e.state for e in wiring.container().ledger.entries(user, campaign)}


# --- a digest, one run killed -------------------------------------------------------------------------------
class DigestKilled(Scenario):
    name = "digest run killed without its finally"
    USER, DIGEST, READERS = "soak-d00", "soak-daily", 400
    RETRACTED = "show-3-0"

    def __init__(self) -> None:
        super().__init__()
        self.recipients = self.READERS
        self.minute = 0.0
        self.expected: dict[str, set[str]] = {}

    def _readers(self, now: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Each reader's shows (one producer) and artworks (the other); reader 0's first show from both."""
        shows, art = [], []
        for i in range(self.READERS):
            address, meta = f"reader{i:03d}@soak-d00.example", {"name": f"Reader {i}"}
            s = [
                {"id": f"show-{i}-{k}", "type": "Show", "at": _iso(now - 3600 * (k + 1)), "data": {"t": k}}
                for k in range(i % 3 + 1)
            ]
            a = [{"id": f"art-{i}", "type": "Art", "at": _iso(now - 1800), "data": {"t": "a"}}]
            if i == 0:
                a.append(s[0])
            shows.append({"email": address, "metadata": meta, "items": s})
            art.append({"email": address, "metadata": meta, "items": a})
            self.expected[address] = {x["id"] for x in s + a} - {self.RETRACTED}
        return shows, art

    def prepare(self, stack: Any) -> None:
        from chalicelib import wiring
        from infra.producer import publish

        sender = _paid(stack, self.USER, 20.0)
        definition = {
            "id": self.DIGEST,
            "subject": "{{ items_total }} new",
            "body": "<ul>{% for item in items %}<li>item:{{ item.id }}</li>{% endfor %}</ul>",
            "schedule": "cron(0 13 ? * WED *)",
            "window": "P7D",
            "maxItems": 20,
        }
        sns, topic = stack.client("sns"), stack.topic_arns[stack.settings.resources.precompile_topic.name]
        publish(sns, topic, [json.dumps({"userId": self.USER, "sender": sender, "digest": definition})])
        c = wiring.container()
        # The items only once the definition (with the sender) is in: SNS delivers messages in no order.
        if not _until(lambda: (s := c.digests.state(self.USER, self.DIGEST)) is not None and s.scheduled, 60):
            raise TimeoutError("the digest's definition was not stored within 60 s")
        shows, art = self._readers(time.time())
        envelope = {"userId": self.USER, "digest": {"id": self.DIGEST}}
        publish(sns, topic, [json.dumps({**envelope, "recipients": part}) for part in (shows, art)])
        publish(sns, topic, [json.dumps({**envelope, "retract": self.RETRACTED})])
        stored = sum(len(v) for v in self.expected.values()) + 1  # and the retracted one
        if not _until(lambda: sum(len(r.items) for r in c.digests.recipients(self.USER, self.DIGEST)) == stored, 120):
            raise TimeoutError("the digest's items were not all stored within 120 s")
        if not _until(lambda: self.RETRACTED in c.digests.retracted(self.USER, self.DIGEST), 60):
            raise TimeoutError("the retraction was not stored within 60 s")

    def script(self, stack: Any) -> None:
        from chalicelib import wiring
        from chalicelib.digest.assembly import campaign_id, period_of

        schedule = wiring.container().digest_schedules.get(self.USER, self.DIGEST)
        assert schedule is not None, "the digest's schedule was not put"
        self.minute = float(int(time.time()) // 60 * 60)
        stack.schedules.fire(schedule, self.minute)  # as Scheduler does at the schedule's time
        time.sleep(5)
        stack.schedules.fire(schedule, self.minute)  # and again: Scheduler invokes at least once
        cid = campaign_id(self.DIGEST, period_of(self.minute))
        if not _until(lambda: len(_states(self.USER, cid)) >= self.READERS, 600, poll_s=2.0):
            raise TimeoutError(f"the digest's run did not record every reader within 600 s ({cid})")

    def check(self, stack: Any, sends: list[dict[str, Any]]) -> Outcome:
        from chalicelib import wiring
        from chalicelib.digest.assembly import campaign_id, period_of
        from chalicelib.digest.status import DigestStatusReader

        out = Outcome()
        cid = campaign_id(self.DIGEST, period_of(self.minute))
        carried: dict[str, Counter[str]] = {}
        folder = Path(stack.config.outbox) / self.USER / cid
        for path in sorted(folder.glob("*.eml")) if folder.exists() else []:
            msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            to = str(msg["To"]).lower()
            part = msg.get_body(preferencelist=("html",))
            html = part.get_content() if part is not None else ""
            carried.setdefault(to, Counter()).update(re.findall(r"item:([\w-]+)", str(html)))
        emails = _once_each(sends, self.USER, cid)
        twice = sorted(a for a, n in emails.items() if n > 1)
        repeated = sorted(a for a, c in carried.items() if any(n > 1 for n in c.values()))
        lost = sorted(a for a, ids in self.expected.items() if set(carried.get(a, Counter())) != ids)
        retracted = sorted(a for a, c in carried.items() if self.RETRACTED in c)
        status = DigestStatusReader(wiring.container().digests).status(self.USER, self.DIGEST)
        pending = status.items_pending if status is not None else -1
        out.report = {
            "readers": self.READERS,
            "emails": sum(emails.values()),
            "readers_emailed_twice": len(twice),
            "readers_with_an_item_twice": len(repeated),
            "readers_missing_items": len(lost),
            "items_pending_after": pending,
            "last_run": (status.head.last_run if status is not None else None),
        }
        if twice or repeated:
            out.failures.append(f"digest: {len(twice)} readers emailed twice, {len(repeated)} got an item twice")
        if retracted:
            out.failures.append(f"digest: the retracted item mailed to {len(retracted)} readers")
        if lost:
            out.unfinished.append(f"digest: {len(lost)} readers without all their items (first: {lost[:3]})")
        out.failures += _rate_failures(sends, self.USER, 20.0)
        return out


# --- a double reschedule ------------------------------------------------------------------------------------
class DoubleReschedule(Scenario):
    name = "double reschedule"
    USER, LATER_USER, CAMPAIGN, PEOPLE = "soak-s00", "soak-s01", "moved-twice", 300

    def __init__(self) -> None:
        super().__init__()
        self.recipients = self.PEOPLE + 100
        self.t0 = 0.0
        self.targets: list[float] = []
        self.later_at = 0.0
        self.answers: list[str] = []

    def prepare(self, stack: Any) -> None:
        self.senders = {u: _paid(stack, u, 10.0) for u in (self.USER, self.LATER_USER)}

    def script(self, stack: Any) -> None:
        from chalicelib import wiring
        from infra.producer import CampaignSpec, messages, publish

        c = wiring.container()
        sns, topic = stack.client("sns"), stack.topic_arns[stack.settings.resources.precompile_topic.name]
        self.t0 = float(int(time.time()))  # whole seconds, as scheduledAt carries them
        # Far enough ahead that storing it under the soak's load and faults ends before the releaser's lead
        # (it releases a batch onto its queue, delayed, up to 90 s before its time): then it can be moved.
        first, self.later_at = self.t0 + 420, self.t0 + 660
        self.targets = [self.t0 + 540, self.t0 + 570]  # a change of mind and a retried request, at once
        for user, cid, at, n in (
            (self.USER, self.CAMPAIGN, first, self.PEOPLE),
            (self.LATER_USER, "after", self.later_at, 100),
        ):
            spec = CampaignSpec(
                user, self.senders[user], "S {{ name }}", "<p>B</p>", cid, options={"scheduledAt": _iso(at)}
            )
            people = [{"email": f"r{i}@{user}.example", "metadata": {"name": f"N{i}"}} for i in range(n)]
            publish(sns, topic, messages(spec, people, per_message=100))
        if not _until(partial(_counted, self.USER, self.CAMPAIGN, "scheduled", self.PEOPLE), 200, poll_s=2.0):
            raise TimeoutError("the campaign to reschedule was not stored within 200 s")

        def move(at: float) -> None:
            done = c.actions.reschedule(self.USER, self.CAMPAIGN, at)
            self.answers.append(f"{'ok' if done.ok else 'refused'}: {done.message}")

        threads = [threading.Thread(target=move, args=(at,)) for at in self.targets]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        finished = partial(_counted, self.LATER_USER, "after", "sent", 100)
        if not _until(finished, self.later_at - time.time() + 300, poll_s=2.0):
            raise TimeoutError("the campaign scheduled after the reschedule was not sent within 5 minutes")

    def check(self, stack: Any, sends: list[dict[str, Any]]) -> Outcome:
        out = Outcome()
        moved = _once_each(sends, self.USER, self.CAMPAIGN)
        later = _once_each(sends, self.LATER_USER, "after")
        moved_ts = [s["ts"] / 1000 for s in sends if s["userId"] == self.USER]
        later_ts = [s["ts"] / 1000 for s in sends if s["userId"] == self.LATER_USER]
        early = sum(1 for t in moved_ts if t < min(self.targets))
        out.report = {
            "answers": self.answers,
            "moved_campaign_emails": sum(moved.values()),
            "moved_first_after_target_s": round(min(moved_ts) - min(self.targets), 1) if moved_ts else None,
            "sent_before_the_new_time": early,
            "later_campaign_emails": sum(later.values()),
            "later_first_after_its_time_s": round(min(later_ts) - self.later_at, 1) if later_ts else None,
        }
        twice = sum(n - 1 for n in list(moved.values()) + list(later.values()) if n > 1)
        if twice:
            out.failures.append(f"reschedule: {twice} duplicate emails")
        if early:
            out.failures.append(f"reschedule: {early} emails sent before the time the tenant moved the campaign to")
        if any(t < self.later_at for t in later_ts):
            out.failures.append("reschedule: the later campaign was sent before its time")
        if len(moved) < self.PEOPLE or len(later) < 100:
            out.unfinished.append(f"reschedule: {len(moved)} of {self.PEOPLE} and {len(later)} of 100 mailed")
        for user in (self.USER, self.LATER_USER):
            out.failures += _rate_failures(sends, user, 10.0)
        return out


# --- a retry-failed during a backlog ------------------------------------------------------------------------
class RetryDuringBacklog(Scenario):
    name = "retry-failed during a backlog"
    USER, FAILING, BACKLOG = "soak-r00", 30, 600
    RATE = 5.0

    def __init__(self) -> None:
        super().__init__()
        self.recipients = self.FAILING + self.BACKLOG
        self.outage = False
        self.requeued: int | None = None
        self.reconciled_before: dict[str, int] = {}  # the outage's dead letters, before the retry
        self.reconciled: dict[str, int] = {}  # the same, while the retried copies wait behind the backlog
        self.phases_s: dict[str, int] = {}  # when each phase ended, from the outage's start

    def prepare(self, stack: Any) -> None:
        self.sender = _paid(stack, self.USER, self.RATE)
        self.access_key = self.sender["apiKey"]

    def install(self, stack: Any) -> None:
        """After the fault plan's: this tenant's SES account refuses every send while `outage` is on."""
        from infra.local.ses import Refused

        planned = stack.ses.fault

        def fault(access_key: str) -> Any:
            if self.outage and access_key == self.access_key:
                return Refused("transient", "Internal failure (an outage of this account).")
            return planned(access_key) if planned is not None else None

        stack.ses.fault = fault

    def script(self, stack: Any) -> None:
        from chalicelib import wiring

        c = wiring.container()
        sns, topic = stack.client("sns"), stack.topic_arns[stack.settings.resources.precompile_topic.name]
        self.outage = True
        self._publish(sns, topic, "first", self.FAILING)
        # Every try refused: each message backs off and, on its fifth receive, its recipient is recorded
        # failed and SQS moves it to the dead-letter queue (one whose drain died at that receive is moved
        # there with no outcome recorded: the reconciler's, an hour on, to record).
        # Five receives backed off 2, 4, 8 and 16 s, each drain started by the alarm's minute: 2 minutes on an
        # idle stack, over 7 under the soak's load (a 400 s wait ran out at 10,000 recipients).
        t0 = time.monotonic()
        if not _until(partial(_failed_or_dead_lettered, stack, self.USER, "first", self.FAILING), 900, poll_s=2.0):
            states = _states(self.USER, "first")
            raise TimeoutError(f"the outage's recipients were not all failed or dead-lettered in 900 s: {states}")
        self.outage = False
        self.phases_s["failed"] = round(time.monotonic() - t0)
        # Each failed one's message was made visible at its last try; the next receive moves it to the dead-letter
        # queue: its drain's, or, if that drain has ended, the next one the sweeper starts (a minute or more).
        dead = partial(_dead_lettered, stack, self.USER, "first")
        if not _until(lambda: len(dead()) >= self.FAILING, 300, poll_s=2.0):
            raise TimeoutError(f"{len(dead())} of the outage's messages in the dead-letter queue after 300 s")
        self.phases_s["dead-lettered"] = round(time.monotonic() - t0)
        self.reconciled_before = self._reconcile_an_hour_on(stack)
        self._publish(sns, topic, "second", self.BACKLOG)  # the backlog: 120 s at its rate
        if not _until(lambda: len(_states(self.USER, "second")) >= self.BACKLOG // 2, 120):
            raise TimeoutError("the backlog campaign was not taken in within 120 s")
        key = c.api_keys.replace_all(self.USER)
        self.requeued = self._retry_failed(stack.api_url, key)
        self.phases_s["retried"] = round(time.monotonic() - t0)
        self.reconciled = self._reconcile_an_hour_on(stack)
        # Sent behind the backlog, at the tenant's rate: as long as the stack takes (check() reports what was not
        # sent when the soak's time ran out as unfinished); no promise says how soon.
        _until(partial(_counted, self.USER, "first", "sent", self.FAILING), 3600, poll_s=2.0)
        self.phases_s["sent"] = round(time.monotonic() - t0)

    def _publish(self, sns: Any, topic: str, cid: str, n: int) -> None:
        from infra.producer import CampaignSpec, messages, publish

        spec = CampaignSpec(self.USER, self.sender, "S", "<p>B {{ name }}</p>", cid)
        people = [{"email": f"{cid}{i}@soak-r00.example", "metadata": {"name": f"N{i}"}} for i in range(n)]
        publish(sns, topic, messages(spec, people, per_message=100))

    def _retry_failed(self, api_url: str, key: str) -> int:
        req = urllib.request.Request(
            f"{api_url}/campaigns/first/retry-failed",
            data=b"{}",
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(json.loads(resp.read())["requeued"])

    def _reconcile_an_hour_on(self, stack: Any) -> dict[str, int]:
        """reconcile_dead_letters as it runs an hour on (its minimum age passed), on this tenant's dead
        letters: the stage's others are left for the soak's own check, seen again within 30 s."""
        from chalicelib import wiring
        from chalicelib.jobs.dead_letters import MIN_AGE_S, DeadLetterQueue, DeadLetters

        c = wiring.container()
        sqs = stack.client("sqs")
        dlq = c.settings.resources.dead_letter_queue.name
        ours = _TenantsOwn(sqs, self.USER)
        result = DeadLetters(
            c.settings,
            DeadLetterQueue(ours, dlq),
            c.ledger,
            c.recorder,
            c.payloads,
            c.failed_copies,
            clock=lambda: time.time() + MIN_AGE_S + 60,
        ).reconcile(remaining_ms=lambda: 600_000)
        ours.reveal()  # looked at, hidden for hours: seen again by the next look and by the soak's check
        return result.as_dict()

    def check(self, stack: Any, sends: list[dict[str, Any]]) -> Outcome:
        out = Outcome()
        first = _once_each(sends, self.USER, "first")
        second = _once_each(sends, self.USER, "second")
        states = Counter(_states(self.USER, "first").values())
        out.report = {
            "requeued": self.requeued,
            "phases_s": self.phases_s,
            "reconciler_an_hour_on_before_the_retry": self.reconciled_before,
            "reconciler_an_hour_on": self.reconciled,
            "first_campaign_states": dict(states),
            "emails": {"first": sum(first.values()), "second": sum(second.values())},
        }
        if self.reconciled.get("recorded_failed"):
            out.failures.append(
                f"retry: the reconciler recorded {self.reconciled['recorded_failed']} retried recipients failed"
            )
        if self.requeued != self.FAILING:
            out.failures.append(f"retry: {self.requeued} requeued of {self.FAILING} failed")
        if not self.reconciled.get("superseded"):
            out.failures.append(
                "retry: no dead letter of the outage reached the reconciler (the scenario did not play)"
            )
        twice = sum(n - 1 for n in list(first.values()) + list(second.values()) if n > 1)
        if twice:
            out.failures.append(f"retry: {twice} duplicate emails")
        if states.get("sent", 0) < self.FAILING:
            out.unfinished.append(f"retry: {states.get('sent', 0)} of {self.FAILING} retried recipients sent")
        out.failures += _rate_failures(sends, self.USER, self.RATE)
        return out


class _TenantsOwn:
    """An SQS client whose ReceiveMessage gives one tenant's messages only; the others go back, visible again
    30 s on (the reconciler hides what it receives for hours, and the soak's check reads them after)."""

    def __init__(self, sqs: Any, user: str) -> None:
        self._sqs, self._user = sqs, user
        self._given: list[tuple[str, str]] = []  # (queue url, receipt handle) of the tenant's messages given

    def reveal(self) -> None:
        """The tenant's messages given, visible again."""
        for url, handle in self._given:
            self._sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
        self._given.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        while True:
            got = self._sqs.receive_message(**kwargs).get("Messages", [])
            if not got:
                return {"Messages": []}
            ours = [m for m in got if _user_of(m["Body"]) == self._user]
            for m in got:
                if m not in ours:
                    self._sqs.change_message_visibility(
                        QueueUrl=kwargs["QueueUrl"], ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=30
                    )
            if ours:
                self._given.extend((kwargs["QueueUrl"], m["ReceiptHandle"]) for m in ours)
                return {"Messages": ours}


def _user_of(body: str) -> str | None:
    try:
        value = json.loads(body).get("userId")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def scenarios() -> list[Scenario]:
    return [DigestKilled(), DoubleReschedule(), RetryDuringBacklog()]
