"""The soak test: many tenants, many recipients, faults at a seed, and the promises checked at the end.

Paid tenants with rates spread from 1 to 200 per second (each with its own SES account, allowing more
than its rate, so that SES's own throttle does not hide an over-sending limiter) and free-plan tenants
(one large, published first, and small ones after it) publish campaigns through the whole local
pipeline: PrecompileEmail, the tenants' queues, the alarms, send_emails, the SES stand-in, its events
back through SNS and the events queue to ses_events. Recipients include invalid addresses, bounces and complaints, and a
few hostile messages go to the topic. Faults (`infra.local.faults`) are injected for the first
`--faults-for` seconds.

At the end it checks, and prints:
1. every recipient has exactly one ledger record, in a final state (sent, failed, rejected, ...);
2. the outbox holds exactly one email per recipient recorded sent, and none for anyone else;
3. per paid tenant, no one-second window (as SES saw the sends) holds more than its rate; and its
   achieved rate (reported: on this machine the local stack's CPU, not the rates, sets the pace);
4. free-plan fairness: how long each small free tenant waited, beside the large one's drain;
5. nothing is left in any queue but the dead-letter queue, and each dead letter's recipient has a
   recorded final state with a reason;
6. each hostile message is recorded once;
7. on the first stack, the scenarios of `bench/soak_scenarios.py` beside the campaigns: a digest whose run
   is killed without its `finally`, a campaign rescheduled twice at once, a retry-failed during a backlog
   with the dead-letter reconciler run an hour on (`--no-scenarios` leaves them out).
It exits non-zero if any check fails.

One Python process runs the pipeline on one core (the GIL), and the handlers of a real deployment
each have their own CPU; so the tenants are split over `--shards` local stacks side by side (one more
than the cores by default), each a whole pipeline in its own process, the free-plan tenants all on the first
(they share one queue). Their checks are merged into one report.

    python bench/soak.py [--seed 7] [--paid 40] [--free 10] [--recipients 100000] [--faults-for 480] [--shards 3]
    python bench/soak.py --table seed7.json seed8.json seed9.json   # earlier runs' --json, side by side
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOSTILE = [
    "{not json",
    "[]",
    json.dumps({"userId": "", "sender": {}, "campaign": {}, "recipient": {}}),
    json.dumps({"userId": "soak-hostile", "campaign": {"id": "x", "body": "{% if %}", "subject": "s"}}),
    json.dumps({"userId": "soak-hostile", "sender": {"emailAddress": "nope"}, "recipients": [None, 7]}),
]


@dataclass
class Tenant:
    user_id: str
    plan: str  # "paid" | "free"
    rate: float
    recipients: list[dict[str, Any]]
    campaign_id: str
    published_at: float = 0.0
    expected: set[str] = field(default_factory=set)  # ledger keys: lower-cased addresses


def _rates(paid: int) -> list[float]:
    """`paid` rates spread evenly on a log scale from 1 to 200 per second."""
    if paid == 1:
        return [1.0]
    return [float(round(200 ** (i / (paid - 1)))) for i in range(paid)]


def plan_tenants(paid: int, free: int, recipients: int) -> list[Tenant]:
    """Paid tenants get recipients in proportion to their rate (at least 20); free ones share 8%."""
    rates = _rates(paid)
    free_total = max(free * 10, int(recipients * 0.08)) if free else 0
    paid_total = recipients - free_total
    weights = sum(rates)
    counts = [max(20, int(paid_total * rate / weights)) for rate in rates]
    counts[-1] += max(0, paid_total - sum(counts))  # what rounding down left over: at least `recipients` in all
    tenants: list[Tenant] = []
    for k, (rate, n) in enumerate(zip(rates, counts, strict=True)):
        tenants.append(_tenant(f"soak-p{k:02d}", "paid", rate, n, k))
    if free:
        large = max(10, free_total - 10 * (free - 1))
        tenants.append(_tenant("soak-f00", "free", 0, large, 100))
        tenants += [_tenant(f"soak-f{k:02d}", "free", 0, 10, 100 + k) for k in range(1, free)]
    return tenants


def _tenant(user_id: str, plan: str, rate: float, n: int, k: int) -> Tenant:
    people: list[dict[str, Any]] = []
    for i in range(n):
        if i % 97 == 13:
            email = f"not-an-address-{k}-{i}"  # rejected at precompile
        elif i % 101 == 7:
            email = f"bounce-{k}-{i}@simulator.amazonses.com"  # sent, then bounces
        elif i == 3 and n < 200:
            # Sent, delivered, then a complaint. Only where the reputation guard does not count yet (under
            # 200 sends): one complaint in a few hundred is above its 0.1% limit, and would rightly pause
            # the tenant, holding its email until someone resumes it.
            email = f"complaint-{k}-{i}@simulator.amazonses.com"
        else:
            email = f"r{i}@{user_id}.example"
        people.append({"email": email, "metadata": {"name": f"N{i}", "surname": "S"}})
    t = Tenant(user_id, plan, rate, people, f"soak-{user_id}")
    t.expected = {p["email"].lower() for p in people}
    return t


# What a recipient rejected over the free plan's daily cap costs its stack, against one that is sent:
# it is rendered and recorded, but never sent, and has no SES events.
OVER_CAP_WORK = 0.2


def shard_of(tenants: list[Tenant], shards: int, free_cap: int | None = None) -> list[int]:
    """Which stack each tenant runs on: the free-plan ones all on the first (they share one queue), the
    paid ones each to the stack with the least work so far (largest first), so the stacks finish
    together. A free tenant's recipients beyond the daily cap (`free_cap`) are cheap: at 100,000
    recipients, counting them as sends left the first stack done 5 minutes before the second."""
    from chalicelib.core.config import Settings

    cap = Settings.from_env().free_daily_cap if free_cap is None else free_cap  # as the stacks will read it
    load = [0.0] * shards
    where = [0] * len(tenants)
    for t in tenants:
        if t.plan == "free":
            n = len(t.recipients)
            sent = min(n, cap) if cap > 0 else n
            load[0] += sent + OVER_CAP_WORK * (n - sent)
    for i in sorted((i for i, t in enumerate(tenants) if t.plan == "paid"), key=lambda i: -len(tenants[i].recipients)):
        k = min(range(shards), key=lambda k: load[k])
        where[i] = k
        load[k] += len(tenants[i].recipients)
    return where


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("MOONSEND_LOG_LEVEL", "ERROR")
    from bench.soak_scenarios import Scenario, scenarios
    from chalicelib import wiring
    from chalicelib.core.config import DRAINER_MAX_RATE
    from chalicelib.core.contract import QueuedEmail
    from chalicelib.stores.ledger_model import FINAL, UNATTRIBUTED, unattributed_day
    from infra.local.faults import FaultPlan, Faults
    from infra.local.stack import LocalStack, StackConfig
    from infra.producer import CampaignSpec, messages, publish
    from infra.status import max_in_window

    shard, shards = args.shard or 0, max(1, args.shards)
    everyone = plan_tenants(args.paid, args.free, args.recipients)
    where = shard_of(everyone, shards)
    tenants = [t for t, k in zip(everyone, where, strict=True) if k == shard]
    hostile = HOSTILE if shard == 0 else []
    extras: list[Scenario] = scenarios() if shard == 0 and args.scenarios else []
    total = sum(len(t.recipients) for t in tenants) + sum(x.recipients for x in extras)
    report: dict[str, Any] = {"seed": args.seed, "tenants": len(tenants), "recipients": total}
    if shards > 1:
        report["shard"] = f"{shard + 1} of {shards}"
    failures: list[str] = []
    out_of_time: list[str] = []  # what was left unfinished when the time limit came (not a broken promise)
    # A run that timed out leaves invocations in flight, which may still write to the outbox while the
    # directory is removed: that must not cost the report.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        outbox = Path(tmp)
        cfg = StackConfig(
            port=0,
            api_port=0,
            outbox=outbox,
            ses_latency_ms=50.0,
            free_rate=args.free_rate,
            # One drainer's most as deployed (the local stage's is 1,000): the fastest tenants run two.
            extra_env={
                "MOONSEND_CLAIM_HOLD_S": str(args.claim_hold),
                "MOONSEND_DRAINER_MAX_RATE": str(DRAINER_MAX_RATE),
            },
            worker_processes=args.worker_processes,
        )
        with LocalStack(cfg) as stack:
            assert stack.settings is not None and stack.ses is not None and stack.runner is not None
            prefix = stack.settings.resources.prefix
            faults = Faults(FaultPlan(seed=args.seed + 7919 * shard, until_s=args.faults_for), prefix)
            sns = stack.client("sns")
            topic = stack.topic_arns[stack.settings.resources.precompile_topic.name]
            specs: dict[str, CampaignSpec] = {}
            for t in tenants:
                if t.plan == "paid":
                    sender = stack.paid_sender(t.user_id, rate=t.rate, ses_max_rate=t.rate * 2 + 10)
                else:
                    sender = {
                        "region": stack.config.region,
                        "ratePerSecond": "1",
                        "emailAddress": f"news@{t.user_id}.example",
                        "fromName": f"{t.user_id} News",
                    }
                    stack.client("sesv2").create_email_identity(EmailIdentity=sender["emailAddress"])
                specs[t.user_id] = CampaignSpec(
                    t.user_id,
                    sender,
                    "Hello {{ name }}",
                    "<p>Dear {{ name }} {{ surname }}, this is {{ campaign.id | default: 'our news' }}.</p>",
                    t.campaign_id,
                    plan="free" if t.plan == "free" else None,
                )
            for x in extras:
                x.prepare(stack)
            ledger = wiring.container().ledger
            junk_before = sum(1 for _ in ledger.entries(UNATTRIBUTED, unattributed_day()))
            send_event_lags = _time_send_events_handed(stack) if args.worker_processes else _time_send_events()
            faults.install(stack)
            for x in extras:
                x.install(stack)
            workers = stack.runner.workers  # the functions' own processes, with --worker-processes
            wall0, cpu0 = time.monotonic(), time.process_time() + (workers.cpu_s() if workers else 0.0)
            # The scenarios first: on AWS precompile takes a stack's campaigns in within seconds, but here its
            # invocations queue behind each other for minutes, and a scenario published after them waited
            # there past its own limits (its campaign to reschedule not stored within 200 s). They still run
            # their steps under the campaigns' load and the faults.
            for x in extras:
                x.start(stack)
            for t in tenants:  # the large free tenant before the small ones
                t.published_at = time.time()
                publish(sns, topic, messages(specs[t.user_id], t.recipients, per_message=100))
            if hostile:
                publish(sns, topic, hostile)
            published_s = time.monotonic() - wall0
            print(f"published {total} recipients of {len(tenants)} tenants in {published_s:.0f} s", flush=True)
            drained = _wait(stack, args.timeout - (time.monotonic() - wall0), total)
            if extras:  # their scheduled campaigns are not on any queue until released: drained again after
                played = all([x.join(args.timeout - (time.monotonic() - wall0)) for x in extras])
                drained = _wait(stack, args.timeout - (time.monotonic() - wall0), total) and played
            wall = time.monotonic() - wall0
            cpu = time.process_time() + (workers.cpu_s() if workers else 0.0) - cpu0
            faults.uninstall()
            report.update(
                drained=drained,
                wall_s=round(wall),
                cpu_s=round(cpu),
                faults_injected=dict(sorted(faults.injected.items())),
                failed_async_events=len(stack.runner.stats.failed_events),
                invocations=stack.runner.stats.started,
                invocations_past_timeout=stack.runner.stats.overran,
                claim_hold_s=args.claim_hold,
                send_event_lag_s=_lag_summary(send_event_lags),
            )
            # What is unfinished when time ran out is not a broken promise: it goes to `out_of_time`, apart.
            unfinished = out_of_time if not drained else failures
            if not drained:
                out_of_time.append(f"the pipeline did not drain within the {args.timeout:.0f} s limit")

            # 1. one final state per recipient
            states: Counter[str] = Counter()
            sent_by_ledger: dict[str, set[str]] = {}
            open_by_ledger: dict[str, set[str]] = {}  # recipients whose record is not final yet
            missing, open_, extra = 0, 0, 0
            details: list[str] = []  # the first few of anything that failed a check, to start looking from
            over_cap: Counter[str] = Counter()  # recipients rejected over the free plan's daily cap
            other_rejects: Counter[str] = Counter()
            for t in tenants:
                entries = {e.email: e for e in ledger.entries(t.user_id, t.campaign_id)}
                for e in entries.values():
                    if e.state == "rejected":
                        if (e.reason or "").startswith("free plan daily cap"):
                            over_cap[t.user_id] += 1
                        else:
                            other_rejects[t.user_id] += 1
                extra += len(set(entries) - t.expected)
                for key in t.expected:
                    e = entries.get(key)
                    if e is None:
                        missing += 1
                    elif e.state not in FINAL:
                        open_ += 1
                        if len(details) < 20:
                            details.append(
                                f"not final: {t.user_id} {key} state={e.state} attempts/updated={e.updated_at}"
                            )
                    else:
                        states[e.state] += 1
                sent_by_ledger[t.user_id] = {k for k, e in entries.items() if e.state == "sent"}
                open_by_ledger[t.user_id] = {k for k, e in entries.items() if e.state not in FINAL}
            report["final_states"] = dict(sorted(states.items()))
            report["recipients_without_record"] = missing
            report["recipients_not_final"] = open_
            if missing or open_:
                unfinished.append(f"{missing} recipients unrecorded, {open_} not final")
            if extra:
                failures.append(f"{extra} unexpected records")

            # 2. the outbox: one email per sent recipient, none for anyone else
            sends = _read_sends(outbox)
            per: dict[str, Counter[str]] = defaultdict(Counter)
            for s in sends:
                per[s["userId"]][str(s["to"]).lower()] += 1
            duplicates = sum(n - 1 for c in per.values() for n in c.values() if n > 1)
            for user, c in per.items():
                for to, n in c.items():
                    if n > 1 and len(details) < 40:
                        ids = [s["messageId"] for s in sends if s["userId"] == user and str(s["to"]).lower() == to]
                        ts = [s["ts"] for s in sends if s["userId"] == user and str(s["to"]).lower() == to]
                        details.append(f"duplicate: {user} {to} x{n} at {ts} ids {ids}")
            # An email in the outbox whose recipient is not final yet was sent and its record is on its way
            # (the sender mid-record, or SES's Send event still queued): unfinished when the time came, not
            # a broken promise. Anything else that differs is one.
            mismatched = on_their_way = 0
            for t in tenants:
                differ = set(per[t.user_id]) ^ sent_by_ledger[t.user_id]
                waiting = {k for k in differ if k in per[t.user_id] and k in open_by_ledger[t.user_id]}
                on_their_way += len(waiting)
                mismatched += len(differ - waiting)
            if on_their_way:
                unfinished.append(f"{on_their_way} recipients sent whose record was still on its way")
            report["emails_in_outbox"] = len(sends)
            report["unique_sent_recipients"] = sum(len(v) for v in sent_by_ledger.values())
            report["duplicate_emails"] = duplicates
            if duplicates or mismatched:
                failures.append(
                    f"{duplicates} duplicate emails; {mismatched} recipients where outbox and ledger differ"
                )

            # 3. the rate, as SES saw it
            rates = []
            by_user_ts: dict[str, list[int]] = defaultdict(list)
            for s in sends:
                by_user_ts[s["userId"]].append(int(s["ts"]))
            for t in tenants:
                ts = by_user_ts.get(t.user_id, [])
                if t.plan != "paid" or len(ts) < 2:
                    continue
                peak = max_in_window(ts, 1000)
                span = (max(ts) - min(ts)) / 1000
                achieved = (len(ts) - 1) / span if span > 0 else math.inf
                # The middle 80% of its sends: the pace while it was sending, without the tail of emails
                # that waited out a fault (a dead sender's claims, a killed drain's invisible messages).
                ordered = sorted(ts)
                lo, hi = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]
                middle = (len(ordered) * 9) // 10 - len(ordered) // 10
                pace = middle / ((hi - lo) / 1000) if hi > lo else math.inf
                rates.append(
                    {
                        "tenant": t.user_id,
                        "rate": t.rate,
                        "max_in_1s": peak,
                        "achieved": round(achieved, 2),
                        "achieved_middle_80pct": round(pace, 2),
                    }
                )
                if peak > t.rate:
                    failures.append(f"{t.user_id}: {peak} sends in one second, above its rate of {t.rate:g}")
            report["rates"] = rates

            # 4. free-plan fairness
            free = [t for t in tenants if t.plan == "free"]
            if free:
                fair = []
                for t in free:
                    ts = by_user_ts.get(t.user_id, [])
                    fair.append(
                        {
                            "tenant": t.user_id,
                            "recipients": len(t.recipients),
                            "sent": len(ts),
                            "first_after_s": round(min(ts) / 1000 - t.published_at, 1) if ts else None,
                            "last_after_s": round(max(ts) / 1000 - t.published_at, 1) if ts else None,
                        }
                    )
                report["free_plan"] = fair
                # The daily cap counts each recipient once, whatever was redelivered or retried: exactly
                # the recipients beyond the cap are rejected for it (the soak runs within one UTC day).
                cap = stack.settings.free_daily_cap
                for t, row in zip(free, fair, strict=True):
                    allowed = len(t.expected) - other_rejects[t.user_id]
                    want = max(0, allowed - cap) if cap > 0 else 0
                    row["over_daily_cap"] = over_cap[t.user_id]
                    if over_cap[t.user_id] != want:
                        failures.append(
                            f"{t.user_id}: {over_cap[t.user_id]} rejected over the daily cap of {cap}, "
                            f"expected {want} (the cap was spent on something other than its recipients)"
                        )

            # 4b. no tenant paused: the recipients are made so that the reputation guard never has cause
            # (1% bounces, complaints only below its minimum volume); a pause parks a tenant's email.
            ours = {t.user_id for t in tenants}
            paused = [(u, why) for u, why in wiring.container().tenants.paused() if u in ours]
            report["paused_tenants"] = [f"{u}: {why}" for u, why in paused]
            for u, why in paused:
                failures.append(f"{u} was paused ({why}); its email is parked")

            # 5. queues empty but the DLQ; each dead letter recorded with a reason
            depths = stack.queue_depths()
            dlq = stack.settings.resources.dead_letter_queue.name
            left = {n: v for n, v in depths.items() if n != dlq and sum(v)}
            if left:
                unfinished.append(f"messages left in queues: {left}")
                details.extend(_stall_diagnosis(stack, sorted(left)))
                details.extend(_left_messages(stack, sorted(left))[:30])
            dead = _dead_letters(stack, dlq)
            unexplained = 0
            for body in dead:
                try:
                    q = QueuedEmail.from_json(body)
                    e = ledger.get(q.user_id, q.campaign_id, q.recipient_email)
                    ok = e is not None and e.state in FINAL and bool(e.reason or e.state == "sent")
                except Exception:
                    ok = False
                unexplained += not ok
                if not ok and len(details) < 60:
                    details.append(f"dead letter without an outcome: {body[:200]}")
            report["dead_letters"] = len(dead)
            report["details"] = details
            if unexplained:
                failures.append(f"{unexplained} dead letters without a recorded final state and reason")

            # 6. hostile messages recorded once each
            junk = sum(1 for _ in ledger.entries(UNATTRIBUTED, unattributed_day())) - junk_before
            junk += sum(1 for _ in ledger.entries("soak-hostile", "x"))  # a tenant and campaign, but no sender
            report["hostile_messages_recorded"] = junk
            if junk != len(hostile):
                failures.append(f"{junk} of {len(hostile)} hostile messages recorded")

            # 8. what a tenant reads follows the ledger: counters (after the recount) and GET /events
            followed = _what_tenants_read(stack, [(t.user_id, t.campaign_id) for t in tenants])
            report["tenants_read"] = followed
            if followed["counters_differing_after_recount"]:
                failures.append(f"counters differ from the ledger after the recount: {followed['differing_after']}")
            if followed["events_missing"]:
                failures.append(f"{followed['events_missing']} events in the ledger missing from GET /events")

            # 7. the scenarios: a digest run killed, a double reschedule, a retry-failed during a backlog
            played_out: dict[str, Any] = {}
            for x in extras:
                outcome = x.check(stack, sends)
                played_out[x.name] = {**outcome.report, "errors": x.errors}
                failures.extend([*outcome.failures, *(f"{x.name}: {e}" for e in x.errors)])
                unfinished.extend(outcome.unfinished)
            if extras:
                report["scenarios"] = played_out
    report["emails_per_s"] = round(report["emails_in_outbox"] / max(1, report["wall_s"]), 2)
    report["failures"] = failures
    report["out_of_time"] = out_of_time
    report["passed"] = not failures and not out_of_time
    return report


def markdown(r: dict[str, Any]) -> str:
    """The report as the Markdown summary that goes into BENCHMARKS.md and the issue note."""
    return "| check | figure |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in _rows(r)) + "\n"


def side_by_side(reports: list[dict[str, Any]]) -> str:
    """Several runs' reports (one per seed, say) as one Markdown table, a column each."""
    rows = [_rows(r) for r in reports]
    head = "| check | " + " | ".join(f"seed {r['seed']}" for r in reports) + " |\n"
    head += "| --- |" + " --- |" * len(reports) + "\n"
    return (
        head
        + "\n".join(
            f"| {cells[0][0]} | " + " | ".join(str(v) for _k, v in cells) + " |" for cells in zip(*rows, strict=True)
        )
        + "\n"
    )


