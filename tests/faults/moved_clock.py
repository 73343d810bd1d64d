"""A pytest plugin (`-p tests.faults.moved_clock`): the process's `time.time()` made movable before anything
takes it as a default argument (a constructor's `clock=time.time` would keep the real one), so that the fault
explorer moves every clock of the stack at once (infra.local.explorer.MovedClock)."""

from __future__ import annotations

from infra.local.explorer import MovedClock

CLOCK = MovedClock()
CLOCK.install()
