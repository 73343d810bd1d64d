"""A tenant idle for days gets its first email within seconds, not when AWS's metrics wake its alarm.

Runs `bench/first_email.py` as a user would: the local stack with `--aws-timing` (alarms on SQS's
metrics as SQS publishes them: once a minute, 15 minutes late for a queue that has been idle), a new
paid tenant per trial, the time from the publish to its email in the outbox. Without the writer
starting the drain (chalicelib.queueing.drain_starter) the first email waits for the sweeper's minute
or the alarm's quarter hour.
"""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_the_first_email_to_a_tenant_whose_queue_is_new_goes_out_within_two_seconds_of_the_publish():
    run = subprocess.run(
        [sys.executable, "bench/first_email.py", "--trials", "3", "--phase-s", "0", "--within-s", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    trials = [line for line in run.stdout.splitlines() if line.startswith("trial")]
    assert run.returncode == 0 and len(trials) == 3, run.stdout + run.stderr[-3000:]
    assert all("started by precompile" in t for t in trials), run.stdout