def _g(x: float | None) -> str:
    return "?" if x is None else f"{x:g}"


def _rows(r: dict[str, Any]) -> list[tuple[str, Any]]:
    rates = r.get("rates", [])
    worst = max(rates, key=lambda x: x["max_in_1s"] / x["rate"]) if rates else None
    free = r.get("free_plan") or []
    small = [f for f in free[1:] if f["last_after_s"] is not None]
    rows = [
        ("seed", r["seed"]),
        ("tenants / recipients", f"{r['tenants']} / {r['recipients']:,}"),
        ("local stacks (one process each)", r.get("shards", 1)),
        ("wall / CPU", f"{r.get('wall_s')} s / {r.get('cpu_s')} s ({r.get('emails_per_s')} emails/s)"),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in (r.get("faults_injected") or {}).items()) or "none"),
        ("final states", ", ".join(f"{k} {v:,}" for k, v in (r.get("final_states") or {}).items())),
        (
            "recipients unrecorded / not final",
            f"{r.get('recipients_without_record')} / {r.get('recipients_not_final')}",
        ),
        (
            "emails in outbox / unique sent / duplicates",
            f"{r.get('emails_in_outbox'):,} / {r.get('unique_sent_recipients'):,} / {r.get('duplicate_emails')}",
        ),
        ("paid tenants above their rate in any 1 s", sum(1 for x in rates if x["max_in_1s"] > x["rate"])),
        (
            "closest to its rate",
            f"{worst['tenant']}: {worst['max_in_1s']} in 1 s at {worst['rate']:g}/s" if worst else "-",
        ),
        ("pace while sending (middle 80% of sends) / rate, tenants up to 10/s: median", _pace(rates, 0, 10)),
        ("... tenants above 10/s: median (the stack's CPU, not the limiter, caps them)", _pace(rates, 10, 1e9)),
        (
            "free plan: large tenant's last email after (sent of its recipients; rejected over the daily cap)",
            f"{free[0]['last_after_s']} s ({free[0]['sent']} of {free[0]['recipients']}; "
            f"{free[0].get('over_daily_cap', '?')})"
            if free
            else "-",
        ),
        (
            "free plan: small tenants' last email after (max)",
            f"{max(f['last_after_s'] for f in small)} s" if small else "-",
        ),
        ("dead letters (each recorded with a reason)", r.get("dead_letters")),
        ("tenants paused (by the reputation guard, say)", len(r.get("paused_tenants") or [])),
        (
            "SES Send event lag: max (claims held)",
            f"{(r.get('send_event_lag_s') or {}).get('max')} s ({_g(r.get('claim_hold_s'))} s)",
        ),
        ("hostile messages recorded", r.get("hostile_messages_recorded")),
        (
            "counters against the ledger: campaigns differing before / after the recount (counts restored)",
            _read_line(r),
        ),
        ("events in the ledger missing from GET /events", (r.get("tenants_read") or {}).get("events_missing", "-")),
        *((f"scenario: {name}", _scenario_line(x)) for name, x in (r.get("scenarios") or {}).items()),
        (
            "invocations / past their timeout / failed for good",
            f"{r.get('invocations')} / {r.get('invocations_past_timeout')} / {r.get('failed_async_events')}",
        ),
        ("result", _verdict(r)),
    ]
    return rows


