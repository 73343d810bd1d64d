"""The fault explorer (infra.local.explorer): for each function, every AWS call of its scenario's invocation
killed before it, killed after it and throttled, and the invocation run twice at once; after each run, once
the stack is at rest (the clock moved past AWS's waits), every promise checked (tests/faults/invariants.py).

`make faults` runs every fault of every scenario (MOONSEND_FAULTS=all); MOONSEND_FAULTS=<n> a slice of 1 in
n, the faults whose place in the rotation matches the UTC day (FAULTS_SLICES when unset); and
MOONSEND_FAULTS_MATCHING=<text> only the faults whose name has that text in it (docs/testing.md).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import time
from typing import Any

import pytest

from chalicelib import wiring
from infra.local.explorer import CALL_MODES, TWICE, Explorer, Fault, Site
from tests.faults.invariants import broken
from tests.faults.moved_clock import CLOCK
from tests.faults.scenarios import SCENARIOS, Scenario, bring_to_rest, fresh_user, recount

pytestmark = pytest.mark.faults
FAULTS_SLICES = 8


@pytest.fixture(scope="session")
def explorer(stack: Any) -> Any:
    explorer = Explorer(stack)
    explorer.install()
    # moto stamps a stream record with its own clock (`datetime`), which the moved one does not move: the
    # poller judges a record's age by the same clock, or every record would look as old as the moves.
    for poller in stack.stream_pollers:
        poller._clock = CLOCK.real
    yield explorer
    explorer.uninstall()


def _run(
    stack: Any, explorer: Explorer, scenario: Scenario, fault: Fault | None = None, twice: bool = False
) -> list[str]:
    user = fresh_user()
    wiring.reset()  # every run's invocations start in cold containers: its sites are the discovery run's
    with explorer.watching(scenario.function, (user, *scenario.also), fault, twice=twice):
        campaign = scenario.start(stack, user)
        bring_to_rest(stack, campaign)
        if scenario.after_rest is not None:
            scenario.after_rest(stack, user)
            bring_to_rest(stack, campaign)
    recount(stack)
    found = broken(stack, campaign)
    if explorer.watched is None:
        found.append(f"no invocation of {scenario.function} named {user}")
    elif fault is not None and explorer.injected is None:
        found.append("the fault's call was not made on this run")  # the scenario took another path
    return found


def _chosen(sites: list[Site]) -> list[Fault | None]:
    """The faults to run (None: the invocation twice at once)."""
    faults: list[Fault | None] = [Fault(site, mode) for site in sites for mode in CALL_MODES]
    faults.append(None)
    only = os.environ.get(
        "MOONSEND_FAULTS_MATCHING"
    )  # one fault again: `MOONSEND_FAULTS_MATCHING="UpdateItem#3 throttled"`
    if only:
        return [f for f in faults if f is not None and only in str(f)]
    wanted = os.environ.get("MOONSEND_FAULTS", str(FAULTS_SLICES))
    if wanted == "all":
        return faults
    slices = max(1, int(wanted))
    today = datetime.datetime.now(datetime.UTC).toordinal() % slices  # the real day: the moved clock is ours
    return [
        f for f in faults if int(hashlib.sha256(str(f or sites[0].function).encode()).hexdigest(), 16) % slices == today
    ]


@pytest.mark.parametrize("function", sorted(SCENARIOS))
def test_every_call_killed_or_throttled_and_the_invocation_twice_keeps_every_promise(
    stack: Any, explorer: Explorer, function: str, record_property: Any
) -> None:
    scenario = SCENARIOS[function]
    started = time.monotonic()
    assert _run(stack, explorer, scenario) == []  # the scenario keeps every promise with no fault
    sites = explorer.sites()
    assert sites, f"{function}'s invocation made no AWS call"
    chosen, failures = _chosen(sites), list[str]()
    for fault in chosen:
        if fault is None:
            failures.extend(f"{function} {TWICE}: {x}" for x in _run(stack, explorer, scenario, twice=True))
        else:
            failures.extend(f"{fault}: {x}" for x in _run(stack, explorer, scenario, fault))
    took = time.monotonic() - started
    record_property("sites", len(sites))
    every = len(sites) * len(CALL_MODES) + 1
    print(f"\n{function}: {len(sites)} calls, {len(chosen)} of {every} faults run, {took:.0f} s")
    for site in sites:
        print(f"  {site}")
    for failure in failures:
        print(f"  BROKEN {failure}")
    assert failures == [], f"{len(failures)} broken: {failures[:3]}"
