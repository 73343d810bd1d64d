"""The fault explorer (infra.local.explorer): for each function, every AWS call of its scenario's invocation
killed before it, killed after it and throttled, and the invocation run twice at once; after each run, once
the stack is at rest (the clock moved past AWS's waits), every promise checked (tests/faults/invariants.py).

`make faults` runs every fault of every scenario (MOONSEND_FAULTS=all); MOONSEND_FAULTS=<n> a slice of 1 in
n, the faults whose place in the rotation matches the UTC day (FAULTS_SLICES when unset); <k>/<n> slice k of
n; MOONSEND_FAULTS_MATCHING=<text> only the faults whose name has that text in it; MOONSEND_FAULTS_PARTS=<p>
each function's in p tests; MOONSEND_FAULTS_SCENARIOS=<m> only the scenarios of 1 in m, another share each
UTC day (`make test`'s: every scenario's run with no fault, which finds its calls, is most of its time), all
when unset (docs/testing.md).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import time
from typing import Any

import pytest

from chalicelib import wiring
from infra.local.explorer import CALL_MODES, KILL_AFTER, KILL_BEFORE, THROTTLED, TWICE, Explorer, Fault, Site
from tests.faults.invariants import broken
from tests.faults.moved_clock import CLOCK
from tests.faults.scenarios import RECEIVERS, SCENARIOS, STEP_S, Scenario, bring_to_rest, fresh_user, recount

pytestmark = pytest.mark.faults
FAULTS_SLICES = 8
# Each function's faults spread over this many tests, so that xdist's workers share a big function's (every
# part runs its function's scenario once with no fault first, to find its sites).
PARTS = max(1, int(os.environ.get("MOONSEND_FAULTS_PARTS", "1")))
# How many of the clock's moves (scenarios.STEP_S each) the stack may take to come to rest after a fault. A
# failure the code sees (a throttled call) or none is over within one: a visibility timeout, Lambda's
# retries. A kill may leave what it held until that lapses: a drain's lease (its time and a grace) or a
# recipient's claim (30 minutes, which keep a second drainer from sending it while the first may): three.
MOVES_ALLOWED = {None: 1, THROTTLED: 1, KILL_BEFORE: 3, KILL_AFTER: 3}


@pytest.fixture(scope="session")
def explorer(stack: Any) -> Any:
    # The scenarios run each scheduled job as its rule would, when they choose: a rule ticking on its own (a
    # sweep) would take work from the run that the scenario watches.
    stack.scheduler.stop()
    explorer = Explorer(stack, CLOCK)
    explorer.install()
    explorer.install_api(stack.api)
    yield explorer
    explorer.uninstall()


def _run(
    stack: Any, explorer: Explorer, scenario: Scenario, fault: Fault | None = None, twice: bool = False
) -> list[str]:
    user = fresh_user()
    wiring.reset()  # every run's invocations start in cold containers: its sites are the discovery run's
    with explorer.watching(scenario.function, (user, *scenario.also), fault, twice=twice):
        campaign = scenario.start(stack, user)
        moves = bring_to_rest(stack, campaign)
        if scenario.after_rest is not None:
            scenario.after_rest(stack, user)
            moves = max(moves, bring_to_rest(stack, campaign))
    recount(stack)
    receiver = RECEIVERS.pop(user, None)
    found = broken(stack, campaign, receiver)
    if receiver is not None:
        receiver.close()
    allowed = MOVES_ALLOWED[fault.mode if fault is not None else None]
    if moves > allowed:  # a queue held with its email, or a recipient kept waiting, past what the fault explains
        found.append(f"at rest only after {moves * STEP_S:.0f} s (the fault explains {allowed * STEP_S:.0f} s)")
    if explorer.watched is None:
        found.append(f"no invocation of {scenario.function} named {user}")
    elif fault is not None and explorer.injected is None:
        found.append(NOT_REACHED)
    return found


# The run's watched invocation made fewer calls than the discovery run's (a stream's batch, or an SES event's,
# holds other records this time): the fault was not tried, nothing was broken by it.
NOT_REACHED = "the fault's call was not made on this run"


def _explored(stack: Any, explorer: Explorer, scenario: Scenario, fault: Fault) -> list[str] | None:
    """What the fault broke; tried again once when its call was not reached; None when it never was."""
    for _ in range(2):
        found = _run(stack, explorer, scenario, fault)
        if found != [NOT_REACHED]:
            return [f for f in found if f != NOT_REACHED]
    return None


def _chosen(sites: list[Site], part: int) -> list[Fault | None]:
    """The faults to run (None: the invocation twice at once) in this part of the function's faults."""
    faults: list[Fault | None] = [Fault(site, mode) for site in sites for mode in CALL_MODES]
    faults.append(None)
    function = sites[0].function
    only = os.environ.get("MOONSEND_FAULTS_MATCHING")  # one fault again: "UpdateItem#3 throttled"
    if only:
        return [f for f in faults if f is not None and only in str(f)] if part == 0 else []
    wanted = os.environ.get("MOONSEND_FAULTS", str(FAULTS_SLICES))
    # `all`; `<n>`: the slice of 1 in n whose turn it is by the UTC day (the real day: the moved clock is
    # ours); `<k>/<n>`: slice k (from 0) of n.
    k, _, n = ("0/1" if wanted == "all" else wanted).partition("/")
    slices = max(1, int(n or k))
    turn = int(k) % slices if n else datetime.datetime.now(datetime.UTC).toordinal() % slices
    return [f for f in faults if _place(f, function) % slices == turn and _place(f, function) // slices % PARTS == part]


def _progress(line: str, found: list[str]) -> None:
    """Each fault as it ends, to MOONSEND_FAULTS_LOG (xdist's workers print nothing until their test ends)."""
    path = os.environ.get("MOONSEND_FAULTS_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write("".join(f"{x}\n" for x in [line, *(f"  BROKEN {f}" for f in found)]))


def _place(fault: Fault | None, function: str) -> int:
    return int(hashlib.sha256(str(fault or f"{function} {TWICE}").encode()).hexdigest(), 16)


def _todays(scenarios: list[str]) -> list[str]:
    """The scenarios whose turn it is by the UTC day, 1 in MOONSEND_FAULTS_SCENARIOS; every one when unset."""
    share = max(1, int(os.environ.get("MOONSEND_FAULTS_SCENARIOS", "1")))
    turn = datetime.datetime.now(datetime.UTC).toordinal() % share
    return [name for n, name in enumerate(sorted(scenarios)) if n % share == turn]


@pytest.mark.parametrize(("function", "part"), [(f, p) for f in _todays(list(SCENARIOS)) for p in range(PARTS)])
def test_every_call_killed_or_throttled_and_the_invocation_twice_keeps_every_promise(
    stack: Any, explorer: Explorer, function: str, part: int, record_property: Any
) -> None:
    scenario = SCENARIOS[function]
    started = time.monotonic()
    assert _run(stack, explorer, scenario) == []  # the scenario keeps every promise with no fault
    sites = explorer.sites()
    assert sites, f"{function}'s invocation made no AWS call"
    chosen, failures = _chosen(sites, part), list[str]()
    unreached = list[Fault]()
    for fault in chosen:
        t0 = time.monotonic()
        if fault is None:
            found = [f"{function} {TWICE}: {x}" for x in _run(stack, explorer, scenario, twice=True)]
        elif (explored := _explored(stack, explorer, scenario, fault)) is None:
            unreached.append(fault)
            found = []
        else:
            found = [f"{fault}: {x}" for x in explored]
        failures.extend(found)
        _progress(f"{fault or f'{function} {TWICE}'}: {time.monotonic() - t0:.0f} s, {len(found)} broken", found)
    took = time.monotonic() - started
    record_property("sites", len(sites))
    every = len(sites) * len(CALL_MODES) + 1
    ran = f"{len(chosen)} of {every} faults run ({len(unreached)} not reached)"
    print(f"\n{function} part {part + 1}/{PARTS}: {len(sites)} calls, {ran}, {took:.0f} s")
    for site in sites:
        print(f"  {site}")
    for fault in unreached:
        print(f"  NOT REACHED (twice) {fault}")
    for failure in failures:
        print(f"  BROKEN {failure}")
    assert failures == [], f"{len(failures)} broken: {failures[:3]}"