def _read_line(r: dict[str, Any]) -> str:
    t = r.get("tenants_read")
    if not t:
        return "-"
    restored = ", ".join(f"{k} {v:+}" for k, v in (t.get("counts_restored_by_recount") or {}).items()) or "none"
    return (
        f"{t['counters_differing_before_recount']} / {t['counters_differing_after_recount']} of {t['campaigns']}"
        f" ({restored})"
    )


def _scenario_line(x: dict[str, Any]) -> str:
    """A scenario's figures on one line (its promises are in the verdict)."""
    shown = {k: v for k, v in x.items() if k not in ("last_run", "errors") and v not in (None, [], {})}
    return "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in shown.items()) + (
        f"; errors: {x['errors']}" if x.get("errors") else ""
    )


def _verdict(r: dict[str, Any]) -> str:
    """Passed; a promise broken; or out of time with every promise kept in what was done."""
    if r["failures"]:
        late = f" (and out of time: {'; '.join(r.get('out_of_time') or [])})" if r.get("out_of_time") else ""
        return "**FAILED, a promise broken**: " + "; ".join(r["failures"]) + late
    if r.get("out_of_time"):
        return "**ran out of time**, no promise broken in what was done: " + "; ".join(r["out_of_time"])
    return "**passed**"


def _pace(rates: list[dict[str, Any]], above: float, up_to: float) -> str:
    ratios = sorted(
        x["achieved_middle_80pct"] / x["rate"]
        for x in rates
        if above < x["rate"] <= up_to and "achieved_middle_80pct" in x and math.isfinite(x["achieved_middle_80pct"])
    )
    return f"{ratios[len(ratios) // 2]:.2f} ({len(ratios)} tenants)" if ratios else "-"


def _time_send_events() -> list[float]:
    """Seconds from SES's acceptance (the Send event's mail.timestamp) to ses_events handling the event.

    A claim must outlive this lag (`--claim-hold`): the soak reports its largest, and a duplicate in the
    outbox would show a claim that did not."""
    from datetime import datetime

    from chalicelib.feedback.ses_events import SesEvents

    lags: list[float] = []
    real = SesEvents.record

    def timed(self: Any, raw: str, rec: Any, *ahead: Any) -> str:
        try:
            d = json.loads(raw)
            if d.get("eventType") == "Send":
                at = datetime.fromisoformat(d["mail"]["timestamp"].replace("Z", "+00:00")).timestamp()
                lags.append(time.time() - at)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        return real(self, raw, rec, *ahead)

    SesEvents.record = timed  # type: ignore[method-assign]
    return lags


def _time_send_events_handed(stack: Any) -> list[float]:
    """`_time_send_events` for functions in worker processes: the lag to the end of the ses_events invocation
    that handled the event, measured here (in the runtime) as the handler is in another process."""
    from datetime import datetime

    lags: list[float] = []
    runner = stack.runner
    real = runner.invoke

    def timed(fn: Any, event: dict[str, Any]) -> Any:
        answer = real(fn, event)
        if fn.handler_name == "ses_events":
            for record in event.get("Records") or []:
                try:
                    body = json.loads(record["body"])
                    d = json.loads(body["Message"]) if "Message" in body else body
                    if d.get("eventType") == "Send":
                        at = datetime.fromisoformat(d["mail"]["timestamp"].replace("Z", "+00:00")).timestamp()
                        lags.append(time.time() - at)
                except (ValueError, KeyError, TypeError, AttributeError):
                    pass
        return answer

    runner.invoke = timed
    return lags


def _lag_summary(lags: list[float]) -> dict[str, float]:
    if not lags:
        return {}
    ordered = sorted(lags)
    return {
        "events": len(ordered),
        "median": round(ordered[len(ordered) // 2], 1),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
        "max": round(ordered[-1], 1),
    }


def _wait(stack: Any, budget_s: float, total: int) -> bool:
    """Wait for the pipeline to drain, printing progress each minute."""
    end = time.monotonic() + max(0.0, budget_s)
    while time.monotonic() < end:
        if stack.wait_until_drained(timeout=min(60.0, end - time.monotonic()), settle_s=5.0, poll_s=2.0):
            return True
        sent = sum(1 for _ in _read_sends(stack.config.outbox))
        print(f"  {time.strftime('%H:%M:%S')} {sent}/{total} sent", flush=True)
    return False


def _stall_diagnosis(stack: Any, names: list[str]) -> list[str]:
    """Why a queue with messages left was not drained: its lease, its tenant's pause, the local SQS index.

    One line per queue, so that a stall found at a seed can be explained from the report alone: a live
    lease nobody renews (a drainer that died holding it), a paused tenant, or the stand-in's ready index
    disagreeing with its messages (a receive that finds nothing while messages count as visible)."""
    from moto.sqs.models import sqs_backends

    from chalicelib import wiring
    from infra.local.fast_sqs import FastQueue

    c = wiring.container()
    backend = sqs_backends[stack.config.account_id][stack.config.region]
    now_ms = time.time() * 1000
    out = []
    for name in names:
        parts = [f"stalled {name}:"]
        try:
            lease = c.leases.holder(name)
            parts.append(f"lease live for {(lease.expires_ms - now_ms) / 1000:.0f}s" if lease else "no live lease")
        except Exception as exc:
            parts.append(f"lease unreadable ({type(exc).__name__})")
        owner = name.removeprefix(stack.settings.resources.tenant_queue_prefix)
        tenant = c.tenants.get(owner) if owner != name else None
        if tenant is not None:
            parts.append(f"tenant paused: {tenant.paused_reason}" if tenant.paused_reason else "tenant not paused")
        q = backend.queues.get(name)
        if isinstance(q, FastQueue) and not q.fifo_queue:
            with q._messages_lock:
                q._advance()
                stale = sum(1 for mid in q._ready if mid not in q._by_id)
                unindexed = sum(1 for mid in q._by_id if mid not in q._state)
                ready = len(q._ready)
            parts.append(f"index: {ready} ready, {stale} ready but gone, {unindexed} messages without a state")
            try:  # a receive that changes nothing (visibility 0): does the stand-in hand a message out?
                got = q.fast_receive(1, 0, 0, [], backend)
                parts.append(f"a receive now returns {len(got)}")
            except Exception as exc:
                parts.append(f"a receive now raises {type(exc).__name__}: {exc}")
        out.append(" ".join(parts))
    return out


def _left_messages(stack: Any, names: list[str]) -> list[str]:
    """What each message left in a queue is waiting for: read from moto's SQS model in this process."""
    from moto.sqs.models import sqs_backends

    queues = sqs_backends[stack.config.account_id][stack.config.region].queues
    now_ms = time.time() * 1000
    out = []
    for name in names:
        q = queues.get(name)
        for m in list(q._messages) if q is not None else []:
            attrs = {k: v.get("StringValue") for k, v in (m.message_attributes or {}).items()}
            try:
                to = json.loads(m.body).get("recipient", {}).get("email", "?")
            except ValueError:
                to = "?"
            delayed_s = max(0.0, m.delayed_until - now_ms) / 1000
            invisible_s = max(0.0, (m.visible_at or 0) - now_ms) / 1000
            out.append(
                f"left in {name}: {to} receives={m.approximate_receive_count} delayed_for={delayed_s:.0f}s"
                f" visible_in={invisible_s:.0f}s sent={m.sent_timestamp} attrs={attrs}"
            )
    return out


def _what_tenants_read(stack: Any, campaigns: list[tuple[str, str]], wait_s: float = 180.0) -> dict[str, Any]:
    """Each campaign's counters against its ledger, before and after the recount (run with no settling time:
    the soak's writers are done), and the events its ledger implies against what GET /events gives."""
    from chalicelib import wiring
    from chalicelib.jobs.recount import Recount
    from infra.ledger_checks import counter_drift, events_missing

    c = wiring.container()
    before = {key: counter_drift(c, *key) for key in campaigns}
    deadline = time.monotonic() + wait_s
    while True:  # the stream's last notes and events are a few seconds behind the ledger
        missing = {key: events_missing(stack, c, *key) for key in campaigns}
        if not any(missing.values()) or time.monotonic() > deadline:
            break
        time.sleep(5)
    recount = Recount(c.recounts, c.ledger, c.stats, settle_s=0).run(lambda: 10**9)
    after = {key: counter_drift(c, *key) for key in campaigns}
    differing = {f"{u}/{k}": d for (u, k), d in after.items() if d}
    lost: Counter[str] = Counter()
    for d in before.values():
        lost.update(d)
    return {
        "campaigns": len(campaigns),
        "counters_differing_before_recount": sum(1 for d in before.values() if d),
        "counts_restored_by_recount": dict(sorted(lost.items())),
        "recount_corrected": recount.corrected,
        "counters_differing_after_recount": len(differing),
        "differing_after": dict(list(differing.items())[:5]),
        "events_missing": sum(len(m) for m in missing.values()),
        "events_missing_examples": [f"{u}/{k}: {sorted(m)[:3]}" for (u, k), m in missing.items() if m][:5],
    }


def _read_sends(outbox: Path) -> list[dict[str, Any]]:
    path = outbox / "sends.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _dead_letters(stack: Any, dlq: str) -> list[str]:
    """Every message in the dead-letter queue, visible or not (reconcile_dead_letters hides those it has
    looked at), read from moto's SQS model in this process."""
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[stack.config.account_id][stack.config.region].queues.get(dlq)
    return [m.body for m in queue._messages] if queue is not None else []


def run_sharded(args: argparse.Namespace) -> dict[str, Any]:
    """Run each shard's stack in its own process, their output prefixed, and merge their reports."""
    import subprocess
    import threading

    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for k in range(args.shards):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--shard", str(k), "--json", f"{tmp}/{k}.json"]
            names = ("seed", "shards", "paid", "free", "recipients", "free_rate", "faults_for", "timeout", "claim_hold")
            for name in names:
                cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
            if args.worker_processes:
                cmd.append("--worker-processes")
            if not args.scenarios:
                cmd.append("--no-scenarios")
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))

        def relay(k: int, stream: Any) -> None:
            for line in stream:
                print(f"[stack {k + 1}] {line}", end="", flush=True)

        relays = [threading.Thread(target=relay, args=(k, p.stdout), daemon=True) for k, p in enumerate(procs)]
        for t in relays:
            t.start()
        for p in procs:
            p.wait()
        for t in relays:
            t.join()
        reports = []
        for k, p in enumerate(procs):
            path = Path(tmp) / f"{k}.json"
            if not path.exists():  # the others' reports still count, and this one fails the soak
                why = f"ended without a report (exit {p.returncode}); its output above says why"
                reports.append({"seed": args.seed, "shard": f"{k + 1} of {args.shards}", "failures": [why]})
                continue
            reports.append(json.loads(path.read_text()))
    return merge(reports)


def merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report for the whole soak from each stack's: counts add up, lists join, every check must pass."""

    def total(key: str) -> int:
        return sum(int(r.get(key) or 0) for r in reports)

    def counts(key: str) -> dict[str, int]:
        c: Counter[str] = Counter()
        for r in reports:
            c.update(r.get(key) or {})
        return dict(sorted(c.items()))

    def tagged(r: dict[str, Any], key: str) -> list[str]:
        return [f"stack {r['shard']}: {x}" for x in r.get(key) or []]

    m: dict[str, Any] = {"seed": reports[0]["seed"], "shards": len(reports)}
    for key in ("tenants", "recipients"):
        m[key] = total(key)
    m["drained"] = all(r.get("drained") for r in reports)
    m["wall_s"] = max(int(r.get("wall_s") or 0) for r in reports)
    m["cpu_s"] = total("cpu_s")
    m["faults_injected"] = counts("faults_injected")
    for key in ("failed_async_events", "invocations", "invocations_past_timeout"):
        m[key] = total(key)
    m["final_states"] = counts("final_states")
    for key in (
        "recipients_without_record",
        "recipients_not_final",
        "emails_in_outbox",
        "unique_sent_recipients",
        "duplicate_emails",
    ):
        m[key] = total(key)
    m["rates"] = [x for r in reports for x in r.get("rates") or []]
    m["free_plan"] = [x for r in reports for x in r.get("free_plan") or []]
    m["dead_letters"] = total("dead_letters")
    m["paused_tenants"] = [x for r in reports for x in tagged(r, "paused_tenants")]
    m["details"] = [x for r in reports for x in tagged(r, "details")]
    m["hostile_messages_recorded"] = total("hostile_messages_recorded")
    m["scenarios"] = {k: v for r in reports for k, v in (r.get("scenarios") or {}).items()}
    read = [r["tenants_read"] for r in reports if r.get("tenants_read")]
    if read:
        restored: Counter[str] = Counter()
        for x in read:
            restored.update(x.get("counts_restored_by_recount") or {})
        m["tenants_read"] = {
            **{
                k: sum(int(x.get(k) or 0) for x in read)
                for k in (
                    "campaigns",
                    "counters_differing_before_recount",
                    "recount_corrected",
                    "counters_differing_after_recount",
                    "events_missing",
                )
            },
            "counts_restored_by_recount": dict(sorted(restored.items())),
        }
    m["claim_hold_s"] = next((r["claim_hold_s"] for r in reports if r.get("claim_hold_s") is not None), None)
    lags = [r.get("send_event_lag_s") or {} for r in reports]
    m["send_event_lag_s"] = {
        "events": sum(x.get("events", 0) for x in lags),
        "max": max((x.get("max", 0) for x in lags), default=0),
        "p99 (largest of the stacks)": max((x.get("p99", 0) for x in lags), default=0),
    }
    m["emails_per_s"] = round(m["emails_in_outbox"] / max(1, m["wall_s"]), 2)
    m["failures"] = [x for r in reports for x in tagged(r, "failures")]
    m["out_of_time"] = [x for r in reports for x in tagged(r, "out_of_time")]
    m["passed"] = all(r.get("passed") for r in reports)
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--paid", type=int, default=40, help="paid tenants (rates 1 to 200 per second)")
    ap.add_argument("--free", type=int, default=10, help="free-plan tenants")
    ap.add_argument("--recipients", type=int, default=100_000)
    ap.add_argument("--free-rate", type=float, default=10.0)
    ap.add_argument("--faults-for", type=float, default=480.0, help="seconds during which faults are injected")
    ap.add_argument("--timeout", type=float, default=1740.0, help="seconds until the run is given up")
    ap.add_argument(
        "--claim-hold",
        type=float,
        default=600.0,
        help="MOONSEND_CLAIM_HOLD_S: how long a dead sender's claims wait for SES's Send event (default on AWS: 1800)",
    )
    ap.add_argument(
        "--worker-processes",
        action="store_true",
        help="each stack runs each function in processes of its own (infra.local.workers); CPU counts theirs",
    )
    ap.add_argument(
        "--no-scenarios",
        dest="scenarios",
        action="store_false",
        help="leave out the scenarios of bench/soak_scenarios.py (a digest run killed, a double reschedule, "
        "a retry-failed during a backlog)",
    )
    ap.add_argument("--json", type=Path, help="also write the report here")
    ap.add_argument("--report", type=Path, help="also write a Markdown summary here (bench/run.py)")
    ap.add_argument(
        "--shards",
        type=int,
        default=(os.cpu_count() or 1) + 1,
        help="local stacks side by side, one process each: one more than the cores, since a stack's process "
        "waits on its GIL and sockets about a fifth of the time (3 on 2 cores: 1709 s where 2 took over 1740)",
    )
    ap.add_argument("--shard", type=int, help=argparse.SUPPRESS)  # this process runs that one stack
    ap.add_argument(
        "--table",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="print earlier runs' --json reports as one table, and stop",
    )
    args = ap.parse_args()
    if args.table:
        print(side_by_side([json.loads(p.read_text()) for p in args.table]), end="")
        return 0
    from chalicelib.core.config import MIN_CLAIM_HOLD_S

    if args.claim_hold < MIN_CLAIM_HOLD_S:  # the pipeline would hold them that long anyway: say so
        ap.error(f"--claim-hold: claims are held at least {MIN_CLAIM_HOLD_S} s (twice the visibility timeout)")
    report = run(args) if args.shards <= 1 or args.shard is not None else run_sharded(args)
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    if args.shard is not None:  # one stack of several: its report goes to the parent, which merges them
        return 0 if report["passed"] else 1
    print(text)
    if args.report:
        args.report.write_text(markdown(report))
    if report["failures"]:
        print("FAILED, a promise broken:\n- " + "\n- ".join(report["failures"]))
    if report.get("out_of_time"):
        kept = "" if report["failures"] else ", no promise broken in what was done"
        print(f"RAN OUT OF TIME{kept}:\n- " + "\n- ".join(report["out_of_time"]))
    if report["passed"]:
        print("PASSED")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
